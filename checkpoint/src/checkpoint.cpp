// SPDX-License-Identifier: Apache-2.0
// Checkpointer: construction, the collective failure agreement, and the save/load entry points.
// The save (snapshot -> rank files -> manifest -> rename) is in checkpoint_save.cpp, the load
// (manifest -> structure check -> per-rank range reads with resharding) in checkpoint_load.cpp.

#include "zeroshard/checkpoint/checkpoint.h"

#include <ATen/ops/zeros.h>

#include <cstring>
#include <utility>

#include "checkpoint_internal.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/rank_file.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zeroshard {

namespace detail {

std::string flat_key(size_t i) { return "f" + std::to_string(i); }

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace detail

Checkpointer::Impl::Impl(ShardingEngine& e, CheckpointOptions opts, std::string cfg)
    : engine(e), o(std::move(opts)), config_text(std::move(cfg)), io(o.io != nullptr ? o.io : default_file_io()) {}

Checkpointer::Checkpointer(ShardingEngine& engine, CheckpointOptions options, std::string config_text)
    : impl_(std::make_unique<Impl>(engine, std::move(options), std::move(config_text))) {
  ZS_REQUIRE(impl_->o.keep_last >= 1, UsageError, "CheckpointOptions.keep_last = ", impl_->o.keep_last, " must be >= 1");
  impl_->comm = engine.session().world();
  if (impl_->o.async_save) impl_->bg_comm = impl_->comm->split(0, impl_->comm->rank());
}

Checkpointer::~Checkpointer() {
  try {
    impl_->join();
  } catch (const std::exception& e) {
    ZS_LOG(kError) << "checkpoint: the last async save failed: " << e.what();
  }
}

void Checkpointer::Impl::join() {
  if (worker.joinable()) worker.join();
  if (worker_error) {
    std::exception_ptr e = worker_error;
    worker_error = nullptr;
    std::rethrow_exception(e);
  }
}

void Checkpointer::Impl::check_no_pending_grads(const char* what) const {
  for (FlatShard* f : engine.flat_shards()) {
    ZS_REQUIRE(!f->gradients_pending(), UsageError, "checkpoint ", what,
               " with gradients of unit '", f->name(), "' still pending: ", what, " between optimizer steps");
  }
}

void Checkpointer::wait() { impl_->join(); }

int64_t Checkpointer::last_durable_step() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->durable_step;
}

std::string Checkpointer::save(ShardedOptimizer& optimizer, const TrainingState& state) {
  Impl& im = *impl_;
  ZS_REQUIRE(!im.o.dir.empty(), UsageError, "CheckpointOptions.dir is empty: set it to save checkpoints");
  im.join();  // one save at a time; a failed async save reports here
  im.check_no_pending_grads("save");
  auto snap = std::make_shared<detail::Snapshot>(im.snapshot(optimizer, state));
  const std::string final_dir = im.o.dir + "/" + ckpt::step_dir_name(state.step);
  if (!im.o.async_save) return im.write(*snap, *im.comm);
  im.worker = std::thread([&im, snap] {
    try {
      im.write(*snap, *im.bg_comm);
    } catch (...) {
      im.worker_error = std::current_exception();
    }
  });
  return final_dir;
}

TrainingState Checkpointer::load(ShardedOptimizer& optimizer, const std::string& path) {
  Impl& im = *impl_;
  im.join();
  const std::string where = path.empty() ? im.o.dir : path;
  ZS_REQUIRE(!where.empty(), UsageError, "nothing to load: no path given and CheckpointOptions.dir is empty");
  im.check_no_pending_grads("load");
  TrainingState out;
  const detail::StepOutcome step = detail::run_step(*im.comm, true, "zs.ckpt.load", [&] {
    out.path = ckpt::resolve_checkpoint(where);
    const ckpt::Manifest m = ckpt::read_manifest(out.path);
    im.apply(optimizer, m, out.path, out);
  });
  if (step.any_failed()) {
    const std::string what = detail::first_error(*im.comm, step, "zs.ckpt.load_error");
    ZS_THROW(CheckpointError, "loading checkpoint '", where, "' failed on rank(s) ", step.failed_ranks(), ": ",
             step.error.empty() ? what : step.error);
  }
  ZS_LOG(kInfo) << "loaded checkpoint " << out.path << " (step " << out.step << (out.resharded ? ", resharded" : "")
                << ")";
  return out;
}

}  // namespace zeroshard
