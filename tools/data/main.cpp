// SPDX-License-Identifier: Apache-2.0
// zeroshard-data: data preparation for training (docs/data.md).
//
//   zeroshard-data shards --tokenizer DIR --out DIR [--seq-len N] INPUT...   text/JSONL -> token shards
//   zeroshard-data inspect FILE...                                           a shard's header and tokens
//   zeroshard-data index --eos-id ID FILE...                                 document indexes of shards
//
// Each subcommand lives in its own file and registers itself (subcommand.h).

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "subcommand.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
namespace zt = zeroshard::data_tool;

namespace zeroshard::data_tool {

static std::vector<Subcommand>& registry() {
  static std::vector<Subcommand> all;
  return all;
}

bool register_subcommand(Subcommand s) {
  auto& all = registry();
  all.push_back(std::move(s));
  std::sort(all.begin(), all.end(), [](const Subcommand& a, const Subcommand& b) { return a.name < b.name; });
  return true;
}

const std::vector<Subcommand>& subcommands() { return registry(); }

}  // namespace zeroshard::data_tool

namespace {

std::string overview() {
  std::string text = "usage: zeroshard-data COMMAND [OPTIONS] ...\n\nData preparation for zeroshard training.\n\n"
                     "Commands:\n";
  for (const zt::Subcommand& s : zt::subcommands()) {
    char line[160];
    std::snprintf(line, sizeof(line), "  %-10s %s\n", s.name.c_str(), s.summary.c_str());
    text += line;
  }
  return text + "\nzeroshard-data COMMAND --help lists a command's options.\n";
}

std::string names() {
  std::string out;
  for (const zt::Subcommand& s : zt::subcommands()) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

int dispatch(int argc, char** argv) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first.empty() || first == "-h" || first == "--help") {
    std::fputs(overview().c_str(), first.empty() ? stderr : stdout);
    return first.empty() ? 2 : 0;
  }
  if (first == "--version") {
    std::printf("%s\n", zs::cli::version_line("zeroshard-data").c_str());
    return 0;
  }
  for (const zt::Subcommand& s : zt::subcommands()) {
    if (s.name != first) continue;
    std::vector<std::string> args = {"zeroshard-data " + s.name};
    args.insert(args.end(), argv + 2, argv + argc);
    return s.run(args);
  }
  ZS_THROW(zs::UsageError, "unknown command '", first, "' (commands: ", names(), "; zeroshard-data --help)");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const zs::UsageError& e) {
    std::fprintf(stderr, "zeroshard-data: usage error: %s\n", e.message().c_str());
    return 2;
  } catch (const zs::Error& e) {
    std::fprintf(stderr, "zeroshard-data: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zeroshard-data: %s\n", e.what());
  }
  return 1;
}
