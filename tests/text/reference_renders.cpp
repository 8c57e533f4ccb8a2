// SPDX-License-Identifier: Apache-2.0
#include "text/reference_renders.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace zeroshard::test {
namespace {

std::string clients_dir() {
  const char* env = std::getenv("ZS_TEST_CLIENTS");
  return env != nullptr ? env : ZS_CLIENTS_DIR;
}

void write_text_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

}  // namespace

std::string source_path(const std::string& relative) { return std::string(ZS_SOURCE_DIR) + "/" + relative; }

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string scratch_dir() {
  static const std::string dir = [] {
    std::string pattern = (std::filesystem::temp_directory_path() / "zs_chat_template_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    return pattern;
  }();
  static const struct Cleanup {
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup;
  return dir;
}

std::string run_command(const std::string& command) {
  const std::string log = scratch_dir() + "/command.log";
  const int status = std::system((command + " >" + log + " 2>&1").c_str());
  if (status == 0) return "";
  std::string output = read_text_file(log);
  if (output.size() > 2000) output = "..." + output.substr(output.size() - 2000);
  return "`" + command + "` failed (status " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : status) +
         "): " + output;
}

ReferenceRenders render_with_references(const std::vector<RenderCase>& cases) {
  ReferenceRenders out;
  const std::string modules = clients_dir();
  if (!std::filesystem::exists(modules + "/@huggingface/jinja/package.json")) {
    out.problem = "the test clients are missing from " + modules +
                  ": run scripts/install-clients.sh with the build folder (e.g. scripts/install-clients.sh build)";
    return out;
  }
  if (const std::string problem = run_command("node --version"); !problem.empty()) {
    out.problem = "Node.js is needed to run @huggingface/jinja: " + problem;
    return out;
  }
  if (const std::string problem = run_command("/usr/bin/python3 -c 'import jinja2'"); !problem.empty()) {
    out.problem = "Python's Jinja2 is needed (Debian: python3-jinja2, installed by scripts/setup.sh --tests): " + problem;
    return out;
  }
  Json list = Json::array();
  for (const RenderCase& c : cases) {
    list.push_back({{"name", c.name}, {"template", c.template_text}, {"context", c.context}, {"now", c.now}});
  }
  const std::string dir = scratch_dir();
  write_text_file(dir + "/cases.json", Json{{"cases", list}}.dump());
  const std::string js = "node " + source_path("tests/text/render_jinja.mjs") + " " + dir + "/cases.json " + dir +
                         "/js.json " + modules;
  const std::string py = "/usr/bin/python3 " + source_path("tests/text/render_jinja.py") + " " + dir + "/cases.json " +
                         dir + "/python.json";
  for (const std::string& command : {js, py}) {
    if (std::string problem = run_command(command); !problem.empty()) {
      out.problem = problem;
      return out;
    }
  }
  out.js = Json::parse(read_text_file(dir + "/js.json"));
  out.python = Json::parse(read_text_file(dir + "/python.json"));
  return out;
}

}  // namespace zeroshard::test
