// SPDX-License-Identifier: Apache-2.0
// A corpus larger than what the reader may hold: a 256 MiB shard (sparse: zeros with a few known
// tokens) is read end to end with the peak resident set growing by an eighth of the file at most,
// and zeroshard-data reads all of it under an address-space cap of half the file's size, where
// mapping the whole file fails. (One test: filling the page cache for the file is its main cost.)

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "common/sanitizer.h"
#include "data/data_test_util.h"
#include "zeroshard/data/packing.h"
#include "zeroshard/data/token_shards.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;

namespace {

constexpr int64_t kTokens = int64_t{128} << 20;  // 256 MiB of uint16
constexpr int64_t kCap = int64_t{128} << 20;     // address space of the capped runs
struct Sentinel {
  int64_t offset;
  uint16_t id;
};
const Sentinel kSentinels[] = {{0, 7}, {100000007, 40000}, {kTokens - 1, 50000}};

// The shard: llm.c header, a hole of zeros, the sentinels written in.
std::string write_sparse_shard(const std::string& dir) {
  const std::string path = dir + "/big.bin";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  EXPECT_GE(fd, 0);
  const std::string header = zs::test::llmc_header(20240520, 1, static_cast<int32_t>(kTokens));
  EXPECT_EQ(::pwrite(fd, header.data(), header.size(), 0), static_cast<ssize_t>(header.size()));
  EXPECT_EQ(::ftruncate(fd, 1024 + kTokens * 2), 0);
  for (const Sentinel& s : kSentinels) EXPECT_EQ(::pwrite(fd, &s.id, 2, 1024 + s.offset * 2), 2);
  ::close(fd);
  return path;
}

int64_t status_kib(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::stoll(line.substr(std::string(key).size()));
  }
  return -1;
}

}  // namespace

// In the test process: the peak resident set while reading every token, and packed samples at
// the far end. Then the tool under the cap: --verify reads every token; a token outside the
// vocabulary deep in the file is named with its offset; a reader that maps the whole file cannot
// even start under the same cap (shown with Python's mmap).
TEST(LargeCorpus, ReadsAShardFarLargerThanItsMemory) {
  zs::test::RankDir dir("data_large");
  const std::string path = write_sparse_shard(dir.path);
  const auto shards = std::make_shared<zd::TokenShards>(std::vector<std::string>{path},
                                                        zd::ShardSetOptions{zd::TokenFormat::kLlmc, 50257});
  ASSERT_EQ(shards->num_tokens(), kTokens);
  // Reset the peak resident set (VmHWM), then read every token in windows of 1M.
  { std::ofstream("/proc/self/clear_refs") << "5"; }
  const int64_t rss_before = status_kib("VmRSS:");
  std::vector<int32_t> ids(size_t{1} << 20);
  int64_t nonzero = 0, sum = 0;
  for (int64_t at = 0; at < kTokens; at += static_cast<int64_t>(ids.size())) {
    shards->read(at, static_cast<int64_t>(ids.size()), ids.data());
    for (int32_t v : ids) nonzero += v != 0, sum += v;
  }
  const int64_t growth_kib = status_kib("VmHWM:") - rss_before;
  EXPECT_EQ(nonzero, 3);
  EXPECT_EQ(sum, 7 + 40000 + 50000);
  EXPECT_LT(growth_kib, 32 * 1024) << "peak resident set grew by " << growth_kib << " KiB reading a 256 MiB shard";
  // The packed sample holding token 100000007 at position 263 (100000007 = 97656 * 1024 + 263).
  const zd::PackedSamples samples(shards, {1024, zd::Boundaries::kNone, -1});
  EXPECT_EQ(samples.num_samples(), (kTokens - 1) / 1024);
  const zd::SampleBatch far = samples.read_batch({97656});
  EXPECT_EQ(far.inputs[263], 40000);
  EXPECT_EQ(far.targets[262], 40000);

  // AddressSanitizer reserves terabytes of address space for its shadow memory, so under it the tool
  // runs without the cap (the resident-set check above is the streaming proof there).
  const std::string cap = "prlimit --as=" + std::to_string(kCap) + " ";
  const std::string capped = ZS_TEST_ASAN ? std::string() : cap;
  int status = 0;
  std::string out = zs::test::run_command(capped + ZS_DATA_TOOL + " inspect --verify --tokens 2 --vocab 50257 " +
                                              path + " 2>&1",
                                          &status);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out, path + ": llm.c token shard, magic 20240520 version 1, uint16 tokens\n"
                        "  tokens: 134217728 (268435456 bytes after 1024 header bytes)\n"
                        "  first 2 tokens: 7 0\n"
                        "  verified: 134217728 tokens below 50257, largest id 50000, sum of ids 90007\n");
  out = zs::test::run_command(capped + ZS_DATA_TOOL + " inspect --verify --tokens 0 --vocab 45000 " + path +
                                  " 2>&1 >/dev/null",
                              &status);
  EXPECT_NE(status, 0);
  EXPECT_EQ(out, "zeroshard-data: token shard '" + path +
                     "': token id 50000 at token offset 134217727 is outside the model's vocabulary (45000 ids: "
                     "0..44999)\n");
  out = zs::test::run_command(cap + "/usr/bin/python3 -c \"import mmap; f = open('" + path +
                                  "', 'rb'); mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)\" 2>&1",
                              &status);
  EXPECT_NE(status, 0) << "mapping the whole 256 MiB file succeeded under the cap: the cap proves nothing";
  EXPECT_TRUE(zs::test::contains(out, "Cannot allocate memory")) << out;
}
