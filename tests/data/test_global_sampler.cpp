// SPDX-License-Identifier: Apache-2.0
// The permutation behind shuffling, and the global sampler: runs split across world sizes (2, then
// 4, then 1 rank) train on exactly the samples of one uninterrupted run, in the same order.

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <tuple>

#include "data/data_test_util.h"
#include "zeroshard/data/global_sampler.h"
#include "zeroshard/data/packing.h"
#include "zeroshard/data/permutation.h"
#include "zeroshard/data/rank_stream.h"
#include "zeroshard/data/shard_writer.h"

namespace zs = zeroshard;
namespace zd = zeroshard::data;
using zs::test::message_of;

namespace {

// The ids of `steps` steps at `world` ranks, concatenated step by step in rank order (what the
// whole job trains on), starting from `state_json` when given; the state after them in *state_out.
std::vector<int64_t> run(const zd::GlobalSamplerOptions& o, int world, int steps, const std::string& state_json,
                         std::string* state_out) {
  std::vector<zd::GlobalSampler> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back(o);
    if (!state_json.empty()) ranks.back().restore_json(state_json);
  }
  std::vector<int64_t> seen;
  for (int s = 0; s < steps; ++s) {
    for (int r = 0; r < world; ++r) {
      const std::vector<int64_t> ids = ranks[static_cast<size_t>(r)].next_step(r, world);
      seen.insert(seen.end(), ids.begin(), ids.end());
    }
  }
  for (int r = 1; r < world; ++r) EXPECT_EQ(ranks[static_cast<size_t>(r)].state_json(), ranks[0].state_json());
  *state_out = ranks[0].state_json();
  return seen;
}

}  // namespace

