// SPDX-License-Identifier: Apache-2.0
// Checkpointer: construction, the background save, and the save/load entry points. The save
// (snapshot -> rank files -> manifest -> rename) is the CheckpointWriter's (checkpoint_save.cpp),
// the load (manifest -> structure check -> per-rank range reads with resharding) the
// CheckpointReader's (checkpoint_load.cpp).

#include "zeroshard/checkpoint/checkpoint.h"

#include <ATen/ops/zeros.h>

#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "checkpoint_reader.h"
#include "checkpoint_writer.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/rank_file.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zeroshard {

struct Checkpointer::Impl {
  Impl(ShardingEngine& e, CheckpointOptions opts, std::string cfg)
      : engine(e),
        o(std::move(opts)),
        io(o.io != nullptr ? o.io : default_file_io()),
        comm(e.session().world()),
        writer(e, o, std::move(cfg), io, comm),
        reader(e, io, comm) {}
  void join();
  void check_no_pending_grads(const char* what) const;

  ShardingEngine& engine;
  CheckpointOptions o;
  std::shared_ptr<IoEngine> io;           // rank files, manifest, `latest`
  std::shared_ptr<Communicator> comm;     // the engine's world (sync saves, loads)
  std::shared_ptr<Communicator> bg_comm;  // the background writer's own
  detail::CheckpointWriter writer;
  detail::CheckpointReader reader;
  std::thread worker;
  std::exception_ptr worker_error;
};

Checkpointer::Checkpointer(ShardingEngine& engine, CheckpointOptions options, std::string config_text) {
  ZS_REQUIRE(options.keep_last >= 1, UsageError, "CheckpointOptions.keep_last = ", options.keep_last, " must be >= 1");
  impl_ = std::make_unique<Impl>(engine, std::move(options), std::move(config_text));
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

int64_t Checkpointer::last_durable_step() const { return impl_->writer.durable_step(); }

std::string Checkpointer::save(ShardedOptimizer& optimizer, const TrainingState& state) {
  Impl& im = *impl_;
  ZS_REQUIRE(!im.o.dir.empty(), UsageError, "CheckpointOptions.dir is empty: set it to save checkpoints");
  im.join();  // one save at a time; a failed async save reports here
  im.check_no_pending_grads("save");
  auto snap = std::make_shared<detail::Snapshot>(im.writer.snapshot(optimizer, state));
  const std::string final_dir = im.o.dir + "/" + ckpt::step_dir_name(state.step);
  if (!im.o.async_save) return im.writer.write(*snap, *im.comm);
  im.worker = std::thread([&im, snap] {
    try {
      im.writer.write(*snap, *im.bg_comm);
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
    im.reader.apply(optimizer, m, out.path, out);
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
