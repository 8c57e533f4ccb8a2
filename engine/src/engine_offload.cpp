// SPDX-License-Identifier: Apache-2.0
// ShardingEngine's offload side: the parameter and gradient stores (offload.params,
// offload.grads; shard_store.h), the read-ahead of the next unit's shards, releasing what is
// resident, and the pager through which an offloaded optimizer step brings shards in.
#include "zeroshard/comm/collective_step.h"
#include "engine_internal.h"
#include "sharded_init_state.h"

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/base/logging.h"
#include "flat_param.h"
#include "zeroshard/store/shard_store.h"

namespace zeroshard {

// Storing shards can fail on some ranks only (a drive too small on one node): with offload, every
// rank agrees after each storing step (io_on_every_rank), and all fail together with the failing
// rank's error instead of the others waiting for it in the next unit's broadcast.
void detail::ShardingEngineImpl::start_param_store() {
  const bool wanted = options.offload_params.target != OffloadTarget::kDevice;
  for (auto& u : units) {
    for (auto& f : u->flats) {
      // An engine built from a ShardedInit takes the ShardedInit's options: they cannot differ.
      if (f->codec() != nullptr) continue;  // resident (make_unit_flats refuses encoded shards with offload)
      ZS_CHECK(f->offload_capable() == wanted, "unit '", u->name, "' was built for offload_params.target ",
               wanted ? "DEVICE" : "CPU/NVME", " but the engine's is ", to_string(options.offload_params.target));
    }
  }
  if (!wanted) return;
  // Units a ShardedInit built are in its store already: the engine takes it over.
  if (init != nullptr) param_store = init->take_store();
  if (param_store == nullptr) {
    detail::io_on_every_rank(*session.world(), "creating the parameter shards' store", "zs.offload.params", [&] {
      param_store = std::make_unique<ShardStore>(detail::param_store_options(options.offload_params, session.device()),
                                                 session.rank(), mem.get(), options.offload_params.io);
    });
  }
}

void detail::ShardingEngineImpl::store_unit_shards(detail::ShardedUnit* u) {
  if (param_store == nullptr) return;
  detail::io_on_every_rank(*session.world(), detail::concat("storing the parameter shards of unit '", u->name, "'"),
                           "zs.offload.params", [&] {
                             for (auto& f : u->flats) {
                               if (f->offload_capable() && !f->shard_offloaded()) {
                                 f->attach_store(param_store.get(), options.keep_param_dtype_shard);
                               }
                             }
                           });
}


void detail::ShardingEngineImpl::start_grad_store() {
  if (options.offload_grads.target == OffloadTarget::kDevice) return;
  detail::io_on_every_rank(*session.world(), "reserving the gradient shards' store", "zs.offload.grads", [&] {
    grad_store = std::make_unique<ShardStore>(options.offload_grads, session.rank(), mem.get(),
                                              options.offload_grads.io, ShardStore::Kind::kGrads);
    for (auto& u : units) {
      for (auto& f : u->flats) {
        if (f->trainable()) f->attach_grad_store(grad_store.get());
      }
    }
  });
  ZS_LOG(kInfo) << "offload.grads = " << to_string(options.offload_grads.target) << ": gradient shards ("
                << format_bytes(grad_store->bytes_on_disk()) << " reserved on disk) kept "
                << (options.offload_grads.target == OffloadTarget::kNvme ? "under " + options.offload_grads.nvme_path
                                                                         : std::string("in host memory"))
                << " between backward and step";
}

void detail::ShardingEngineImpl::log_param_store() const {
  if (param_store == nullptr) return;
  ZS_LOG(kInfo) << "offload.params = " << to_string(options.offload_params.target) << ": "
                << format_bytes(param_store->bytes_on_disk() + param_store->bytes_in_host())
                << " of parameter shards moved off the device"
                << (options.offload_params.target == OffloadTarget::kNvme ? " to " + options.offload_params.nvme_path
                                                                            : std::string(" to host memory"))
                << (options.keep_param_dtype_shard
                        ? std::string("; a ") + c10::toString(options.param_dtype) +
                              " copy of each stays resident for the gathers (offload.keep_param_dtype_shard)"
                        : std::string());
}

void detail::ShardingEngineImpl::read_ahead(const detail::ShardedUnit& u) {
  if (param_store == nullptr) return;
  const detail::ShardedUnit* next = schedule.next_after(u, in_backward());
  if (next == nullptr) return;
  for (auto& f : next->flats) {
    if (!f->gathered() && !f->has_param_dtype_copy()) f->prefetch_shard();  // a copy is gathered as it is
  }
}

void detail::ShardingEngineImpl::release_offloaded_shards() {
  for (auto& u : units) {
    for (auto& f : u->flats) {
      f->release_grad();
      f->release_shard();
    }
  }
}

void detail::ShardingEngineImpl::release_offloaded_shards_noexcept() noexcept {
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
  f->release_shard();
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
}

void detail::FlatParamPager::commit() { store_->commit(); }

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
}

}  // namespace zeroshard
