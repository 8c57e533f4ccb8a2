// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard's configuration: a protobuf message (config/proto/zeroshard.proto, the single source of
// truth for keys, types, defaults and ranges) filled from, in order of precedence (later wins):
//   1. the schema defaults,
//   2. a config file: `--config FILE`, or the environment variable ZS_CONFIG when no --config is
//      given; text format (.textproto .txtpb .pbtxt .prototxt) or JSON (.json),
//   3. a DeepSpeed config: `--deepspeed ds_config.json` (deepspeed.h),
//   4. `--set key=value` overrides, applied in command-line order,
// then validated (ranges from the schema's zs_min/zs_max options, plus the rules between keys,
// config_rules.cpp: the one place each is written). Unknown keys, wrong types and out-of-range
// values are ConfigErrors naming the file or override, the dotted field path and the allowed
// values; nothing is silently ignored. docs/config.md lists every key; a test keeps it equal to
// list_config_fields(). resolve.h turns a validated Config into the plain options of every layer.
//
// This is the protobuf edge of the library: the one public header that includes the generated
// schema (zeroshard.pb.h). No layer below zs_config names a config type (a test holds this).
//
// Thread-safety: all functions are reentrant; a Config is a plain value (not safe to mutate from
// two threads at once, like any protobuf message).

#include <functional>
#include <string>
#include <vector>

#include "zeroshard.pb.h"
#include "zeroshard/config/deepspeed.h"

namespace zeroshard {

using Config = ::zeroshard::config::Config;

// A Config with no field set: every getter returns the schema default.
Config default_config();

// Parses a config file; the format is chosen by extension (.textproto/.txtpb/.pbtxt/.prototxt:
// protobuf text format; .json: protobuf JSON, field names as in the schema or lowerCamelCase).
// Throws ConfigError for a missing/unreadable file, an unsupported extension, syntax errors,
// unknown keys (with the valid keys of that section and the nearest one) and wrong value types;
// messages start with `FILE:LINE:COL:` where the position is known. Does not validate ranges.
Config load_config_file(const std::string& path);

// Parses protobuf text format from memory; `source_name` names it in error messages.
Config parse_config_textproto(const std::string& text, const std::string& source_name);
// Parses protobuf JSON from memory; `source_name` names it in error messages.
Config parse_config_json(const std::string& text, const std::string& source_name);

// Applies one `key=value` assignment, e.g. "comm.timeout_s=30" or
// "precision.loss_scale.mode=dynamic". Values by field type: bool true/false/1/0; integers in
// decimal, range-checked for the field's type; doubles; enums by name, case-insensitive; strings
// verbatim (may be empty). Throws ConfigError naming the assignment for an unknown key (listing
// the valid keys at that level and the nearest one), a section (message-typed) key, or a value
// that does not parse (naming the expected type or the allowed enum names). Does not check ranges.
void apply_override(Config& cfg, const std::string& assignment);

// One violated rule: the message (starting with the dotted field path), and the paths involved.
struct ConfigProblem {
  std::vector<std::string> paths;
  std::string message;
};

// Every range violation (zs_min/zs_max/zs_multiple_of, non-finite doubles) of every leaf field,
// set or default, every bad entry of a list (optimizer.param_groups) or of a key with a format
// of its own (logging.level, logging.ranks, model.init_rename), plus the rules between keys
// documented in docs/config.md ("Rules between keys"). Empty when valid.
std::vector<ConfigProblem> check_config(const Config& cfg);

// Throws ConfigError listing everything check_config() finds, e.g.
//   comm.timeout_s = -1 is out of range; allowed: [0.1, 86400]
void validate_config(const Config& cfg);

// The command line split into what the config layer consumes and everything else.
struct CommandLine {
  std::string config_path;             // from --config FILE / --config=FILE; empty if none
  std::string deepspeed_path;          // from --deepspeed FILE / --deepspeed=FILE; empty if none
  std::vector<std::string> overrides;  // from --set k=v / --set=k=v, in order
  std::vector<std::string> rest;       // all other arguments in order, argv[0] included
};

// Recognises `--config FILE`, `--config=FILE`, `--deepspeed FILE`, `--deepspeed=FILE`,
// `--set KEY=VALUE`, `--set=KEY=VALUE` (repeatable);
// everything else, and everything after a `--` argument (kept too), goes to `rest`. Throws
// UsageError when --config/--deepspeed/--set lacks its value, when --config or --deepspeed is given twice, or when a --set
// value has no '='.
CommandLine parse_command_line(int argc, const char* const* argv);

// Where the values of a Config built from a command line came from.
struct ConfigOrigin {
  std::string file;                    // the config file read; empty when none
  Config from_file;                    // the file's own keys (proto2 presence: what it set)
  std::string deepspeed_file;                 // the --deepspeed file; empty when none
  std::vector<DeepSpeedSetting> from_deepspeed;  // what it set, in order
  std::vector<std::string> overrides;  // the --set assignments, in order
  // "--set KEY=VALUE" (the last override of `path`), "DeepSpeed config FILE (its key)",
  // "config file FILE", or "default".
  std::string of(const std::string& path) const;
  // The dotted paths of every key the file or an override set, in schema order (a list such as
  // optimizer.param_groups counts as one key).
  std::vector<std::string> set_keys() const;
};

// defaults -> file (cl.config_path, else $ZS_CONFIG if set and non-empty) -> the DeepSpeed config
// (cl.deepspeed_path) -> cl.overrides in order -> validate_config. Validation errors say where each bad value came from (the --set
// override, the file, or the default). `origin` (may be null) receives where the values came from.
Config build_config(const CommandLine& cl, ConfigOrigin* origin = nullptr);

// The effective config as text format: every leaf field, set or default, so it can be logged,
// diffed, and loaded back with load_config_file (a .textproto).
std::string to_textproto(const Config& cfg);

// One leaf field of the schema, for docs and tools.
struct ConfigFieldInfo {
  std::string path;           // dotted path, e.g. "precision.loss_scale.initial_scale"
  std::string type;           // bool, int32, int64, uint32, uint64, float, double, string, enum
  std::string default_value;  // schema default as text: 600, true, "info", FULL_SHARD
  std::string allowed;        // e.g. "[0.1, 86400]", "AUTO, CPU, CUDA", "true, false", "any"
};

// Every leaf field in schema order (depth-first).
std::vector<ConfigFieldInfo> list_config_fields();

// The dotted paths of every leaf field, in schema order.
std::vector<std::string> config_field_paths();

}  // namespace zeroshard
