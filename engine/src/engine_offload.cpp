// SPDX-License-Identifier: Apache-2.0
// The engine's offload side (engine_offload.h): the parameter and gradient stores, the read-ahead
// of the next unit's shards, releasing what is resident, and the pager through which an offloaded
// optimizer step brings shards in.
#include "engine_offload.h"

#include "sharded_init_state.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/comm/collective_step.h"

namespace zeroshard {

void detail::OffloadStores::start_params(const std::vector<std::unique_ptr<ShardedUnit>>& units,
                                         ShardedInitState* init, MemoryStats* mem) {
  const bool wanted = options_.offload_params.target != OffloadTarget::kDevice;
  for (auto& u : units) {
    for (auto& f : u->flats) {
      // An engine built from a ShardedInit takes the ShardedInit's options: they cannot differ.
      if (f->codec() != nullptr) continue;  // resident (make_unit_flats refuses encoded shards with offload)
      ZS_CHECK(f->offload_capable() == wanted, "unit '", u->name, "' was built for offload_params.target ",
               wanted ? "DEVICE" : "CPU/NVME", " but the engine's is ", to_string(options_.offload_params.target));
    }
  }
  if (!wanted) return;
  // Units a ShardedInit built are in its store already: the engine takes it over.
  if (init != nullptr) params_ = init->take_store();
  if (params_ == nullptr) {
    detail::io_on_every_rank(*session_.world(), "creating the parameter shards' store", "zs.offload.params", [&] {
      params_ = std::make_unique<ShardStore>(detail::param_store_options(options_.offload_params, session_.device()),
                                             session_.rank(), mem, options_.offload_params.io);
    });
  }
}

void detail::OffloadStores::store_unit(const ShardedUnit& u) {
  if (params_ == nullptr) return;
  detail::io_on_every_rank(*session_.world(), detail::concat("storing the parameter shards of unit '", u.name, "'"),
                           "zs.offload.params", [&] {
                             for (auto& f : u.flats) {
                               if (f->offload_capable() && !f->shard_offloaded()) {
                                 f->attach_store(params_.get(), options_.keep_param_dtype_shard);
                               }
                             }
                           });
}

void detail::OffloadStores::start_grads(const std::vector<std::unique_ptr<ShardedUnit>>& units, MemoryStats* mem) {
  if (options_.offload_grads.target == OffloadTarget::kDevice) return;
  detail::io_on_every_rank(*session_.world(), "reserving the gradient shards' store", "zs.offload.grads", [&] {
    grads_ = std::make_unique<ShardStore>(options_.offload_grads, session_.rank(), mem, options_.offload_grads.io,
                                          ShardStore::Kind::kGrads);
    for (auto& u : units) {
      for (auto& f : u->flats) {
        if (f->trainable()) f->attach_grad_store(grads_.get());
      }
    }
  });
  ZS_LOG(kInfo) << "offload.grads = " << to_string(options_.offload_grads.target) << ": gradient shards ("
                << format_bytes(grads_->bytes_on_disk()) << " reserved on disk) kept "
                << (options_.offload_grads.target == OffloadTarget::kNvme ? "under " + options_.offload_grads.nvme_path
                                                                          : std::string("in host memory"))
                << " between backward and step";
}

void detail::OffloadStores::log_params() const {
  if (params_ == nullptr) return;
  ZS_LOG(kInfo) << "offload.params = " << to_string(options_.offload_params.target) << ": "
                << format_bytes(params_->bytes_on_disk() + params_->bytes_in_host())
                << " of parameter shards moved off the device"
                << (options_.offload_params.target == OffloadTarget::kNvme ? " to " + options_.offload_params.nvme_path
                                                                           : std::string(" to host memory"))
                << (options_.keep_param_dtype_shard
                        ? std::string("; a ") + c10::toString(options_.param_dtype) +
                              " copy of each stays resident for the gathers (offload.keep_param_dtype_shard)"
                        : std::string());
}

void detail::OffloadStores::load_for_gather(const ShardedUnit& u) {
  if (params_ == nullptr) return;
  bool stored = false;
  for (const auto& f : u.flats) stored = stored || f->shard_offloaded();
  if (!stored) return;
  detail::io_on_every_rank(*session_.world(), detail::concat("reading the parameter shards of unit '", u.name, "'"),
                           "zs.offload.read", [&] {
                             for (auto& f : u.flats) f->load_for_gather();
                           });
}

void detail::OffloadStores::read_ahead(const ShardedUnit* next) {
  if (params_ == nullptr || next == nullptr) return;
  for (auto& f : next->flats) {
    if (!f->gathered() && !f->has_param_dtype_copy()) f->prefetch_shard();  // a copy is gathered as it is
  }
}

void detail::OffloadStores::release_gathered(ShardedUnit& u, DeviceStreams& streams) {
  if (params_ == nullptr) return;
  std::vector<at::Tensor> dropped;
  for (auto& f : u.flats) f->release_shard(&dropped);
  released_.poll();
  if (!dropped.empty()) released_.release_after(std::move(dropped), streams.mark(streams.all_gather()));
}

void detail::OffloadStores::release_all(const std::vector<std::unique_ptr<ShardedUnit>>& units) {
  for (auto& u : units) {
    for (auto& f : u->flats) {
      f->release_grad();
      f->release_shard();
    }
  }
}

void detail::OffloadStores::release_all_noexcept(const std::vector<std::unique_ptr<ShardedUnit>>& units) noexcept {
  for (auto& u : units) {
    for (auto& f : u->flats) {
      try {
        f->release_grad();
      } catch (...) {  // stays resident and changed: the next release retries the write
      }
      try {
        f->release_shard();
      } catch (...) {  // stays resident and modified: the next release retries the write
      }
    }
  }
}

detail::FlatParamPager::FlatParamPager(std::vector<FlatParam*> flats, std::vector<ParamShard>& shards,
                                       ShardStore* store)
    : flats_(std::move(flats)), shards_(shards), store_(store) {
  ZS_CHECK(flats_.size() == shards_.size(), "pager over ", flats_.size(), " flat parameters and ", shards_.size(),
           " shards");
}

int64_t detail::FlatParamPager::numel(size_t i) const { return flats_.at(i)->shard_numel(); }

void detail::FlatParamPager::acquire(size_t i, bool read, bool grad) {
  FlatParam* f = flats_.at(i);
  // The gradient first: when it cannot be read, nothing else was acquired (shard_for_overwrite
  // would count the shard as modified).
  if (grad && f->grad_offloaded()) shards_[i].grad = f->grad_for_read();
  try {
    shards_[i].param = read ? f->shard_for_read() : f->shard_for_overwrite();
  } catch (...) {
    f->release_grad();  // unchanged: dropped, nothing written
    shards_[i].grad = f->grad_shard();
    throw;
  }
}

void detail::FlatParamPager::release(size_t i, bool modified) {
  FlatParam* f = flats_.at(i);
  if (f->grad_offloaded()) {
    f->release_grad();  // read only: dropped, nothing written
    shards_[i].grad = f->grad_shard();
  }
  shards_[i].param = at::Tensor();
  if (modified) f->mark_shard_modified();
  // Inside a step that commits, written behind the next shard's update (one write in flight):
  // commit() waits for them all and reports a failed one with the step still open, and abandon()
  // drops them. Elsewhere written at once (a failure throws here, the shard still resident).
  if (in_step_) {
    f->release_shard_behind();
  } else {
    f->release_shard();
  }
}

void detail::FlatParamPager::prefetch(size_t i, bool read) {
  if (i >= flats_.size()) return;
  if (read) flats_[i]->prefetch_shard();
  flats_[i]->prefetch_grad();
}

int detail::FlatParamPager::master_generations() const {
  if (store_ == nullptr || store_->target() != OffloadTarget::kNvme) return 0;
  for (const FlatParam* f : flats_) {
    if (!f->shard_offloaded() || !f->device().is_cpu()) return 0;
  }
  return store_->generations();
}

// Shards still resident from before the step (a write-back that failed) are written first, into
// the generation the step reads: what abandon() drops afterwards is only the step's own.
void detail::FlatParamPager::begin_step() {
  for (FlatParam* f : flats_) f->release_shard();
  store_->begin_step();
  in_step_ = true;
}

void detail::FlatParamPager::commit() {
  store_->commit();  // throws with the step still open: abandon() follows
  in_step_ = false;
}

void detail::FlatParamPager::abandon() noexcept {
  for (size_t i = 0; i < flats_.size(); ++i) {
    FlatParam* f = flats_[i];
    try {
      f->release_grad();  // read only: dropped, nothing written
    } catch (...) {
    }
    shards_[i].grad = f->grad_shard();
    shards_[i].param = at::Tensor();
    f->abandon_shard();
  }
  if (store_ != nullptr) store_->abandon();
  in_step_ = false;
}

}  // namespace zeroshard
