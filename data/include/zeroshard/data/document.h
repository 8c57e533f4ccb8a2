// SPDX-License-Identifier: Apache-2.0
#pragma once
// Document: one training document as tokens, with the tokens the loss trains on. RecordEncoder
// (encode.h) makes them; ShardWriter (shard_writer.h) writes them. A plain value.

#include <cstdint>
#include <vector>

namespace zeroshard::data {

struct Document {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;  // per token: 1 when it is a loss target (predicted from the tokens before it)
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace zeroshard::data
