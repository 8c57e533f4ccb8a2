// SPDX-License-Identifier: Apache-2.0
#pragma once
// Token ids for zeroshard-eval: a JSON array of integers ([1, 2, 3]), a comma-separated list given
// inline ("1,2,3"), or a raw little-endian .bin of uint16 or uint32 values. Every id is checked
// against the vocabulary: a UsageError names the source, the position and the value.

#include <cstdint>
#include <string>
#include <vector>

namespace zs_eval {

// `path`: *.json (a JSON array) or *.bin (`bin_dtype` "uint16" or "uint32", required for .bin).
std::vector<int64_t> read_token_ids(const std::string& path, const std::string& bin_dtype, int64_t vocab_size);
// "1,2,3" (spaces allowed), or the name of a file read as above.
std::vector<int64_t> token_ids_argument(const std::string& flag, const std::string& text, const std::string& bin_dtype,
                                        int64_t vocab_size);

}  // namespace zs_eval
