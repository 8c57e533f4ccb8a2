// SPDX-License-Identifier: Apache-2.0
// load_run and run_main (main.h): the config is read, validated, resolved and checked against what
// the program acts on before MPI starts, so a bad config ends every rank alike with one line.

#include "zeroshard/config/main.h"

#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/launch_env.h"
#include "zeroshard/config/resolve.h"
#include "zeroshard/core/main.h"

namespace zeroshard {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// ConfigError naming every key that was set but that `program` does not act on.
void refuse_unread_keys(const Program& program, const ConfigOrigin& origin) {
  std::vector<std::string> unread;
  for (const std::string& key : origin.set_keys()) {
    if (program.acts_on(key)) continue;
    const std::string where = origin.of(key);
    const bool by_override = where.compare(0, 6, "--set ") == 0;
    if (program.accept_unread_in_file && !by_override) continue;
    unread.push_back(key + " (set by " + where + ")");
  }
  if (unread.empty()) return;
  ZS_THROW(ConfigError, program.name, " does not act on ",
           unread.size() == 1 ? unread.front() : detail::concat(unread.size(), " keys that were set: ", join(unread)),
           ", so the run would ignore ", unread.size() == 1 ? "it: remove it" : "them: remove them", "; ",
           program.name, " acts on ", join(program.reads));
}

// Errors before MPI starts still say which process they come from: the launcher's rank, this host.
void identify_process_from_launcher() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) std::snprintf(host, sizeof(host), "unknown-host");
  const LaunchEnv env = detect_launch_env();
  detail::set_process_identity(env.rank, std::max(env.world_size, 1), host);
}

// ZS_PRINT_PROGRAM_KEYS=1 (main.h): the program's name and keys on stdout, then the process ends.
void print_program_keys_if_asked(const Program& program) {
  const char* asked = std::getenv(kPrintProgramKeysEnv);
  if (asked == nullptr || std::string(asked) != "1") return;
  std::printf("%s\n", program.name.c_str());
  if (program.accept_unread_in_file) std::printf("%s\n", kAcceptsFileKeysLine);
  for (const std::string& key : program.reads) std::printf("%s\n", key.c_str());
  std::fflush(stdout);
  std::exit(0);
}

}  // namespace

std::string Run::config_text() const {
  std::string text;
  google::protobuf::TextFormat::PrintToString(config, &text);
  return text;
}

Run load_run(int argc, const char* const* argv, const ProgramOf& program_of) {
  const CommandLine cl = parse_command_line(argc, argv);
  ConfigOrigin origin;
  Run run;
  run.config = build_config(cl, &origin);
  const Program program = program_of(run.config);
  print_program_keys_if_asked(program);
  refuse_unread_keys(program, origin);
  run.options = resolve(run.config);
  run.args = cl.rest;
  return run;
}

Run load_run(int argc, const char* const* argv, const Program& program) {
  return load_run(argc, argv, [&program](const Config&) { return program; });
}

int run_main(int argc, char** argv, const Program& program, const std::function<int(Session&, const Run&)>& body) {
  return run_main(argc, argv, [&program](const Config&) { return program; }, body);
}

int run_main(int argc, char** argv, const ProgramOf& program_of, const std::function<int(Session&, const Run&)>& body) {
  Run run;
  try {
    identify_process_from_launcher();
    run = load_run(argc, argv, program_of);
  } catch (const std::exception& e) {
    abort_job_for(e);  // MPI has not started: every rank prints its line and exits with status 1
  }
  std::vector<char*> rest;
  for (std::string& a : run.args) rest.push_back(a.data());
  const int n = static_cast<int>(rest.size());
  rest.push_back(nullptr);  // argv convention
  return run_main(n, rest.data(), run.options.session, [&](Session& s) { return body(s, run); });
}

}  // namespace zeroshard
