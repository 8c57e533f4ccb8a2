// SPDX-License-Identifier: Apache-2.0
// ShardingOptions' names (options.h). zeroshard/config/resolve.h fills the options from a config.

#include "zeroshard/engine/options.h"

namespace zeroshard {

const char* to_string(BufferSync b) {
  switch (b) {
    case BufferSync::kAverage: return "AVERAGE";
    case BufferSync::kBroadcast: return "BROADCAST";
    case BufferSync::kNone: return "NONE";
  }
  return "unknown buffer sync";
}

}  // namespace zeroshard