TEST(Permutation, IsABijectionForEverySize) {
  for (int64_t n : {0, 1, 2, 3, 5, 16, 17, 100, 1000, 4097}) {
    for (uint64_t seed : {0ull, 1ull, 0xDEADBEEFull}) {
      const zd::IndexPermutation p(n, seed);
      std::vector<int64_t> out(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = p(i);
      std::sort(out.begin(), out.end());
      std::vector<int64_t> all(static_cast<size_t>(n));
      std::iota(all.begin(), all.end(), 0);
      EXPECT_EQ(out, all) << "n " << n << " seed " << seed;
    }
  }
}

// The order is the documented one (docs/data.md), integer arithmetic only: a second
// implementation from that description (permutation_reference.py) gives the same indices.
TEST(Permutation, MatchesTheDocumentedAlgorithm) {
  const std::string script = std::string(ZS_TEST_SOURCE_DIR) + "/data/permutation_reference.py";
  for (const auto& [n, seed] : std::vector<std::pair<int64_t, uint64_t>>{
           {1, 0}, {7, 1}, {1000, 42}, {4097, 0xFFFFFFFFFFFFFFFFull}, {5003, 12345678901234567ull}}) {
    int status = 0;
    const std::string out = zs::test::run_command(
        "/usr/bin/python3 " + script + " " + std::to_string(n) + " " + std::to_string(seed), &status);
    ASSERT_EQ(status, 0);
    std::istringstream in(out);
    const zd::IndexPermutation p(n, seed);
    int64_t v = -1, i = 0, wrong = 0;
    for (; in >> v; ++i) wrong += i >= n || p(i) != v;
    EXPECT_EQ(i, n) << "n " << n;
    EXPECT_EQ(wrong, 0) << "n " << n << " seed " << seed;
  }
  // Other seeds, other orders; and not the identity.
  const zd::IndexPermutation p(1000, 42), q(1000, 43);
  int same = 0, fixed = 0;
  for (int64_t i = 0; i < 1000; ++i) same += p(i) == q(i), fixed += p(i) == i;
  EXPECT_LT(same, 20);
  EXPECT_LT(fixed, 20);
}

// The ids of one uninterrupted run at 1 rank equal, in order, those of a run of 2 ranks for 5
// steps, resumed at 4 ranks for 7 steps, then at 1 rank: across two epoch ends.
TEST(GlobalSampler, ResumesExactlyAtAnyWorldSize) {
  for (bool shuffle : {true, false}) {
    const zd::GlobalSamplerOptions o{/*num_samples=*/101, /*global_batch=*/8, shuffle, /*seed=*/7};
    std::string state;
    const std::vector<int64_t> whole = run(o, 1, 30, "", &state);
    const std::string end_state = state;
    std::vector<int64_t> split = run(o, 2, 5, "", &state);
    std::vector<int64_t> part = run(o, 4, 7, state, &state);
    split.insert(split.end(), part.begin(), part.end());
    part = run(o, 1, 18, state, &state);
    split.insert(split.end(), part.begin(), part.end());
    EXPECT_EQ(split, whole) << "shuffle " << shuffle;
    EXPECT_EQ(state, end_state);
    // 12 steps of 8 per epoch (5 samples left out), 30 steps: epoch 2, 6 steps in.
    EXPECT_EQ(end_state, std::string("{\"epoch\":2,\"consumed\":48,\"num_samples\":101,\"seed\":\"7\",\"shuffle\":") +
                             (shuffle ? "true" : "false") + "}");
    // Each epoch trains on 96 distinct samples.
    std::vector<int64_t> epoch0(whole.begin(), whole.begin() + 96);
    std::sort(epoch0.begin(), epoch0.end());
    EXPECT_EQ(std::unique(epoch0.begin(), epoch0.end()), epoch0.end());
    if (shuffle) EXPECT_NE(std::vector<int64_t>(whole.begin(), whole.begin() + 96),
                           std::vector<int64_t>(whole.begin() + 96, whole.begin() + 192));
  }
}

// The same with the samples' tokens: packed samples read by the ranks of a split run equal those
// of the uninterrupted one.
TEST(GlobalSampler, SplitRunsReadTheSameSamples) {
  zs::test::RankDir dir("data_sampler_samples");
  zd::ShardWriter w({dir.path, "s", 5000, 300});
  for (int d = 0; d < 60; ++d) {
    zd::Document doc;
    for (int i = 0; i < 5 + d % 13; ++i) doc.tokens.push_back((d * 31 + i) % 5000), doc.trained.push_back(i % 3 != 0);
    w.add(doc);
  }
  w.finish();
  const auto shards = std::make_shared<zd::TokenShards>(std::vector<std::string>{dir.path + "/s_*.bin"},
                                                        zd::ShardSetOptions{zd::TokenFormat::kLlmc, 5000});
  const zd::PackedSamples samples(shards, {16, zd::Boundaries::kIndex, -1});
  const zd::GlobalSamplerOptions o{samples.num_samples(), 4, true, 99};
  std::string state;
  const std::vector<int64_t> whole = run(o, 1, 20, "", &state);
  std::vector<int64_t> split = run(o, 2, 9, "", &state);
  const std::vector<int64_t> rest = run(o, 4, 11, state, &state);
  split.insert(split.end(), rest.begin(), rest.end());
  const zd::SampleBatch a = samples.read_batch(whole), b = samples.read_batch(split);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.targets, b.targets);
  EXPECT_EQ(a.loss_mask, b.loss_mask);
  EXPECT_EQ(a.doc_ids, b.doc_ids);
}

TEST(GlobalSampler, RefusesWhatCannotResumeExactly) {
  zd::GlobalSampler s({100, 12, true, 5});
  EXPECT_EQ(message_of([&] { s.next_step(0, 5); }),
            "the global batch of 12 samples does not split evenly over 5 ranks; use a global batch that is a "
            "multiple of the world size (e.g. 15)");
  s.next_step(1, 4);
  const std::string saved = s.state_json();
  EXPECT_EQ(message_of([&] { zd::GlobalSampler({99, 12, true, 5}).restore_json(saved); }),
            "data sampler state: the checkpoint's data has 100 samples, this run's has 99 (another corpus, "
            "sequence length or packing): the run cannot resume at the same sample");
  EXPECT_EQ(message_of([&] { zd::GlobalSampler({100, 12, true, 6}).restore_json(saved); }),
            "data sampler state: the checkpoint's seed is 5, this run's is 6: the sample order would differ");
  EXPECT_EQ(message_of([&] { zd::GlobalSampler({100, 12, true, 5}).restore_json("{\"epoch\": 1}"); }),
            "data sampler state has no \"num_samples\"");
  EXPECT_EQ(message_of([&] { zd::GlobalSampler({10, 12, true, 5}); }),
            "GlobalSampler: 10 samples hold no full global batch of 12");
  // Another global batch continues at the same sample.
  zd::GlobalSampler bigger({100, 24, true, 5});
  bigger.restore_json(saved);
  EXPECT_EQ(bigger.peek_step(0, 1)[0], s.sample_at(0, 12));
}

