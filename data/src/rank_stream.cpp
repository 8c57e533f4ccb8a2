// SPDX-License-Identifier: Apache-2.0
// One rank's micro-batches in the global sample order, and its checkpoint state (rank_stream.h).

#include "zeroshard/data/rank_stream.h"

#include <algorithm>
#include <cstddef>
#include <utility>

#include "zeroshard/base/error.h"

namespace zeroshard::data {
namespace {

int64_t checked_micro_size(const SampleSource* samples, const StreamOptions& o, int world_size) {
  ZS_REQUIRE(samples != nullptr, UsageError, "RankStream: no samples");
  ZS_REQUIRE(world_size >= 1 && o.micro_batches >= 1, UsageError, "RankStream: world size ", world_size,
             " and micro-batches ", o.micro_batches, " must be at least 1");
  const int64_t per_step = static_cast<int64_t>(world_size) * o.micro_batches;
  ZS_REQUIRE(o.global_batch % per_step == 0, UsageError, "the global batch of ", o.global_batch,
             " samples does not split into ", world_size, " rank(s) x ", o.micro_batches,
             " micro-batch(es); use a multiple of ", per_step, " (e.g. ",
             std::max<int64_t>(1, o.global_batch / per_step) * per_step, ")");
  return o.global_batch / per_step;
}

}  // namespace

RankStream::RankStream(std::shared_ptr<const SampleSource> samples, StreamOptions options, int rank, int world_size)
    : samples_(std::move(samples)),
      options_(options),
      rank_(rank),
      world_size_(world_size),
      micro_size_(checked_micro_size(samples_.get(), options, world_size)),
      sampler_({samples_->num_samples(), options.global_batch, options.shuffle, options.seed}) {
  ZS_REQUIRE(rank >= 0 && rank < world_size, UsageError, "RankStream: rank ", rank, " is outside [0, ", world_size,
             ")");
}

SampleBatch RankStream::next_micro_batch() {
  if (next_micro_ == 0) step_ids_ = sampler_.next_step(rank_, world_size_);
  const auto first = step_ids_.begin() + static_cast<std::ptrdiff_t>(next_micro_ * micro_size_);
  const std::vector<int64_t> ids(first, first + static_cast<std::ptrdiff_t>(micro_size_));
  next_micro_ = (next_micro_ + 1) % options_.micro_batches;
  return samples_->read_batch(ids);
}

std::string RankStream::state_json() const {
  ZS_REQUIRE(next_micro_ == 0, UsageError, "RankStream::state_json between micro-batches (", next_micro_, " of ",
             options_.micro_batches, " handed out): save the data position after a step");
  return sampler_.state_json();
}

void RankStream::restore_json(const std::string& json) {
  sampler_.restore_json(json);
  next_micro_ = 0;
}

}  // namespace zeroshard::data
