// SPDX-License-Identifier: Apache-2.0
// Checkpointer save: snapshot -> rank files -> manifest -> rename -> `latest` -> retention
// (checkpoint.h). Every step ends with a collective agreement on failures, so a save that fails
// on any rank fails on every rank and leaves earlier checkpoints as they were.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc 2.28)

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>

#include "checkpoint_writer.h"
#include "sections.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/rank_file.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zeroshard {
namespace fs = std::filesystem;
using detail::PendingSection;
using detail::Snapshot;


// Sync saves write straight from the live tensors (training waits); async saves copy them first.
Snapshot detail::CheckpointWriter::snapshot(ShardedOptimizer& opt, const TrainingState& st) {
  at::NoGradGuard no_grad;
  Snapshot s;
  s.step = st.step;
  s.rank = comm_->rank();
  s.world = comm_->size();
  s.holds_shards = engine_.replica_rank() == 0;
  const std::vector<FlatShard*> flats = engine_.flat_shards();
  s.shard_rank = engine_.shard_rank();
  std::vector<ShardOptimizerState> opt_state;
  if (s.holds_shards) opt_state = opt.export_state();
  const int64_t on_nvme = opt.placement().nvme;
  ZS_REQUIRE(!options_.async_save || on_nvme == 0, UsageError, "checkpoint.async_save copies this rank's optimizer state "
             "into host memory to write it while training goes on; with the state offloaded to NVMe (",
             on_nvme / 1048576, " MiB on rank ", s.rank, ") that copy is what offloading avoids: save synchronously "
             "(checkpoint.async_save = false), which streams the state shard by shard");
  if (s.holds_shards) snapshot_shards(s, flats, opt_state, opt.state_names());
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor rng = gen.get_state();
    s.sections.push_back({"rng/cpu", "uint8", {rng.numel()}, rng.contiguous(), {}, {}, {}});
  }
  const c10::Device device = engine_.session().device();
  if (device.is_cuda()) {
    // The CUDA generator of this rank's device (dropout on the GPU draws from it): exact resume.
    at::Generator gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor rng = gen.get_state();
    s.sections.push_back({"rng/cuda", "uint8", {rng.numel()}, rng.contiguous(), {}, {}, {}});
  }
  for (const auto& [k, v] : st.per_rank) s.sections.push_back({"user/" + k, "bytes", {}, at::Tensor(), v, {}, {}});
  if (s.rank == 0) {
    snapshot_buffers(s);
    fill_manifest(s.manifest, opt, st, flats, opt_state);
  }
  return s;
}

namespace {

// `t` on the host; a copy when the save is asynchronous and `t` already was on the host.
at::Tensor host_copy(const at::Tensor& t, bool async) {
  at::Tensor h = t.detach().to(at::kCPU).contiguous();
  return async && h.data_ptr() == t.data_ptr() ? h.clone() : h;
}

// The sections of one position's optimizer state. Synchronous saves read lazy state when its
// first section is written and drop it after the last.
void add_state_sections(Snapshot& s, const std::string& prefix, const ShardOptimizerState& os,
                        const std::vector<std::string>& names, int64_t numel, bool async) {
  if (!os.has_tensors()) return;
  if (async || !os.read) {
    const std::vector<at::Tensor> tensors = os.materialize();
    for (size_t k = 0; k < tensors.size(); ++k) {
      const at::Tensor t = host_copy(tensors[k].to(at::kFloat), async && !os.read);  // lazy ones are copies
      s.sections.push_back({prefix + names.at(k), "float32", {numel}, t, {}, {}, {}});
    }
    return;
  }
  auto cache = std::make_shared<std::vector<at::Tensor>>();
  for (size_t k = 0; k < names.size(); ++k) {
    PendingSection p{prefix + names[k], "float32", {numel}, at::Tensor(), {}, {}, {}};
    p.produce = [os, cache, k] {
      if (cache->empty()) *cache = os.materialize();
      return cache->at(k).to(at::kFloat).contiguous();
    };
    if (k + 1 == names.size()) p.written = [cache] { cache->clear(); };
    s.sections.push_back(std::move(p));
  }
}

}  // namespace

