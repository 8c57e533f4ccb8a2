// SPDX-License-Identifier: Apache-2.0
// Token shards: llm.c's format as llm.c's own Python writes it, raw uint16/uint32 files, a set of
// files read as one stream, and the exact error for each malformed file.

#include <gtest/gtest.h>

#include <numeric>
#include <sstream>

#include "data/data_test_util.h"
#include "zeroshard/data/token_shards.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;
using zs::test::message_of;
using zs::test::message_of;

namespace {

const std::string kScript = std::string(ZS_TEST_SOURCE_DIR) + "/data/llmc_reference.py";

std::vector<int64_t> read_all(const zd::TokenShards& s) {
  std::vector<int32_t> ids(static_cast<size_t>(s.num_tokens()));
  s.read(0, s.num_tokens(), ids.data());
  return std::vector<int64_t>(ids.begin(), ids.end());
}

// The reference's tokens: the same formula llmc_reference.py writes.
std::vector<int64_t> reference_tokens(bool uint16, int64_t count, int64_t seed) {
  std::vector<int64_t> t(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    t[static_cast<size_t>(i)] = uint16 ? (i * 7919 + seed) % 60000 : (i * 7919 + seed) % 100000 + 70000;
  }
  return t;
}

}  // namespace

// Shards written by the reference script in llm.c's GPT-2 (uint16) and Llama 3 (uint32) layouts
// read back token for token.
TEST(TokenShards, ReadsShardsWrittenTheLlmcWay) {
  zs::test::RankDir dir("data_llmc_python");
  for (const char* dtype : {"uint16", "uint32"}) {
    const std::string path = dir.path + "/" + dtype + ".bin";
    int status = 0;
    zs::test::run_command("/usr/bin/python3 " + kScript + " write " + path + " " + dtype + " 5000 3", &status);
    ASSERT_EQ(status, 0) << dtype;
    const zd::ShardFile f(path, zd::TokenFormat::kLlmc);
    const bool u16 = std::string(dtype) == "uint16";
    EXPECT_EQ(f.magic(), u16 ? 20240520 : 20240801);
    EXPECT_EQ(f.version(), u16 ? 1 : 7);
    EXPECT_EQ(f.bytes_per_token(), u16 ? 2 : 4);
    EXPECT_EQ(f.num_tokens(), 5000);
    const zd::TokenShards s({path}, {zd::TokenFormat::kLlmc, /*vocab_size=*/200000});
    EXPECT_EQ(read_all(s), reference_tokens(u16, 5000, 3)) << dtype;
  }
}

// Headerless files (nanoGPT's train.bin): the dtype comes from the option.
TEST(TokenShards, ReadsRawUint16AndUint32Files) {
  zs::test::RankDir dir("data_raw");
  const std::vector<int64_t> tokens = {0, 1, 65535, 42, 7};
  zs::test::write_bytes(dir.path + "/a.bin", zs::test::token_bytes<uint16_t>(tokens));
  zs::test::write_bytes(dir.path + "/b.bin", zs::test::token_bytes<uint32_t>({70000, 3, 2147483647}));
  EXPECT_EQ(read_all(zd::TokenShards({dir.path + "/a.bin"}, {zd::TokenFormat::kRawUint16, 0})), tokens);
  EXPECT_EQ(read_all(zd::TokenShards({dir.path + "/b.bin"}, {zd::TokenFormat::kRawUint32, 0})),
            (std::vector<int64_t>{70000, 3, 2147483647}));
  EXPECT_EQ(zd::parse_token_format("uint32", "--format"), zd::TokenFormat::kRawUint32);
  EXPECT_EQ(message_of([] { zd::parse_token_format("int16", "--format"); }),
            "--format 'int16' is not a token file format (llmc, uint16, uint32)");
}

