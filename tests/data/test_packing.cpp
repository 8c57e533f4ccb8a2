// SPDX-License-Identifier: Apache-2.0
// Fixed-length samples over shards written by ShardWriter: packing (document boundaries from the
// index, from EOS tokens, or none) and padding, position by position against hand-worked samples.

#include <gtest/gtest.h>

#include "data/data_test_util.h"
#include "zeroshard/data/packing.h"
#include "zeroshard/data/shard_writer.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;
using zs::test::message_of;

namespace {

constexpr int32_t kEos = 99, kPad = 98;

// Three documents (EOS 99 ends each), the first a prompt (10, 11) and a completion:
//   10 11 12 99 | 20 21 99 | 30 31 32 33 34 99
// Shards of at most 8 tokens: the first two documents in shard 0, the third in shard 1.
std::shared_ptr<zd::TokenShards> write_corpus(const std::string& dir) {
  zd::ShardWriter w({dir, "train", /*vocab_size=*/100, /*shard_tokens=*/8});
  w.add({{10, 11, 12, 99}, {0, 0, 1, 1}});
  w.add({{20, 21, 99}, {1, 1, 1}});
  w.add({{30, 31, 32, 33, 34, 99}, {0, 1, 1, 1, 1, 1}});
  const std::vector<zd::WrittenShard> shards = w.finish();
  EXPECT_EQ(shards.size(), 2u);
  EXPECT_EQ(shards[0].tokens, 7);
  EXPECT_EQ(shards[0].documents, 2);
  EXPECT_EQ(shards[1].trained_tokens, 5);
  return std::make_shared<zd::TokenShards>(std::vector<std::string>{dir + "/train_*.bin"},
                                           zd::ShardSetOptions{zd::TokenFormat::kLlmc, 100});
}

struct Expected {
  std::vector<int32_t> inputs, targets;
  std::vector<uint8_t> loss;
  std::vector<int32_t> docs, positions;
};

void expect_sample(const zd::SampleSource& s, int64_t id, const Expected& e) {
  const zd::SampleBatch b = s.read_batch({id});
  EXPECT_EQ(b.inputs, e.inputs) << "sample " << id;
  EXPECT_EQ(b.targets, e.targets) << "sample " << id;
  EXPECT_EQ(b.loss_mask, e.loss) << "sample " << id;
  EXPECT_EQ(b.doc_ids, e.docs) << "sample " << id;
  EXPECT_EQ(b.positions, e.positions) << "sample " << id;
}

}  // namespace

