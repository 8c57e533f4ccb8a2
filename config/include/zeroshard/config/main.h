// SPDX-License-Identifier: Apache-2.0
#pragma once
// The entry point of a program with a config: parse --config / --set / ZS_CONFIG, validate,
// resolve, refuse every key that was set (in the file or by --set) which the program does not act
// on, then start the Session with the resolved SessionOptions and run the body.
//
//   int main(int argc, char** argv) {
//     const zeroshard::Program program{"my_train", {zeroshard::keys::engine(), zeroshard::keys::trainer()}};
//     return zeroshard::run_main(argc, argv, program, [](zeroshard::Session& s, const zeroshard::Run& run) {
//       zeroshard::ShardingEngine engine(s, model.ptr(), run.options.sharding);
//       ...
//     });
//   }
//
// A config that does not parse, does not validate, or sets a key the program does not act on ends
// every rank alike before MPI starts: each prints the same one-line ConfigError and exits 1.

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "zeroshard/config/config.h"
#include "zeroshard/config/run_options.h"
#include "zeroshard/core/session.h"

namespace zeroshard {

// A program and the config keys it acts on: sections ("optimizer") or single keys
// ("model.dropout"). Every program acts on the Session's keys (keys::session()) as well.
struct Program {
  Program(std::string name, std::initializer_list<std::vector<std::string>> key_lists);
  std::string name;
  std::vector<std::string> reads;
  // Accept the keys a config file sets that the program does not act on (zeroshard-estimate reads
  // the config file of a training run, which sets keys only the training program acts on). A
  // `--set` of such a key is refused all the same: it can only be a mistake. Off: refused wherever set.
  bool accept_unread_in_file = false;
  // Whether the program acts on `path` (a leaf key, or a list such as optimizer.param_groups).
  bool acts_on(const std::string& path) const;
};

// The keys that the parts of the library act on, to build a Program from.
namespace keys {
// runtime, comm, logging.level, logging.ranks, memory: the Session.
const std::vector<std::string>& session();
// sharding, precision but loss_scale and frozen_linear, offload.params/grads/keep_param_dtype_shard
// and the I/O keys: a ShardingEngine built with RunOptions::sharding.
const std::vector<std::string>& engine();
// lora and precision.frozen_linear: the unit hooks in RunOptions::sharding, for models whose
// Linear layers are zeroshard::lora::Linear (the built-in GPT, the Llama family).
const std::vector<std::string>& adapters();
// optimizer, scheduler, precision.loss_scale, the optimizer's offload keys, checkpoint, train, the
// loader's data keys, logging.progress and tensorboard_dir, model.init_*: the Trainer.
const std::vector<std::string>& trainer();
// Every section of the schema (tests, and programs that read a whole config).
const std::vector<std::string>& all();
}  // namespace keys

// What a program body gets besides its Session.
struct Run {
  Config config;                  // the effective config (validated), e.g. to save into checkpoints
  RunOptions options;             // resolve(config)
  std::vector<std::string> args;  // the command line without --config / --set, argv[0] first
  // The config in protobuf text format, the keys that were set: the text a checkpoint stores.
  std::string config_text() const;
};

// Parses, validates and resolves the command line's config and refuses the keys set that
// `program` does not act on (ConfigError naming each key, where it was set, and what the program
// acts on). UsageError for a malformed --config / --set. Starts nothing.
Run load_run(int argc, const char* const* argv, const Program& program);

// A program whose keys depend on the config (zeroshard-train: on the model's kind and the data's
// format): given the parsed, validated config, it returns the Program to check the set keys
// against (or throws ConfigError naming the key that makes the config unusable).
using ProgramOf = std::function<Program(const Config&)>;
Run load_run(int argc, const char* const* argv, const ProgramOf& program_of);

// load_run, then core's run_main with run.options.session and the remaining arguments. An error
// in load_run ends every rank alike before MPI starts (one line on stderr, exit status 1).
int run_main(int argc, char** argv, const Program& program, const std::function<int(Session&, const Run&)>& body);
int run_main(int argc, char** argv, const ProgramOf& program_of, const std::function<int(Session&, const Run&)>& body);

// With ZS_PRINT_PROGRAM_KEYS=1 in the environment, load_run (and so run_main) prints what the
// program acts on for the given config instead of running: its name, kAcceptsFileKeysLine when it
// accepts unread keys in a config file, then one key or section per line, and the process exits
// with status 0. The schema walk of the test suite reads it from every program.
inline constexpr const char* kPrintProgramKeysEnv = "ZS_PRINT_PROGRAM_KEYS";
inline constexpr const char* kAcceptsFileKeysLine = "(accepts unread keys in a config file)";

}  // namespace zeroshard