void detail::CheckpointWriter::snapshot_shards(Snapshot& s, const std::vector<FlatShard*>& flats,
                                         const std::vector<ShardOptimizerState>& opt_state,
                                         const std::vector<std::string>& state_names) {
  size_t trainable_index = 0;
  for (size_t i = 0; i < flats.size(); ++i) {
    FlatShard& f = *flats[i];
    PendingSection p{detail::flat_key(i) + "/param", "float32", {f.shard_numel()}, at::Tensor(), {}, {}, {}};
    if (options_.async_save) {
      p.tensor = host_copy(f.shard_for_read(), true);
      f.release_shard();  // offloaded: back to the store (unchanged); the snapshot keeps its copy
    } else {  // read when written, released after: one offloaded shard resident at a time
      p.produce = [&f] { return f.shard_for_read().detach().to(at::kCPU).contiguous(); };
      p.written = [&f] { f.release_shard(); };
    }
    s.sections.push_back(std::move(p));
    if (!f.trainable()) continue;
    const size_t pos = trainable_index++;
    if (pos >= opt_state.size()) continue;
    add_state_sections(s, detail::flat_key(i) + "/opt/", opt_state[pos], state_names, f.shard_numel(),
                       options_.async_save);
  }
}

void detail::CheckpointWriter::snapshot_buffers(Snapshot& s) {
  for (const auto& b : engine_.model().named_buffers()) {
    s.sections.push_back({"buffer/" + b.key(), c10::toString(b.value().scalar_type()), b.value().sizes().vec(),
                          host_copy(b.value(), options_.async_save), {}, {}, {}});
  }
}

namespace {

// One parameter of a flat: its name, aliases, shape and place; `group` (trainable ones) its
// parameter group's weight decay and learning-rate scale.
void describe_param(ckpt::ParamEntry* pe, const ParamSlot& ps, const ParamGroupAssignment* group) {
  pe->set_name(ps.name);
  for (const auto& a : ps.aliases) pe->add_aliases(a);
  for (int64_t d : ps.shape) pe->add_shape(d);
  pe->set_offset(ps.offset);
  pe->set_numel(ps.numel);
  if (group != nullptr) {
    pe->set_weight_decay(group->weight_decay);
    pe->set_lr_scale(group->lr_scale);
  }
}

// What besides the tensors a checkpoint restores: the loss scaler and the program's entries.
void describe_state(ckpt::Manifest& m, const TrainingState& st) {
  if (st.grad_scaler) {
    ckpt::GradScalerState* g = m.mutable_grad_scaler();
    g->set_scale(st.grad_scaler->scale);
    g->set_growth_tracker(st.grad_scaler->growth_tracker);
    g->set_hysteresis_left(st.grad_scaler->hysteresis_left);
    g->set_steps(st.grad_scaler->steps);
    g->set_skipped(st.grad_scaler->skipped);
  }
  for (const auto& [k, v] : st.global) {
    ckpt::UserEntry* u = m.add_user();
    u->set_key(k);
    u->set_value(v);
  }
}

}  // namespace