TEST(Packing, WritesShardsDocumentIndexesAndLossMasks) {
  zs::test::RankDir dir("data_pack_writer");
  const auto shards = write_corpus(dir.path);
  ASSERT_TRUE(shards->has_doc_index());
  ASSERT_TRUE(shards->has_loss_mask());
  EXPECT_EQ(shards->file(0).magic(), 20240520);
  EXPECT_EQ(shards->file(1).path(), dir.path + "/train_000001.bin");
  std::vector<int32_t> tokens(13);
  shards->read(0, 13, tokens.data());
  EXPECT_EQ(tokens, (std::vector<int32_t>{10, 11, 12, 99, 20, 21, 99, 30, 31, 32, 33, 34, 99}));
  std::vector<uint8_t> mask(13);
  shards->read_loss_mask(0, 13, mask.data());
  EXPECT_EQ(mask, (std::vector<uint8_t>{0, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(shards->num_documents(), 3);
  EXPECT_EQ(shards->document(2), (std::pair<int64_t, int64_t>{7, 13}));
  // A vocabulary above 65536 ids takes uint32 tokens (llm.c's Llama 3 layout).
  zd::ShardWriter wide({dir.path + "/wide", "w", 70000, 100});
  wide.add({{69999, 1}, {1, 1}});
  wide.finish();
  const zd::ShardFile f(dir.path + "/wide/w_000000.bin", zd::TokenFormat::kLlmc);
  EXPECT_EQ(f.magic(), 20240801);
  EXPECT_EQ(f.version(), 7);
  // A folder that already holds shards of the prefix is refused.
  EXPECT_EQ(message_of([&] { zd::ShardWriter({dir.path, "train", 100, 8}); }),
            "'" + dir.path + "' already holds shards (" + dir.path +
                "/train_000000.bin); new ones would mix with them: remove them or write to another folder");
}

// Windows of 4 positions over the 13-token stream; boundaries from the document index. The EOS
// ending a document is trained; the first token of the next one is not; prompt tokens are not.
TEST(Packing, PacksWindowsWithDocumentsAndMasks) {
  zs::test::RankDir dir("data_pack");
  const auto shards = write_corpus(dir.path);
  const zd::PackedSamples s(shards, {4, zd::Boundaries::kIndex, -1});
  ASSERT_EQ(s.num_samples(), 3);  // (13 - 1) / 4
  expect_sample(s, 0, {{10, 11, 12, 99}, {11, 12, 99, 20}, {0, 1, 1, 0}, {0, 0, 0, 0}, {0, 1, 2, 3}});
  // Document 2 starts at position 3 (token 30), in the second shard file.
  expect_sample(s, 1, {{20, 21, 99, 30}, {21, 99, 30, 31}, {1, 1, 0, 1}, {0, 0, 0, 1}, {0, 1, 2, 0}});
  expect_sample(s, 2, {{31, 32, 33, 34}, {32, 33, 34, 99}, {1, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 2, 3}});
  // End-of-text tokens give the same boundaries here.
  const zd::PackedSamples by_eos(shards, {4, zd::Boundaries::kEos, kEos});
  for (int64_t i = 0; i < 3; ++i) {
    const zd::SampleBatch a = s.read_batch({i}), b = by_eos.read_batch({i});
    EXPECT_EQ(a.loss_mask, b.loss_mask);
    EXPECT_EQ(a.doc_ids, b.doc_ids);
    EXPECT_EQ(a.positions, b.positions);
  }
  // No boundaries: one document; only the loss mask's zeros remain.
  const zd::PackedSamples none(shards, {4, zd::Boundaries::kNone, -1});
  expect_sample(none, 1, {{20, 21, 99, 30}, {21, 99, 30, 31}, {1, 1, 0, 1}, {0, 0, 0, 0}, {0, 1, 2, 3}});
  expect_sample(none, 0, {{10, 11, 12, 99}, {11, 12, 99, 20}, {0, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 2, 3}});
  // A batch holds its samples row after row, in the order asked.
  const zd::SampleBatch batch = s.read_batch({2, 0});
  EXPECT_EQ(batch.sample_ids, (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(batch.inputs, (std::vector<int32_t>{31, 32, 33, 34, 10, 11, 12, 99}));
}

// One document per sample: truncated beyond seq_len + 1 tokens, padded below, loss 0 on padding.
TEST(Packing, PadsOneDocumentPerSample) {
  zs::test::RankDir dir("data_pad");
  const auto shards = write_corpus(dir.path);
  const zd::PaddedSamples s(shards, {4, kPad});
  ASSERT_EQ(s.num_samples(), 3);
  expect_sample(s, 0, {{10, 11, 12, 99}, {11, 12, 99, kPad}, {0, 1, 1, 0}, {0, 0, 0, 0}, {0, 1, 2, 3}});
  expect_sample(s, 1, {{20, 21, 99, kPad}, {21, 99, kPad, kPad}, {1, 1, 0, 0}, {0, 0, 0, 1}, {0, 1, 2, 0}});
  expect_sample(s, 2, {{30, 31, 32, 33}, {31, 32, 33, 34}, {1, 1, 1, 1}, {0, 0, 0, 0}, {0, 1, 2, 3}});
}

// Windows that cross more than two files and every position of a longer stream agree with the
// stream itself (the windows tile it).
TEST(Packing, WindowsTileTheStreamAcrossManyFiles) {
  zs::test::RankDir dir("data_pack_tile");
  zd::ShardWriter w({dir.path, "t", 1000, 5});
  std::vector<int32_t> stream;
  for (int d = 0; d < 40; ++d) {
    zd::Document doc;
    for (int i = 0; i <= d % 7; ++i) doc.tokens.push_back(d * 10 + i), doc.trained.push_back(1);
    w.add(doc);
    stream.insert(stream.end(), doc.tokens.begin(), doc.tokens.end());
  }
  w.finish();
  const auto shards = std::make_shared<zd::TokenShards>(std::vector<std::string>{dir.path + "/t_*.bin"},
                                                         zd::ShardSetOptions{zd::TokenFormat::kLlmc, 1000});
  EXPECT_GT(shards->num_files(), 20u);
  for (int64_t len : {1, 3, 11}) {
    const zd::PackedSamples s(shards, {len, zd::Boundaries::kIndex, -1});
    ASSERT_EQ(s.num_samples(), (static_cast<int64_t>(stream.size()) - 1) / len);
    for (int64_t i = 0; i < s.num_samples(); ++i) {
      const zd::SampleBatch b = s.read_batch({i});
      for (int64_t j = 0; j < len; ++j) {
        const size_t at = static_cast<size_t>(i * len + j);
        EXPECT_EQ(b.inputs[j], stream[at]);
        EXPECT_EQ(b.targets[j], stream[at + 1]);
        // Document d's tokens are d*10 + i: a target continues the document when its tens match.
        EXPECT_EQ(b.loss_mask[j], stream[at] / 10 == stream[at + 1] / 10) << i << "," << j;
      }
    }
  }
}

TEST(Packing, RefusesWhatItCannotBuild) {
  zs::test::RankDir dir("data_pack_errors");
  const auto shards = write_corpus(dir.path);
  EXPECT_EQ(message_of([&] { zd::PackedSamples(shards, {13, zd::Boundaries::kIndex, -1}); }),
            "the shards hold 13 tokens, fewer than one sample of 13 positions needs (14)");
  EXPECT_EQ(message_of([&] { zd::PackedSamples(shards, {4, zd::Boundaries::kEos, -1}); }),
            "document boundaries from end-of-text tokens need the eos id");
  EXPECT_EQ(message_of([&] { zd::PaddedSamples(shards, {4, 100}); }),
            "the pad id 100 is outside the model's vocabulary (100 ids)");
  zs::test::write_bytes(dir.path + "/raw.bin", zs::test::token_bytes<uint16_t>({1, 2, 3, 4, 5}));
  const auto raw = std::make_shared<zd::TokenShards>(std::vector<std::string>{dir.path + "/raw.bin"},
                                                     zd::ShardSetOptions{zd::TokenFormat::kRawUint16, 0});
  EXPECT_EQ(message_of([&] { zd::PaddedSamples(raw, {4, 0}); }),
            "padded samples (one document each) need document indexes next to the shards (" + dir.path +
                "/raw.docs); zeroshard-data index writes them");
  EXPECT_EQ(message_of([&] { zd::PackedSamples(shards, {4, zd::Boundaries::kIndex, -1}).read_batch({3}); }),
            "sample 3 is outside [0, 3)");
}
