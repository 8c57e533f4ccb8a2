// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard-data's subcommands: each file registers one (shards.cpp, inspect.cpp, ...) and
// main.cpp dispatches on the first argument.
//
//   static const bool registered = register_subcommand(
//       {"inspect", "a token shard's header, sidecars and first tokens", run_inspect});
//
// run(args) gets "zeroshard-data NAME" as args[0] and the subcommand's own arguments after it;
// it returns the exit status and throws zeroshard errors (main prints them).

#include <functional>
#include <string>
#include <vector>

namespace zeroshard::data_tool {

struct Subcommand {
  std::string name;
  std::string summary;  // one line for the overview
  std::function<int(const std::vector<std::string>& args)> run;
};

// Adds `s` (at static initialisation); returns true.
bool register_subcommand(Subcommand s);
// Every registered subcommand, by name.
const std::vector<Subcommand>& subcommands();

}  // namespace zeroshard::data_tool
