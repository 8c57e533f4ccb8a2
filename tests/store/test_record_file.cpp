// SPDX-License-Identifier: Apache-2.0
// RecordFile, the one on-disk form of offloaded shards and optimizer state: records round-trip
// (the last one shorter), a rewrite of some records keeps the others' checksums, a record changed
// behind its back is named by file, index, offset, content and rank, a range outside the file is
// refused, and the file goes with the object.

#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <numeric>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/store/record_file.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;
using zs::test::contains;

namespace {

constexpr int64_t kRecord = 4096;
constexpr int64_t kBytes = 2 * kRecord + 1808;  // three records, the last 1808 bytes

zs::RecordFile::Label label() { return {"optimizer state", "optimizer state", "h.1", 3}; }

std::vector<char> pattern(int64_t n, int seed) {
  std::vector<char> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>((i * 7 + static_cast<size_t>(seed)) % 251);
  return v;
}

std::vector<char> read_all(zs::RecordFile& f, zs::IoEngine& io) {
  std::vector<char> back(static_cast<size_t>(kBytes), 0);
  io.wait(f.read(io, 0, f.records(), back.data()));
  f.verify(0, f.records(), back.data());
  return back;
}

}  // namespace

TEST(RecordFile, RecordsRoundTripAndARewriteKeepsTheOthersChecksums) {
  zs::test::RankDir dir("record_file");
  auto io = zs::make_io_engine(zs::IoOptions{});
  zs::RecordFile f(dir.path + "/a.state", kBytes, kRecord, /*direct=*/false, label());
  ASSERT_EQ(f.records(), 3);
  EXPECT_EQ(f.record_size(2), 1808);
  EXPECT_EQ(f.span(1, 2), kRecord + 1808);
  std::vector<char> data = pattern(kBytes, 1);
  io->wait(f.write(*io, 0, 3, data.data()));
  EXPECT_TRUE(read_all(f, *io) == data);
  // Record 1 alone rewritten: records 0 and 2 keep their content and checksums.
  const std::vector<char> one = pattern(kRecord, 9);
  io->wait(f.write(*io, 1, 1, one.data()));
  std::memcpy(data.data() + kRecord, one.data(), one.size());
  EXPECT_TRUE(read_all(f, *io) == data);
}

TEST(RecordFile, ARecordChangedBehindItsBackIsNamed) {
  zs::test::RankDir dir("record_file_corrupt");
  auto io = zs::make_io_engine(zs::IoOptions{});
  zs::RecordFile f(dir.path + "/a.state", kBytes, kRecord, /*direct=*/false, label());
  const std::vector<char> data = pattern(kBytes, 2);
  io->wait(f.write(*io, 0, 3, data.data()));
  const int fd = ::open(f.path().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << f.path();
  const char junk = static_cast<char>(data[2 * kRecord + 5] ^ 0x5a);
  ASSERT_EQ(::pwrite(fd, &junk, 1, 2 * kRecord + 5), 1);
  ::close(fd);
  std::vector<char> back(static_cast<size_t>(kBytes), 0);
  io->wait(f.read(*io, 0, 3, back.data()));
  EXPECT_NO_THROW(f.verify(0, 2, back.data()));  // the records before it are intact
  const std::string err = zs::test::error_text_of<zs::IoError>([&] { f.verify(0, 3, back.data()); });
  EXPECT_TRUE(contains(err, "offloaded optimizer state of unit 'h.1' corrupted: '" + f.path() + "' chunk 2 at offset " +
                                std::to_string(2 * kRecord) + " (1808 bytes) has CRC-32C "))
      << err;
  EXPECT_TRUE(contains(err, "(rank 3)")) << err;
  // The unit's final name once renamed.
  f.rename("layers.1");
  const std::string renamed = zs::test::error_text_of<zs::IoError>([&] { f.verify(2, 1, back.data() + 2 * kRecord); });
  EXPECT_TRUE(contains(renamed, "unit 'layers.1'")) << renamed;
}

TEST(RecordFile, ARangeOutsideTheFileIsRefusedAndTheFileGoesWithTheObject) {
  zs::test::RankDir dir("record_file_range");
  auto io = zs::make_io_engine(zs::IoOptions{});
  std::string path;
  {
    zs::RecordFile f(dir.path + "/a.param", kBytes, kRecord, /*direct=*/false, label());
    path = f.path();
    ASSERT_TRUE(fs::exists(path));
    EXPECT_EQ(fs::file_size(path), static_cast<uintmax_t>(kBytes));  // reserved up front
    std::vector<char> buf(static_cast<size_t>(2 * kRecord));
    const std::string err = zs::test::error_text_of<zs::Error>([&] { f.read(*io, 2, 2, buf.data()); });
    EXPECT_TRUE(contains(err, "records [2, 4) of 3")) << err;
  }
  EXPECT_FALSE(fs::exists(path));
}