void detail::CheckpointWriter::fill_manifest(ckpt::Manifest& m, ShardedOptimizer& opt, const TrainingState& st,
                                       const std::vector<FlatShard*>& flats,
                                       const std::vector<ShardOptimizerState>& opt_state) {
  m.set_format_version(ckpt::kFormatVersion);
  m.set_zeroshard_version(ZS_VERSION);
  m.set_step(st.step);
  m.set_world_size(comm_->size());
  m.set_strategy(to_string(engine_.options().strategy));
  m.set_shard_group_size(engine_.shard_group_size());
  m.set_config_text(config_text_);
  ckpt::describe_model(m, options_.model);
  m.set_optimizer(opt.describe());
  for (const auto& n : opt.state_names()) m.add_optimizer_state_names(n);
  m.set_optimizer_steps(opt.steps());
  size_t trainable_index = 0;
  const std::vector<ParamGroupAssignment>& groups = engine_.param_groups();
  size_t group_index = 0;  // groups cover the trainable parameters, in this order
  for (size_t i = 0; i < flats.size(); ++i) {
    FlatShard& f = *flats[i];
    ckpt::FlatEntry* fe = m.add_flats();
    fe->set_unit(f.name());
    fe->set_name(detail::flat_key(i));
    fe->set_trainable(f.trainable());
    fe->set_numel(f.numel());
    fe->set_padded_numel(f.padded_numel());
    fe->set_shard_numel(f.shard_numel());
    if (f.trainable()) {
      const size_t pos = trainable_index++;
      fe->set_optimizer_updates(pos < opt_state.size() ? opt_state[pos].updates : 0);
      fe->set_has_optimizer_state(pos < opt_state.size() && opt_state[pos].has_tensors());
    }
    for (const ParamSlot& ps : f.slots()) {
      const bool grouped = f.trainable() && group_index < groups.size();
      describe_param(fe->add_params(), ps, grouped ? &groups[group_index++] : nullptr);
    }
  }
  for (const auto& b : engine_.model().named_buffers()) {
    ckpt::BufferEntry* be = m.add_buffers();
    be->set_name(b.key());
    be->set_dtype(c10::toString(b.value().scalar_type()));
    for (int64_t d : b.value().sizes()) be->add_shape(d);
  }
  describe_state(m, st);
}

std::string detail::CheckpointWriter::write(const Snapshot& s, Communicator& c) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string root = options_.dir;
  const std::string final_dir = root + "/" + ckpt::step_dir_name(s.step);
  const std::string tmp = root + "/.tmp-" + ckpt::step_dir_name(s.step);
  const std::string tag = "zs.ckpt." + std::to_string(s.step);
  auto discard = [&] {
    if (s.rank != 0) return;
    std::error_code ec;
    fs::remove_all(tmp, ec);
  };
  // 1. Rank 0 prepares the temporary directory.
  detail::StepOutcome step = detail::run_step(c, s.rank == 0, tag + ".prepare", [&] { prepare_dir(root, tmp); });
  if (step.any_failed()) {
    ZS_THROW(CheckpointError, "save of step ", s.step, " failed: ", detail::first_error(c, step, tag + ".prep_error"),
             "; earlier checkpoints are untouched");
  }
  // 2. Every rank writes its file and a small record of it for the manifest.
  int64_t bytes = 0;
  step = detail::run_step(c, true, tag + ".files", [&] { bytes = write_rank_file(s, tmp); });
  if (step.any_failed()) {
    discard();
    const std::string what = detail::first_error(c, step, tag + ".error");
    ZS_THROW(CheckpointError, "save of step ", s.step, " failed on rank(s) ", step.failed_ranks(), ": ",
             step.error.empty() ? what : step.error,
             "; the partial save was discarded and earlier checkpoints are untouched");
  }
  // 3. Rank 0 completes it: manifest, rename, latest, retention.
  step = detail::run_step(c, s.rank == 0, tag + ".commit", [&] { commit(s, root, tmp, final_dir); });
  if (step.any_failed()) {
    discard();
    const std::string what = detail::first_error(c, step, tag + ".commit_error");
    ZS_THROW(CheckpointError, "save of step ", s.step, " failed while rank 0 completed it: ", what,
             "; earlier checkpoints are untouched");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ZS_LOG(kInfo) << "checkpoint " << final_dir << " durable (" << bytes / 1048576.0 << " MiB on this rank in "
                << secs << " s)";
  {
    std::lock_guard<std::mutex> lock(mu_);
    durable_step_ = s.step;
  }
  return final_dir;
}

