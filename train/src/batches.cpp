// SPDX-License-Identifier: Apache-2.0
// The batch plan and this rank's stream of batches (batches.h).

#include "zeroshard/train/batches.h"

#include <algorithm>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/core/session.h"

namespace zeroshard {

BatchPlan plan_batches(const TrainOptions& o, int world_size) {
  const int64_t global = o.batch_size;
  const int64_t per_step = static_cast<int64_t>(world_size) * o.micro_batches;
  ZS_REQUIRE(global % per_step == 0, ConfigError, "train.batch_size = ", global,
             " is the global batch and must be a multiple of ranks (", world_size, ") x train.micro_batches (",
             o.micro_batches, ") = ", per_step, "; e.g. train.batch_size=",
             std::max<int64_t>(1, global / per_step) * per_step);
  return {global / per_step, o.micro_batches, global};
}

DataLoaderOptions loader_options(const TrainOptions& o, int64_t batch_size, bool drop_last, c10::Device device) {
  DataLoaderOptions l;
  l.batch_size = batch_size;
  l.drop_last = drop_last;
  l.num_workers = o.num_workers;
  l.prefetch_batches = o.prefetch_batches;
  l.device = device;
  l.pin_memory = o.pin_memory;
  return l;
}

BatchStream::BatchStream(std::shared_ptr<const Dataset> dataset, int64_t samples, const Session& s,
                         const TrainOptions& o, int64_t batch_size)
    : sampler_(samples, s.world_size(), s.rank(), SamplerOptions{o.shuffle, o.seed, /*drop_last=*/true}),
      loader_(std::move(dataset), loader_options(o, batch_size, /*drop_last=*/true, s.device())),
      batches_per_epoch_(sampler_.num_samples() / batch_size) {
  ZS_REQUIRE(batches_per_epoch_ > 0, ConfigError, "the training set (", samples, " samples over ", s.world_size(),
             " rank(s), ", sampler_.num_samples(),
             " per rank) holds no full batch of train.batch_size / (ranks x micro_batches) = ", batch_size,
             " per rank; lower train.batch_size or raise data.limit_train_samples");
}

void BatchStream::begin_epoch(int64_t epoch, int64_t skip) {
  ZS_REQUIRE(skip >= 0 && skip <= batches_per_epoch_, CheckpointError, "data position: batch ", skip, " of epoch ",
             epoch, " is outside the epoch's ", batches_per_epoch_, " batches per rank");
  epoch_ = epoch;
  consumed_ = skip;
  sampler_.set_epoch(epoch);
  std::vector<int64_t> order = sampler_.indices();
  order.erase(order.begin(), order.begin() + skip * loader_.options().batch_size);
  loader_.start(std::move(order));
}

Batch BatchStream::next() {
  if (epoch_ < 0) begin_epoch(0);
  auto b = loader_.next();
  if (!b) {
    begin_epoch(epoch_ + 1);
    b = loader_.next();
  }
  ZS_CHECK(b.has_value(), "an epoch of ", batches_per_epoch_, " batches delivered none");
  ++consumed_;
  return std::move(*b);
}

}  // namespace zeroshard