// A set of files is one stream: patterns expand sorted by name, inputs keep their order, and a
// read spans files (an empty file included).
TEST(TokenShards, ReadsAcrossFilesInGlobOrder) {
  zs::test::RankDir dir("data_set");
  std::vector<int64_t> all;
  const char* names[] = {"p_1.bin", "p_0.bin", "p_2.bin", "q.bin"};
  const int sizes[] = {5, 3, 0, 4};
  std::vector<std::vector<int64_t>> content(4);
  for (int f = 0; f < 4; ++f) {
    for (int i = 0; i < sizes[f]; ++i) content[f].push_back(100 * f + i);
    const std::string bytes = zs::test::token_bytes<uint16_t>(content[f]);
    zs::test::write_bytes(dir.path + "/" + names[f], zs::test::llmc_header(20240520, 1, sizes[f]) + bytes);
  }
  // q.bin first, then p_*.bin sorted: p_0, p_1, p_2.
  for (int f : {3, 1, 0, 2}) all.insert(all.end(), content[f].begin(), content[f].end());
  const zd::TokenShards s({dir.path + "/q.bin", dir.path + "/p_*.bin"}, {zd::TokenFormat::kLlmc, 500});
  ASSERT_EQ(s.num_files(), 4u);
  EXPECT_EQ(s.file(1).path(), dir.path + "/p_0.bin");
  EXPECT_EQ(s.file(3).path(), dir.path + "/p_2.bin");
  EXPECT_EQ(read_all(s), all);
  for (int64_t begin = 0; begin < s.num_tokens(); ++begin) {
    for (int64_t count = 0; begin + count <= s.num_tokens(); ++count) {
      std::vector<int32_t> got(static_cast<size_t>(count));
      s.read(begin, count, got.data());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + begin)) << begin << "+" << count;
    }
  }
  EXPECT_FALSE(s.has_doc_index());
  std::vector<uint8_t> mask(3, 7);
  s.read_loss_mask(2, 3, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{1, 1, 1}));  // no masks: every token is a target
}

// Each malformed file: its exact error, naming the file.
TEST(TokenShards, NamesTheFileOfEachMalformedShard) {
  zs::test::RankDir dir("data_bad_shards");
  const std::string d = dir.path + "/";
  const std::string tokens = zs::test::token_bytes<uint16_t>({1, 2, 3, 4});
  zs::test::write_bytes(d + "magic.bin", zs::test::llmc_header(20240521, 1, 4) + tokens);
  zs::test::write_bytes(d + "version.bin", zs::test::llmc_header(20240520, 7, 4) + tokens);
  zs::test::write_bytes(d + "truncated.bin", zs::test::llmc_header(20240520, 1, 1000) + tokens);
  zs::test::write_bytes(d + "extra.bin", zs::test::llmc_header(20240520, 1, 3) + tokens);
  zs::test::write_bytes(d + "short.bin", std::string(100, '\0'));
  zs::test::write_bytes(d + "odd.bin", tokens + "x");
  auto open = [&](const std::string& name, zd::TokenFormat f) {
    return message_of([&] { zd::TokenShards({d + name}, {f, 0}); });
  };
  EXPECT_EQ(open("magic.bin", zd::TokenFormat::kLlmc),
            "token shard '" + d + "magic.bin' is not an llm.c token shard: magic 20240521 at byte 0, expected "
            "20240520 (uint16 tokens) or 20240801 (uint32 tokens); a headerless token file needs the format uint16 "
            "or uint32");
  EXPECT_EQ(open("version.bin", zd::TokenFormat::kLlmc),
            "token shard '" + d + "version.bin' has llm.c magic 20240520 with version 7; that magic goes with "
            "version 1");
  EXPECT_EQ(open("truncated.bin", zd::TokenFormat::kLlmc),
            "token shard '" + d + "truncated.bin' is truncated: its header says 1000 tokens (2000 bytes after the "
            "1024-byte header) but the file holds 8 bytes after the header");
  EXPECT_EQ(open("extra.bin", zd::TokenFormat::kLlmc),
            "token shard '" + d + "extra.bin' has 2 bytes after its last token (its header says 3 tokens, 6 bytes "
            "after the 1024-byte header)");
  EXPECT_EQ(open("short.bin", zd::TokenFormat::kLlmc),
            "token shard '" + d + "short.bin' is not an llm.c token shard: 100 bytes, shorter than the 1024-byte "
            "header");
  EXPECT_EQ(open("odd.bin", zd::TokenFormat::kRawUint16),
            "token file '" + d + "odd.bin' holds 9 bytes, not a whole number of uint16 tokens (2 bytes each)");
  EXPECT_EQ(open("missing.bin", zd::TokenFormat::kLlmc).rfind("cannot open token shard '" + d + "missing.bin': ", 0),
            0u);
  EXPECT_EQ(message_of([&] { zd::TokenShards({d + "nothing_*.bin"}, {}); }),
            "no file matches '" + d + "nothing_*.bin'");
  EXPECT_EQ(message_of([&] { zd::TokenShards({d + "odd.bin", d + "o*.bin"}, {zd::TokenFormat::kRawUint16, 0}); }),
            "token file '" + d + "odd.bin' is listed twice (the inputs: " + d + "o*.bin and an earlier one)");
}

