#pragma once
// Private helpers of the config layer (config.cpp, config_override.cpp): messages built from the
// schema's descriptors.

#include <functional>
#include <string>
#include <vector>

#include "zeroshard/core/config.h"

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

}  // namespace config_detail

}  // namespace zeroshard
