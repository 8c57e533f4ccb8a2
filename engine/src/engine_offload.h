// SPDX-License-Identifier: Apache-2.0
#pragma once
// The engine's offload side. OffloadStores owns the stores a unit's shards leave memory for
// (offload.params, offload.grads; zeroshard/store/shard_store.h): it creates them, moves each
// unit's shards in, reads the next unit's shards ahead of its gather, and writes back what is
// resident. FlatParamPager is how an offloaded optimizer step brings the shards in
// (zeroshard/optim/optimizer.h); FlatParamGradients how clipping and the loss scaler read the
// gradients.

#include <functional>
#include <memory>
#include <vector>

#include "flat_param.h"
#include "sharded_unit.h"
#include "zeroshard/comm/streams.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/store/shard_store.h"

namespace zeroshard::detail {

class ShardedInitState;

class OffloadStores {
 public:
  OffloadStores(Session& session, const ShardingOptions& options) : session_(session), options_(options) {}

  // offload.params: creates the store (or takes over the one `init`, if any, built the units in),
  // after checking every flat parameter can move there. Storing can fail on some ranks only (a
  // drive too small on one node): every rank agrees after each storing step, and all fail together
  // with the failing rank's error.
  void start_params(const std::vector<std::unique_ptr<ShardedUnit>>& units, ShardedInitState* init,
                    MemoryStats* mem);
  // Moves the unit's shards into the parameter store (if any), agreed on by every rank.
  void store_unit(const ShardedUnit& u);
  void log_params() const;
  // offload.grads: creates the gradient store and moves every trainable flat's gradient there.
  void start_grads(const std::vector<std::unique_ptr<ShardedUnit>>& units, MemoryStats* mem);

  // Reads `u`'s offloaded shards in for its gathers (FlatParam::load_for_gather), then agrees with
  // every rank on whether that failed anywhere: a read error (I/O, checksum) on one rank throws
  // IoError on all of them here, before the gathers they would otherwise wait in for the rank that
  // left. Collective over the world when `u` has stored shards (the same on every rank).
  void load_for_gather(const ShardedUnit& u);
  // Reads `next`'s offloaded shards ahead (the unit the schedule gathers next; null: none).
  void read_ahead(const ShardedUnit* next);
  // `u`'s gathers are complete: its offloaded shards go back to the store (unchanged: nothing is
  // written) until the next gather or step. On a GPU the all-gather stream may still read a shard:
  // it is kept until that stream is past this point.
  void release_gathered(ShardedUnit& u, DeviceStreams& streams);
  // Writes back and drops every resident offloaded shard, parameters and gradients (after a step,
  // a checkpoint, a load). The noexcept one keeps what fails to write resident.
  static void release_all(const std::vector<std::unique_ptr<ShardedUnit>>& units);
  static void release_all_noexcept(const std::vector<std::unique_ptr<ShardedUnit>>& units) noexcept;

  ShardStore* params() const { return params_.get(); }
  ShardStore* grads() const { return grads_.get(); }

 private:
  Session& session_;
  const ShardingOptions& options_;
  std::unique_ptr<ShardStore> params_;
  std::unique_ptr<ShardStore> grads_;
  // Offloaded shards dropped after a gather, kept until the all-gather stream is done with them.
  ReleaseQueue released_;
};

// The engine's side of an offloaded optimizer step (ShardPager, optimizer.h): shard i of the step
// is trainable flat parameter i.
class FlatParamPager final : public ShardPager {
 public:
  // `store`: the parameter store the shards live in (null when they are resident).
  FlatParamPager(std::vector<FlatParam*> flats, std::vector<ParamShard>& shards, ShardStore* store);
  int64_t numel(size_t i) const override;
  void acquire(size_t i, bool read, bool grad) override;
  void release(size_t i, bool modified) override;
  void prefetch(size_t i, bool read) override;
  // The store's generations when every shard is in it, on NVMe, and computed on the CPU (the
  // optimizer then updates the stored values themselves); else 0.
  int master_generations() const override;
  void begin_step() override;
  void commit() override;
  void abandon() noexcept override;

 private:
  std::vector<FlatParam*> flats_;
  std::vector<ParamShard>& shards_;
  ShardStore* store_;
  bool in_step_ = false;  // between begin_step() and commit() / abandon(): write-backs go behind
};

// ShardingEngine::gradients(): the trainable flat parameters that hold a gradient.
class FlatParamGradients final : public GradientShards {
 public:
  std::vector<FlatParam*> flats;
  std::function<void(double)> before_scale;  // told each factor before it is applied (may be empty)
  std::function<void()> after_scale;         // and told when it was
  size_t size() const override { return flats.size(); }
  const at::Tensor& read(size_t i) override { return flats[i]->grad_for_read(); }
  void prefetch(size_t i) override { flats[i]->prefetch_grad(); }
  bool offloaded(size_t i) const override { return flats[i]->grad_offloaded(); }
  void release(size_t i) override { flats[i]->release_grad(); }
  void scale(size_t i, double factor) override {
    if (before_scale) before_scale(factor);
    flats[i]->scale_grad(factor);
    if (after_scale) after_scale();
  }
};

}  // namespace zeroshard::detail