detail::CheckpointWriter::CheckpointWriter(ShardingEngine& e, CheckpointOptions opts, std::string cfg,
                                           std::shared_ptr<IoEngine> file_io, std::shared_ptr<Communicator> world)
    : engine_(e), options_(std::move(opts)), config_text_(std::move(cfg)), io_(std::move(file_io)),
      comm_(std::move(world)) {}

int64_t detail::CheckpointWriter::durable_step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return durable_step_;
}

void detail::CheckpointWriter::prepare_dir(const std::string& root, const std::string& tmp) {
  std::error_code ec;
  fs::create_directories(root, ec);
  ZS_REQUIRE(!ec, CheckpointError, "cannot create checkpoint.dir '", root, "': ", ec.message());
  fs::remove_all(tmp, ec);  // a save of this step that died earlier
  ZS_REQUIRE(fs::create_directory(tmp, ec) && !ec, CheckpointError, "cannot create '", tmp, "': ",
             ec ? ec.message() : "it already exists");
}

int64_t detail::CheckpointWriter::write_rank_file(const Snapshot& s, const std::string& tmp) {
  std::error_code ec;
  ZS_REQUIRE(fs::is_directory(tmp, ec), CheckpointError, "'", tmp, "', which rank 0 just created, does not exist "
             "on rank ", s.rank, ": checkpoint.dir must be one directory every rank sees (a filesystem all nodes "
             "share, e.g. NFS or Lustre); node-local directories cannot hold a sharded checkpoint");
  RankFileWriter w(tmp + "/" + ckpt::rank_file_name(s.rank), s.rank, s.shard_rank, io_);
  for (const PendingSection& p : s.sections) {
    if (p.produce) {
      const at::Tensor t = p.produce();
      try {
        ZS_REQUIRE(t.numel() == p.shape.at(0), CheckpointError, "section '", p.name, "' came with ", t.numel(),
                   " elements, expected ", p.shape.at(0));
        w.add(p.name, p.dtype, p.shape, t.data_ptr(), static_cast<int64_t>(t.nbytes()));
      } catch (...) {
        if (p.written) p.written();  // an offloaded shard goes back to its store, unchanged
        throw;
      }
    } else if (p.tensor.defined()) {
      w.add(p.name, p.dtype, p.shape, p.tensor.data_ptr(), static_cast<int64_t>(p.tensor.nbytes()));
    } else {
      w.add(p.name, p.dtype, p.shape, p.bytes.data(), static_cast<int64_t>(p.bytes.size()));
    }
    if (p.written) p.written();
  }
  ckpt::RankFile rf;
  ckpt::set_record(&rf, w.finish(ckpt::rank_file_name(s.rank)));
  rf.set_holds_shards(s.holds_shards);
  write_file_atomic(*io_, tmp, "rank-" + std::to_string(s.rank) + ".meta", rf.SerializeAsString());
  return rf.bytes();
}

