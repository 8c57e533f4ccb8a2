// SPDX-License-Identifier: Apache-2.0
#pragma once
// Names and texts the checkpoint writer, reader and pretrained loading share.

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::detail {

// The section name prefix of flat parameter i in rank files: "f<i>".
std::string flat_key(size_t i);
// "[2, 3]".
std::string shape_str(const std::vector<int64_t>& s);

}  // namespace zeroshard::detail