// A token id at or above the model's vocabulary is caught as it is read, with the file and the
// token's offset in that file; the tokens before it are fine.
TEST(TokenShards, RejectsATokenOutsideTheVocabularyWithItsOffset) {
  zs::test::RankDir dir("data_vocab");
  const std::string d = dir.path + "/";
  std::vector<int64_t> tokens(3000, 5);
  tokens[2345] = 50257;
  zs::test::write_bytes(d + "a.bin", zs::test::llmc_header(20240520, 1, 10) + zs::test::token_bytes<uint16_t>(
                                                                                  std::vector<int64_t>(10, 1)));
  zs::test::write_bytes(d + "b.bin",
                        zs::test::llmc_header(20240520, 1, 3000) + zs::test::token_bytes<uint16_t>(tokens));
  const zd::TokenShards s({d + "a.bin", d + "b.bin"}, {zd::TokenFormat::kLlmc, 50257});
  std::vector<int32_t> out(3010);
  s.read(0, 2355, out.data());  // up to just before the bad token
  EXPECT_EQ(message_of([&] { s.read(2000, 1010, out.data()); }),
            "token shard '" + d + "b.bin': token id 50257 at token offset 2345 is outside the model's vocabulary "
            "(50257 ids: 0..50256)");
}

// Sidecars are all-or-none across a set.
TEST(TokenShards, RequiresSidecarsOnEveryShardOrNone) {
  zs::test::RankDir dir("data_sidecars");
  const std::string d = dir.path + "/";
  for (const char* name : {"a.bin", "b.bin"}) {
    zs::test::write_bytes(d + name, zs::test::llmc_header(20240520, 1, 2) + zs::test::token_bytes<uint16_t>({1, 2}));
  }
  zd::write_doc_index(d + "a.docs", 2, {0, 1});
  EXPECT_EQ(message_of([&] { zd::TokenShards({d + "*.bin"}, {}); }),
            "token shard '" + d + "b.bin' has no document index '" + d + "b.docs' but '" + d +
                "a.bin' has one: every shard of a set needs one, or none does");
  zd::write_doc_index(d + "b.docs", 3, {0});
  EXPECT_EQ(message_of([&] { zd::TokenShards({d + "*.bin"}, {}); }),
            "document index '" + d + "b.docs' is for a shard of 3 tokens, but its shard holds 2");
  zd::write_doc_index(d + "b.docs", 2, {0});
  const zd::TokenShards s({d + "*.bin"}, {});
  EXPECT_EQ(s.num_documents(), 3);
  EXPECT_EQ(s.document(1), (std::pair<int64_t, int64_t>{1, 2}));
  EXPECT_EQ(s.document(2), (std::pair<int64_t, int64_t>{2, 4}));
  std::vector<int64_t> starts;
  s.document_starts(0, 4, &starts);
  EXPECT_EQ(starts, (std::vector<int64_t>{1, 2}));
}
