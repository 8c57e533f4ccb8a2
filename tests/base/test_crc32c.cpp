// SPDX-License-Identifier: Apache-2.0
// CRC-32C known answers for both implementations (the SSE4.2 instruction and the table): the
// check value of the CRC catalogue ("123456789" -> 0xE3069283) and RFC 3720's iSCSI vectors, and
// the two paths agree on every length and alignment and when extended piece by piece.

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/crc32c.h"

namespace zs = zeroshard;

namespace {

using CrcFn = std::function<uint32_t(const void*, size_t, uint32_t)>;

struct Path {
  const char* name;
  CrcFn fn;
};

std::vector<Path> paths() {
  std::vector<Path> p = {{"table", zs::crc32c_table}, {"dispatch", [](const void* d, size_t n, uint32_t c) {
                                                         return zs::crc32c(d, n, c);
                                                       }}};
  if (zs::crc32c_sse42_available()) p.push_back({"sse4.2", zs::crc32c_sse42});
  return p;
}

}  // namespace

TEST(Crc32c, CheckValueOnEveryPath) {
  const std::string check = "123456789";
  for (const Path& p : paths()) {
    EXPECT_EQ(p.fn(check.data(), check.size(), 0), 0xE3069283u) << p.name;
    EXPECT_EQ(p.fn(nullptr, 0, 0), 0u) << p.name << ": the CRC of nothing is 0";
  }
}

// RFC 3720, appendix B.4: 32 bytes of zeros, of 0xFF, ascending and descending.
TEST(Crc32c, Rfc3720VectorsOnEveryPath) {
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<uint8_t>(i), down[i] = static_cast<uint8_t>(31 - i);
  for (const Path& p : paths()) {
    EXPECT_EQ(p.fn(zeros.data(), 32, 0), 0x8A9136AAu) << p.name;
    EXPECT_EQ(p.fn(ones.data(), 32, 0), 0x62A8AB43u) << p.name;
    EXPECT_EQ(p.fn(up.data(), 32, 0), 0x46DD794Eu) << p.name;
    EXPECT_EQ(p.fn(down.data(), 32, 0), 0x113FDB5Cu) << p.name;
  }
}

TEST(Crc32c, Sse42PathIsAvailableHere) {
#if defined(__x86_64__)
  if (!zs::crc32c_sse42_available()) GTEST_SKIP() << "this CPU has no SSE4.2: only the table path was checked";
  SUCCEED();
#else
  GTEST_SKIP() << "not x86-64: only the table path exists";
#endif
}

// Every length 0..300 at every alignment 0..7, whole and split in two: the paths agree, and
// extending a CRC piece by piece equals the CRC of the whole.
TEST(Crc32c, PathsAgreeOnAllLengthsAlignmentsAndSplits) {
  std::mt19937 gen(7);
  std::vector<uint8_t> buf(320);
  for (auto& b : buf) b = static_cast<uint8_t>(gen());
  const auto all = paths();
  for (size_t align = 0; align < 8; ++align) {
    for (size_t n = 0; n <= 300; ++n) {
      const uint8_t* d = buf.data() + align;
      const uint32_t want = zs::crc32c_table(d, n, 0);
      for (const Path& p : all) {
        ASSERT_EQ(p.fn(d, n, 0), want) << p.name << " length " << n << " alignment " << align;
        const size_t cut = n / 3;
        ASSERT_EQ(p.fn(d + cut, n - cut, p.fn(d, cut, 0)), want) << p.name << " split at " << cut << " of " << n;
      }
    }
  }
}

// Large buffers take the three-stream path (blocks of 8 KiB per stream joined by the zeros
// operator): the lengths around its edges, odd alignments and a split inside a round agree with
// the table.
TEST(Crc32c, ThreeStreamPathAgreesOnLargeBuffers) {
  std::mt19937 gen(11);
  std::vector<uint8_t> buf(4 * 24576 + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(gen());
  const auto all = paths();
  const size_t round = 3 * 8192;
  for (size_t n : {round - 1, round, round + 1, round + 7, 2 * round, 2 * round + 13, 4 * round}) {
    for (size_t align : {size_t{0}, size_t{3}}) {
      const uint8_t* d = buf.data() + align;
      const uint32_t want = zs::crc32c_table(d, n, 0xDEADBEEFu);
      for (const Path& p : all) {
        ASSERT_EQ(p.fn(d, n, 0xDEADBEEFu), want) << p.name << " length " << n << " alignment " << align;
        const size_t cut = n / 2 + 5;
        ASSERT_EQ(p.fn(d + cut, n - cut, p.fn(d, cut, 0xDEADBEEFu)), want) << p.name << " split at " << cut;
      }
    }
  }
}