namespace {

// Each rank's record of its file, written next to it: missing or unreadable means that rank
// wrote where rank 0 cannot see (checkpoint.dir not shared), never an empty record.
void read_rank_records(ckpt::Manifest& m, const std::string& tmp, int world) {
  for (int r = 0; r < world; ++r) {
    const std::string meta = tmp + "/rank-" + std::to_string(r) + ".meta";
    std::ifstream in(meta, std::ios::binary);
    ZS_REQUIRE(in.good(), CheckpointError, "rank ", r, "'s record '", meta, "' is missing although rank ", r,
               " reported its file written: rank 0 does not see what rank ", r, " wrote, so checkpoint.dir is not "
               "one directory every rank shares (use a filesystem all nodes mount, e.g. NFS or Lustre)");
    std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ckpt::RankFile* rf = m.add_rank_files();
    ZS_REQUIRE(!data.empty() && rf->ParseFromString(data) && rf->rank() == r && !rf->file().empty(), CheckpointError,
               "rank ", r, "'s record '", meta, "' is ", data.empty() ? "empty" : "not a record of rank " + std::to_string(r),
               " (", data.size(), " bytes): the save cannot be completed");
    fs::remove(meta);
  }
}

// Puts the complete checkpoint `tmp` in place of `final_dir`, the same step saved before, so that
// a complete checkpoint of the step exists at every moment and `latest` never names a missing
// directory: one atomic exchange of the two directories (renameat2 RENAME_EXCHANGE; Linux 3.15,
// local filesystems), after which `tmp` holds the old one. Where the filesystem cannot exchange
// (NFS: EINVAL), `latest` first names the most recently saved other checkpoint (or goes, when
// there is none) while the old one moves aside and the new one in.
void replace_checkpoint(const std::string& root, const std::string& tmp, const std::string& final_dir, int64_t step) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return;
  }
  const int err = errno;
  ZS_REQUIRE(err == EINVAL || err == ENOSYS || err == ENOTSUP, CheckpointError, "cannot exchange '", tmp, "' with '",
             final_dir, "': ", std::strerror(err));
  std::string other;
  for (const auto& c : ckpt::list_checkpoints_by_save(root)) {
    if (c.path != final_dir) other = fs::path(c.path).filename().string();
  }
  std::error_code ec;
  if (other.empty()) {
    fs::remove(root + "/" + ckpt::kLatestName, ec);
  } else {
    write_file_atomic(*default_file_io(), root, ckpt::kLatestName, other + "\n");
  }
  const std::string old = root + "/.old-" + ckpt::step_dir_name(step);
  fs::remove_all(old, ec);
  fs::rename(final_dir, old, ec);
  ZS_REQUIRE(!ec, CheckpointError, "cannot move the earlier '", final_dir, "' aside: ", ec.message());
  fs::rename(tmp, final_dir, ec);
  if (ec) {
    std::error_code ignored;
    fs::rename(old, final_dir, ignored);  // put the earlier one back
    ZS_THROW(CheckpointError, "cannot rename '", tmp, "' to '", final_dir, "': ", ec.message(),
             "; the earlier checkpoint of this step is back in place");
  }
  fs::remove_all(old, ec);
}

}  // namespace

void detail::CheckpointWriter::commit(const Snapshot& s, const std::string& root, const std::string& tmp,
                                const std::string& final_dir) {
  ckpt::Manifest m = s.manifest;
  read_rank_records(m, tmp, s.world);
  m.set_created_unix_s(
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  const auto saved = ckpt::list_checkpoints_by_save(root);
  m.set_save_sequence(saved.empty() ? 1 : std::max<int64_t>(saved.back().sequence, 0) + 1);
  write_file_atomic(*io_, tmp, ckpt::kManifestName, ckpt::manifest_bytes(m));
  std::error_code ec;
  if (fs::exists(final_dir, ec)) {  // the same step saved again: replace it
    replace_checkpoint(root, tmp, final_dir, s.step);
  } else {
    fs::rename(tmp, final_dir, ec);
    ZS_REQUIRE(!ec, CheckpointError, "cannot rename '", tmp, "' to '", final_dir, "': ", ec.message());
  }
  fsync_dir(root);
  write_file_atomic(*io_, root, ckpt::kLatestName, ckpt::step_dir_name(s.step) + "\n");
  apply_retention(root, final_dir);
}

// Keeps the keep_last most recently saved checkpoints (not the highest steps: after resuming from
// an older step those belong to the abandoned run) and removes the debris of saves that died.
void detail::CheckpointWriter::apply_retention(const std::string& root, const std::string& final_dir) {
  std::error_code ec;
  const auto all = ckpt::list_checkpoints_by_save(root);
  for (size_t i = 0; i + static_cast<size_t>(options_.keep_last) < all.size(); ++i) {
    if (all[i].path != final_dir) fs::remove_all(all[i].path, ec);
  }
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-step-", 0) == 0 || name.rfind(".old-step-", 0) == 0) fs::remove_all(e.path(), ec);
  }
}

}  // namespace zeroshard