// The trainer's view: micro-batches of each rank, the state saved after a step. A run of 2 ranks
// x 2 micro-batches, resumed at 4 ranks x 1 and then 1 rank x 4, reads the samples of an
// uninterrupted 1-rank run, in order, token for token.
TEST(RankStream, ResumesMicroBatchesAtAnyWorldSize) {
  zs::test::RankDir dir("data_rank_stream");
  zd::ShardWriter w({dir.path, "s", 1000, 200});
  for (int d = 0; d < 40; ++d) {
    zd::Document doc;
    for (int i = 0; i < 3 + d % 11; ++i) doc.tokens.push_back((d * 17 + i) % 1000), doc.trained.push_back(i > 0);
    w.add(doc);
  }
  w.finish();
  const auto shards = std::make_shared<zd::TokenShards>(std::vector<std::string>{dir.path + "/s_*.bin"},
                                                        zd::ShardSetOptions{zd::TokenFormat::kLlmc, 1000});
  const auto samples = std::make_shared<zd::PackedSamples>(shards, zd::PackOptions{8, zd::Boundaries::kIndex, -1});
  // One step of `world` ranks with `micro` micro-batches each: the samples in (rank, micro) order.
  auto run = [&](int world, int micro, int steps, std::string* state) {
    std::vector<zd::RankStream> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.emplace_back(samples, zd::StreamOptions{8, micro, true, 3}, r, world);
      if (!state->empty()) ranks.back().restore_json(*state);
    }
    zd::SampleBatch all;
    for (int s = 0; s < steps; ++s) {
      for (auto& stream : ranks) {
        for (int m = 0; m < micro; ++m) {
          const zd::SampleBatch b = stream.next_micro_batch();
          EXPECT_EQ(b.size(), 8 / (world * micro));
          all.sample_ids.insert(all.sample_ids.end(), b.sample_ids.begin(), b.sample_ids.end());
          all.inputs.insert(all.inputs.end(), b.inputs.begin(), b.inputs.end());
          all.loss_mask.insert(all.loss_mask.end(), b.loss_mask.begin(), b.loss_mask.end());
        }
      }
    }
    *state = ranks[0].state_json();
    return all;
  };
  std::string state;
  const zd::SampleBatch whole = run(1, 1, 12, &state);
  const std::string end = state;
  state.clear();
  zd::SampleBatch split = run(2, 2, 3, &state);
  for (const auto& [world, micro, steps] : std::vector<std::tuple<int, int, int>>{{4, 1, 4}, {1, 4, 5}}) {
    const zd::SampleBatch part = run(world, micro, steps, &state);
    split.sample_ids.insert(split.sample_ids.end(), part.sample_ids.begin(), part.sample_ids.end());
    split.inputs.insert(split.inputs.end(), part.inputs.begin(), part.inputs.end());
    split.loss_mask.insert(split.loss_mask.end(), part.loss_mask.begin(), part.loss_mask.end());
  }
  EXPECT_EQ(split.sample_ids, whole.sample_ids);
  EXPECT_EQ(split.inputs, whole.inputs);
  EXPECT_EQ(split.loss_mask, whole.loss_mask);
  EXPECT_EQ(state, end);
  EXPECT_EQ(message_of([&] { zd::RankStream(samples, {8, 3, true, 3}, 0, 2); }),
            "the global batch of 8 samples does not split into 2 rank(s) x 3 micro-batch(es); use a multiple of 6 "
            "(e.g. 6)");
  zd::RankStream mid(samples, {8, 2, true, 3}, 0, 2);
  mid.next_micro_batch();
  EXPECT_EQ(message_of([&] { mid.state_json(); }),
            "RankStream::state_json between micro-batches (1 of 2 handed out): save the data position after a step");
}
