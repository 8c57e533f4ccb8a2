// SPDX-License-Identifier: Apache-2.0
// Training samples as causal-LM tensors (zeroshard/models/lm_batch.h): every array lands where the
// model reads it, untrained targets become -100, ids outside the model's vocabulary are refused
// with their sample and position, and the per-position loss equals PyTorch's log-softmax picked at
// each target.

#include <ATen/ops/allclose.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>

#include <functional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/models/lm_batch.h"

namespace zm = zeroshard::models;
namespace zd = zeroshard::data;

namespace {
using zeroshard::test::message_of;

// Two rows of four: row 0 holds two documents (a boundary after position 1), row 1 one with its
// prompt untrained.
zd::SampleBatch two_rows() {
  zd::SampleBatch b;
  b.resize(2, 4);
  b.sample_ids = {7, 3};
  b.inputs = {1, 2, 9, 4, 5, 6, 7, 8};
  b.targets = {2, 9, 4, 0, 6, 7, 8, 1};
  b.loss_mask = {1, 0, 1, 1, 0, 0, 1, 1};
  b.doc_ids = {0, 0, 1, 1, 0, 0, 0, 0};
  b.positions = {0, 1, 0, 1, 0, 1, 2, 3};
  return b;
}

std::vector<int64_t> values(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

}  // namespace

TEST(LmBatch, PutsEveryArrayWhereTheModelReadsIt) {
  const zm::LmBatch b = zm::to_lm_batch(two_rows(), 10);
  EXPECT_EQ(b.ids.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(values(b.ids), (std::vector<int64_t>{1, 2, 9, 4, 5, 6, 7, 8}));
  EXPECT_EQ(values(b.targets), (std::vector<int64_t>{2, -100, 4, 0, -100, -100, 8, 1}));
  EXPECT_EQ(values(b.documents), (std::vector<int64_t>{0, 0, 1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(values(b.positions), (std::vector<int64_t>{0, 1, 0, 1, 0, 1, 2, 3}));
  EXPECT_EQ(b.trained, 5);
}

TEST(LmBatch, RefusesIdsOutsideTheModelsVocabulary) {
  // Input 9 at sample 7 position 2; a trained target 9 at sample 7 position 1 would come first,
  // but that target is not trained, so the input is what is named.
  EXPECT_EQ(message_of<zeroshard::DataError>([] { zm::to_lm_batch(two_rows(), 9); }),
            "sample 7, position 2: token id 9 is outside the model's vocabulary of 9 ids");
  zd::SampleBatch b = two_rows();
  b.targets[7] = 12;  // sample 3, position 3, trained
  EXPECT_EQ(message_of<zeroshard::DataError>([&] { zm::to_lm_batch(b, 10); }),
            "sample 3, position 3: token id 12 is outside the model's vocabulary of 10 ids");
  b.loss_mask[7] = 0;  // an untrained target is never looked up
  EXPECT_NO_THROW(zm::to_lm_batch(b, 10));
}

TEST(LmBatch, NllIsLogSoftmaxAtEachTrainedTarget) {
  const zm::LmBatch b = zm::to_lm_batch(two_rows(), 10);
  const at::Tensor logits = at::randn({2, 4, 10}, at::kFloat);
  const at::Tensor nll = zm::next_token_nll(logits, b.targets);
  ASSERT_EQ(nll.sizes(), (std::vector<int64_t>{2, 4}));
  const at::Tensor logp = at::log_softmax(logits, -1);
  const std::vector<int64_t> t = values(b.targets);
  for (int64_t i = 0; i < 8; ++i) {
    const float want = t[i] < 0 ? 0.f : -logp[i / 4][i % 4][t[i]].item<float>();
    EXPECT_NEAR(nll[i / 4][i % 4].item<float>(), want, 1e-6) << "position " << i;
  }
  EXPECT_EQ(message_of<zeroshard::UsageError>([&] { zm::next_token_nll(logits, b.targets.narrow(1, 0, 3)); }),
            "next-token loss: logits [B, T, vocab] and int64 targets [B, T] expected, got [2, 4, 10] and Long [2, 3]");
}
