// SPDX-License-Identifier: Apache-2.0
#pragma once
// Private helpers of the config layer (config.cpp, config_override.cpp, config_rules.cpp): messages
// built from the schema's descriptors, and the rules between keys.

#include <functional>
#include <string>
#include <vector>

#include "zeroshard/config/config.h"

namespace zeroshard {

namespace config_detail {

// "unknown key 'comm.timout_s'; did you mean 'comm.timeout_s'? valid keys in 'comm': ..."
// `prefix` is the dotted path of `message` ("" for the top level).
std::string unknown_key_message(const google::protobuf::Descriptor* message,
                                const std::string& prefix, const std::string& name);

// The enum's value names, comma-separated: "AUTO, CPU, CUDA".
std::string enum_names(const google::protobuf::EnumDescriptor* e);

// The problems' messages, one per line ("N problems:" first when several), each followed by
// suffix(problem), e.g. where its values came from.
std::string format_problems(const std::vector<ConfigProblem>& problems,
                            const std::function<std::string(const ConfigProblem&)>& suffix);

// The schema's style of a double: the shortest text that reads back as the same value, with an
// exponent not padded with zeros (600, 0.001, 1e-8), as docs/config.md shows defaults and ranges.
std::string format_value(double v);

// Appends every violated rule between keys (config_rules.cpp, "Rules between keys" in
// docs/config.md: the one place each rule is written) and every bad list entry or key with a
// format of its own to `out`.
void check_cross_field(const Config& cfg, std::vector<ConfigProblem>* out);

}  // namespace config_detail

}  // namespace zeroshard
