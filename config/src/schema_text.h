// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text built from the config schema's descriptors, for the config layer's messages (parsing,
// --set overrides, validation): key paths, the nearest valid key, enum names, values as the schema
// writes them, lists of problems.

#include <google/protobuf/descriptor.h>

#include <functional>
#include <string>
#include <vector>

#include "zeroshard/config/config.h"

namespace zeroshard::schema_text {

// "comm.timeout_s" from "comm" and "timeout_s" ("timeout_s" when the prefix is empty).
std::string join_path(const std::string& prefix, const std::string& name);
// Every leaf path of `message` (relative to it), depth-first; lists are left out.
void collect_leaf_paths(const google::protobuf::Descriptor* message, const std::string& prefix,
                        std::vector<std::string>* out);
// "unknown key 'comm.timout_s'; did you mean 'comm.timeout_s'? valid keys in 'comm': ..."
// `prefix` is the dotted path of `message` ("" for the top level).
std::string unknown_key_message(const google::protobuf::Descriptor* message, const std::string& prefix,
                                const std::string& name);
// The enum's value names, comma-separated: "AUTO, CPU, CUDA".
std::string enum_names(const google::protobuf::EnumDescriptor* e);
// The schema's style of a double: the shortest text that reads back as the same value, with an
// exponent not padded with zeros (600, 0.001, 1e-8), as docs/config.md shows defaults and ranges.
std::string format_value(double v);
// The problems' messages, one per line ("N problems:" first when several), each followed by
// suffix(problem), e.g. where its values came from.
std::string format_problems(const std::vector<ConfigProblem>& problems,
                            const std::function<std::string(const ConfigProblem&)>& suffix);

}  // namespace zeroshard::schema_text
