#pragma once
// Number formatting shared by the optimizers and schedules (messages and describe()).

#include <cstdio>
#include <cstdlib>
#include <string>

namespace zeroshard::detail {

// Shortest decimal text that reads back as `v`, Python-style exponents: 0.001, 1e-08, 0.999.
inline std::string format_double(double v) {
  char buf[64];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

}  // namespace zeroshard::detail
