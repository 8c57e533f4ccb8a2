// SPDX-License-Identifier: Apache-2.0
#include "sections.h"

namespace zeroshard::detail {

std::string flat_key(size_t i) { return "f" + std::to_string(i); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace zeroshard::detail
