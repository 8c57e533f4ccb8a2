#include "zeroshard/base/crc32c.h"

#include <array>
#include <cstring>

namespace zeroshard {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc_table(const unsigned char* p, size_t n, uint32_t c) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c;
}

#if defined(__x86_64__)
// Compiled for SSE4.2 through the attribute only (not an inline function: nothing leaks into code
// that runs on CPUs without it); called only when the CPU reports sse4.2.
__attribute__((target("sse4.2"))) uint32_t crc_hw(const unsigned char* p, size_t n, uint32_t c) {
  uint64_t c64 = c;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = __builtin_ia32_crc32di(c64, w);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c64);
  while (n > 0) {
    c32 = __builtin_ia32_crc32qi(c32, *p++);
    --n;
  }
  return c32;
}
#endif

}  // namespace

bool crc32c_sse42_available() {
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  return hw;
#else
  return false;
#endif
}

uint32_t crc32c_table(const void* data, size_t bytes, uint32_t crc) {
  return ~crc_table(static_cast<const unsigned char*>(data), bytes, ~crc);
}

uint32_t crc32c_sse42(const void* data, size_t bytes, uint32_t crc) {
#if defined(__x86_64__)
  if (crc32c_sse42_available()) return ~crc_hw(static_cast<const unsigned char*>(data), bytes, ~crc);
#endif
  return crc32c_table(data, bytes, crc);
}

uint32_t crc32c(const void* data, size_t bytes, uint32_t crc) {
  return crc32c_sse42_available() ? crc32c_sse42(data, bytes, crc) : crc32c_table(data, bytes, crc);
}

}  // namespace zeroshard
