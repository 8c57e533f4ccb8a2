// SPDX-License-Identifier: Apache-2.0
// Checkpointer load: the manifest, the structure check, then every rank reads exactly its part of
// each flat parameter and of its optimizer state under the current layout, from whichever saved
// shards overlap it (resharding on load), then buffers, RNG states and per-rank entries.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint_reader.h"
#include "sections.h"
#include "zeroshard/base/error.h"
#include "zeroshard/comm/collective_step.h"
#include "zeroshard/base/format.h"
#include "zeroshard/base/logging.h"
#include "zeroshard/io/rank_file.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zeroshard {
namespace {

std::vector<int64_t> shape_of(const google::protobuf::RepeatedField<int64_t>& s) { return {s.begin(), s.end()}; }

// A flat parameter's name is its unit's, with the storage of frozen ones appended: "layer.0"
// (trainable), "layer.0 (frozen)" (fp32), "layer.0 (nf4)" (a codec's). {unit, storage}.
std::pair<std::string, std::string> split_flat_name(const std::string& name) {
  const size_t open = name.rfind(" (");
  if (open == std::string::npos || name.back() != ')') return {name, ""};
  return {name.substr(0, open), name.substr(open + 2, name.size() - open - 3)};
}

constexpr const char* kSameStorage =
    ": resume with the storage the run was saved with (precision.frozen_linear; finetune_llama --nf4)";

// A unit whose frozen weights the checkpoint stores one way (fp32 or a codec's) and the model
// another moves every later parameter: name that cause instead of the first parameter it moved. A
// unit may hold frozen weights of several storages (NF4 projections beside fp32 norms).
void check_frozen_storage(const ckpt::Manifest& m, const std::vector<FlatShard*>& flats, const std::string& dir) {
  using Storages = std::map<std::string, std::set<std::string>>;  // unit -> its frozen storages
  Storages saved, mine;
  for (const auto& fe : m.flats()) {
    const auto [unit, storage] = split_flat_name(fe.unit());
    if (!storage.empty()) saved[unit].insert(storage == "frozen" ? "fp32" : storage);
  }
  for (const FlatShard* f : flats) {
    const auto [unit, storage] = split_flat_name(f->name());
    if (!storage.empty()) mine[unit].insert(storage == "frozen" ? "fp32" : storage);
  }
  auto list = [](const std::set<std::string>& storages) {
    std::string out;
    for (const std::string& st : storages) out += (out.empty() ? "" : " and ") + st;
    return out;
  };
  for (const auto& [unit, theirs] : saved) {
    const auto it = mine.find(unit);
    if (it == mine.end() || it->second == theirs) continue;
    for (const std::string& st : theirs) {
      ZS_REQUIRE(it->second.count(st) != 0, CheckpointError, "checkpoint '", dir, "' stores frozen weights of unit '",
                 unit, "' as ", st, ", the model stores that unit's as ", list(it->second), kSameStorage);
    }
    for (const std::string& st : it->second) {
      ZS_REQUIRE(theirs.count(st) != 0, CheckpointError, "the model stores frozen weights of unit '", unit, "' as ",
                 st, ", checkpoint '", dir, "' stores that unit's as ", list(theirs), kSameStorage);
    }
  }
}

// The saved shards of a checkpoint: a reader per shard rank, opened on first use; elements
// [lo, hi) of one saved flat section gathered from the shards that hold them.
class SavedShards {
 public:
  SavedShards(const ckpt::Manifest& m, const std::string& dir, std::shared_ptr<IoEngine> io)
      : m_(m), dir_(dir), io_(std::move(io)) {
    for (const auto& rf : m.rank_files()) {
      if (rf.holds_shards()) files_[rf.shard_rank()] = &rf;
    }
    ZS_REQUIRE(static_cast<int>(files_.size()) == m.shard_group_size(), CheckpointError, "checkpoint '", dir,
               "' lists ", files_.size(), " shard files, its shard group had ", m.shard_group_size(), " ranks");
  }

  // The checksums of the saved sections that hold elements [lo, hi) of flat i's `what`, streamed
  // (nothing kept): a damaged file fails the load, not a later step.
  void verify_range(size_t i, const std::string& what, int64_t lo, int64_t hi, int64_t padded_now) {
    const auto& fe = m_.flats(static_cast<int>(i));
    const int64_t S = fe.shard_numel();
    if (fe.padded_numel() == padded_now && hi - lo == S && lo % S == 0) {
      auto [r, sec] = section(i, what, static_cast<int>(lo / S));
      r->verify_section(*sec);
      return;
    }
    const int64_t end = std::min(hi, fe.numel());
    for (int64_t e = lo; e < end; e = std::min<int64_t>(end, (e / S + 1) * S)) {
      auto [r, sec] = section(i, what, static_cast<int>(e / S));
      r->verify_section(*sec);
    }
  }

  // Elements [lo, hi) of flat i's saved section `what` ("param", "opt/exp_avg", ...) in the
  // layout of a flat of `padded_now` elements. Same layout and a whole saved shard: read straight
  // into the result; otherwise pieced together, with zeros beyond the unpadded elements.
  at::Tensor read_range(size_t i, const std::string& what, int64_t lo, int64_t hi, int64_t padded_now) {
    const auto& fe = m_.flats(static_cast<int>(i));
    const int64_t S = fe.shard_numel();
    if (fe.padded_numel() == padded_now && hi - lo == S && lo % S == 0) {
      at::Tensor out = at::empty({S}, at::kFloat);
      auto [r, sec] = section(i, what, static_cast<int>(lo / S));
      r->read(*sec, out.data_ptr());
      return out;
    }
    at::Tensor out = at::zeros({hi - lo}, at::kFloat);
    const int64_t end = std::min(hi, fe.numel());  // beyond numel: padding, zeros
    at::Tensor whole = at::empty({S}, at::kFloat);
    for (int64_t e = lo; e < end;) {
      const int j = static_cast<int>(e / S);
      const int64_t src_hi = std::min<int64_t>(end, (j + 1) * S);
      auto [r, sec] = section(i, what, j);
      r->read(*sec, whole.data_ptr());
      out.narrow(0, e - lo, src_hi - e).copy_(whole.narrow(0, e - j * S, src_hi - e));
      e = src_hi;
    }
    return out;
  }

 private:
  std::pair<RankFileReader*, const RankFileSection*> section(size_t i, const std::string& what, int shard_rank) {
    RankFileReader& r = reader(shard_rank);
    const RankFileSection& sec = r.section(detail::flat_key(i) + "/" + what);
    const int64_t want = m_.flats(static_cast<int>(i)).shard_numel() * 4;
    ZS_REQUIRE(sec.bytes == want, CheckpointError, "'", r.path(), "' section '", sec.name, "' has ", sec.bytes,
               " bytes, expected ", want);
    return {&r, &sec};
  }

  RankFileReader& reader(int shard_rank) {
    auto it = readers_.find(shard_rank);
    if (it != readers_.end()) return *it->second;
    return *readers_.emplace(shard_rank, ckpt::open_rank_file(dir_, *files_.at(shard_rank), io_)).first->second;
  }

  // Copies: a load's optimizer state is read lazily, at the next step (load_flats).
  const ckpt::Manifest m_;
  const std::string dir_;
  std::shared_ptr<IoEngine> io_;
  std::map<int, const ckpt::RankFile*> files_;
  std::map<int, std::unique_ptr<RankFileReader>> readers_;
};

}  // namespace

detail::CheckpointReader::CheckpointReader(ShardingEngine& e, std::shared_ptr<IoEngine> file_io,
                                           std::shared_ptr<Communicator> world)
    : engine_(e), io_(std::move(file_io)), comm_(std::move(world)) {}

void detail::CheckpointReader::apply(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir,
                               TrainingState& out) {
  at::NoGradGuard no_grad;
  const std::vector<FlatShard*> flats = engine_.flat_shards();
  check_structure(m, flats, dir);
  check_optimizer(opt, m, dir);
  check_param_groups(m, dir);
  out.resharded = m.world_size() != comm_->size() || m.shard_group_size() != engine_.shard_group_size();
  load_flats(opt, m, dir, flats);
  load_buffers(m, dir);
  load_rank_state(m, dir, out);
  out.step = m.step();
  for (const auto& u : m.user()) out.global[u.key()] = u.value();
  if (m.has_grad_scaler()) {
    GradScalerState g;
    g.scale = m.grad_scaler().scale();
    g.growth_tracker = m.grad_scaler().growth_tracker();
    g.hysteresis_left = m.grad_scaler().hysteresis_left();
    g.steps = m.grad_scaler().steps();
    g.skipped = m.grad_scaler().skipped();
    out.grad_scaler = g;
  }
}

void detail::CheckpointReader::check_structure(const ckpt::Manifest& m, const std::vector<FlatShard*>& flats,
                                         const std::string& dir) const {
  using detail::shape_str;
  check_frozen_storage(m, flats, dir);
  // Compare parameter by parameter first, so the error names the first parameter that differs.
  std::vector<const ckpt::ParamEntry*> saved;
  for (const auto& fe : m.flats()) {
    for (const auto& p : fe.params()) saved.push_back(&p);
  }
  std::vector<const ParamSlot*> mine;
  for (FlatShard* f : flats) {
    for (const ParamSlot& s : f->slots()) mine.push_back(&s);
  }
  for (size_t i = 0; i < std::max(saved.size(), mine.size()); ++i) {
    ZS_REQUIRE(i < saved.size(), CheckpointError, "checkpoint '", dir, "' is of another model: it has no parameter '",
               mine[i]->name, "' ", shape_str(mine[i]->shape), " (it has ", saved.size(), " parameters, the model ",
               mine.size(), ")");
    const std::vector<int64_t> saved_shape = shape_of(saved[i]->shape());
    ZS_REQUIRE(i < mine.size(), CheckpointError, "checkpoint '", dir, "' is of another model: its parameter '",
               saved[i]->name(), "' ", shape_str(saved_shape), " is not in the model (", saved.size(),
               " saved parameters, the model has ", mine.size(), ")");
    ZS_REQUIRE(saved[i]->name() == mine[i]->name && saved_shape == mine[i]->shape, CheckpointError, "checkpoint '",
               dir, "' is of another model: parameter ", i, " is '", saved[i]->name(), "' ", shape_str(saved_shape),
               " in the checkpoint and '", mine[i]->name, "' ", shape_str(mine[i]->shape), " in the model");
  }
  ZS_REQUIRE(static_cast<size_t>(m.flats_size()) == flats.size(), CheckpointError, "checkpoint '", dir, "' groups ",
             "the parameters into ", m.flats_size(), " units, the model into ", flats.size(),
             " (the same parameters, wrapped differently); wrap the model as when it was saved");
  for (size_t i = 0; i < flats.size(); ++i) {
    const auto& fe = m.flats(static_cast<int>(i));
    ZS_REQUIRE(fe.numel() == flats[i]->numel() && fe.trainable() == flats[i]->trainable(), CheckpointError,
               "checkpoint '", dir, "': unit '", fe.unit(), "' has ", fe.numel(), fe.trainable() ? " trainable" : " frozen",
               " elements, the model's '", flats[i]->name(), "' ", flats[i]->numel(),
               flats[i]->trainable() ? " trainable" : " frozen");
  }
}

void detail::CheckpointReader::check_optimizer(const ShardedOptimizer& opt, const ckpt::Manifest& m,
                                         const std::string& dir) const {
  bool any_state = false;
  for (const auto& fe : m.flats()) any_state = any_state || fe.has_optimizer_state();
  if (!any_state) return;
  const std::vector<std::string> names = opt.state_names();
  const std::vector<std::string> saved(m.optimizer_state_names().begin(), m.optimizer_state_names().end());
  ZS_REQUIRE(saved == names, CheckpointError, "checkpoint '", dir, "' holds optimizer state for ", m.optimizer(), " (",
             saved.size(), " tensors per element), the optimizer now is ", opt.describe(), " (", names.size(),
             "); load with the same optimizer type");
}

// The parameter groups the run trains with must be those the checkpoint was trained with: a
// resumed run that decays other parameters is not the run that was saved. Checkpoints without
// groups (saved before set_param_groups existed, or by a run that never set them) are not checked.
void detail::CheckpointReader::check_param_groups(const ckpt::Manifest& m, const std::string& dir) const {
  const std::vector<ParamGroupAssignment>& groups = engine_.param_groups();
  if (groups.empty()) return;
  size_t k = 0;
  for (const auto& fe : m.flats()) {
    if (!fe.trainable()) continue;
    for (const auto& p : fe.params()) {
      if (k >= groups.size()) return;  // check_structure already compared the parameters
      const ParamGroupAssignment& g = groups[k++];
      if (!p.has_weight_decay()) continue;
      ZS_REQUIRE(p.weight_decay() == g.weight_decay && p.lr_scale() == g.lr_scale, CheckpointError, "checkpoint '",
                 dir, "' trained parameter '", p.name(), "' with weight_decay ", format_double(p.weight_decay()),
                 ", lr_scale ", format_double(p.lr_scale()), "; this run gives it weight_decay ",
                 format_double(g.weight_decay), ", lr_scale ", format_double(g.lr_scale), " (", g.why,
                 "); resume with the optimizer settings it was saved with (optimizer.weight_decay, "
                 "optimizer.no_decay_1d_and_embeddings, optimizer.param_groups)");
    }
  }
}

// Parameters are read into the shards now, one at a time. The optimizer state is imported lazily:
// the optimizer reads each position when it applies it at the next step, so a load never holds
// more than one position's state (offloaded to NVMe, the state goes from the file to the drive);
// its checksums are verified here, streamed, so a damaged file fails the load on every rank.
void detail::CheckpointReader::load_flats(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir,
                                    const std::vector<FlatShard*>& flats) {
  auto saved = std::make_shared<SavedShards>(m, dir, io_);
  const std::vector<std::string> names = opt.state_names();
  std::vector<ShardOptimizerState> opt_state;
  for (size_t i = 0; i < flats.size(); ++i) {
    FlatShard& f = *flats[i];
    const auto& fe = m.flats(static_cast<int>(i));
    const int64_t lo = f.shard_begin();
    const int64_t hi = lo + f.shard_numel();
    const int64_t padded = f.padded_numel();
    f.shard().copy_(saved->read_range(i, "param", lo, hi, padded));
    f.release_shard();  // offloaded: written back to its store now, one shard resident at a time
    if (!f.trainable()) continue;
    ShardOptimizerState st;
    st.updates = fe.optimizer_updates();
    if (fe.has_optimizer_state() && !names.empty()) {
      for (const auto& n : names) saved->verify_range(i, "opt/" + n, lo, hi, padded);
      st.read_numel = hi - lo;
      st.read = [saved, names, i, lo, hi, padded] {
        std::vector<at::Tensor> out;
        for (const auto& n : names) out.push_back(saved->read_range(i, "opt/" + n, lo, hi, padded));
        return out;
      };
    }
    opt_state.push_back(std::move(st));
  }
  // Gathered copies hold the old values: every unit gathers again at its next forward.
  for (FlatShard* f : flats) f->free_gathered();
  opt.import_state(std::move(opt_state), m.optimizer_steps());
}

// Buffers, from rank 0's file.
void detail::CheckpointReader::load_buffers(const ckpt::Manifest& m, const std::string& dir) {
  if (m.buffers_size() == 0) return;
  const ckpt::RankFile* rf0 = nullptr;
  for (const auto& rf : m.rank_files()) {
    if (rf.rank() == 0) rf0 = &rf;
  }
  ZS_REQUIRE(rf0 != nullptr, CheckpointError, "checkpoint '", dir, "' has no rank 0 file");
  std::unique_ptr<RankFileReader> r = ckpt::open_rank_file(dir, *rf0, io_);
  for (auto& b : engine_.model().named_buffers()) {
    const RankFileSection& sec = r->section("buffer/" + b.key());
    ZS_REQUIRE(sec.shape == b.value().sizes().vec(), CheckpointError, "checkpoint '", dir, "': buffer '", b.key(),
               "' is ", detail::shape_str(sec.shape), ", the model's is ", detail::shape_str(b.value().sizes().vec()));
    at::Tensor host = at::empty(b.value().sizes(), b.value().options().device(at::kCPU));
    ZS_REQUIRE(static_cast<int64_t>(host.nbytes()) == sec.bytes, CheckpointError, "checkpoint '", dir, "': buffer '",
               b.key(), "' has ", sec.bytes, " bytes, expected ", host.nbytes(), " (dtype ", sec.dtype, " vs ",
               c10::toString(b.value().scalar_type()), ")");
    r->read(sec, host.data_ptr());
    b.value().copy_(host);
  }
}

// This rank's own RNG state and entries, when the ranks are the same ones that saved.
void detail::CheckpointReader::load_rank_state(const ckpt::Manifest& m, const std::string& dir, TrainingState& out) {
  const ckpt::RankFile* own_file = nullptr;
  for (const auto& rf : m.rank_files()) {
    if (rf.rank() == comm_->rank()) own_file = &rf;
  }
  if (m.world_size() != comm_->size() || own_file == nullptr) {
    ZS_LOG(kInfo) << "checkpoint saved at " << m.world_size() << " ranks, loading at " << comm_->size()
                  << ": RNG states and per-rank entries are not restored";
    return;
  }
  std::unique_ptr<RankFileReader> r = ckpt::open_rank_file(dir, *own_file, io_);
  if (r->has("rng/cpu")) {
    const std::string bytes = r->read_bytes("rng/cpu");
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor state = gen.get_state();
    ZS_REQUIRE(static_cast<size_t>(state.nbytes()) == bytes.size(), CheckpointError, "checkpoint '", dir,
               "': the CPU RNG state has ", bytes.size(), " bytes, this LibTorch's has ", state.nbytes());
    std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
    gen.set_state(state);
    out.rng_restored = true;
  }
  // The CUDA generator of this rank's device, saved by a run on CUDA.
  const c10::Device device = engine_.session().device();
  if (r->has("rng/cuda") && device.is_cuda()) {
    const std::string bytes = r->read_bytes("rng/cuda");
    at::Generator gen = at::globalContext().defaultGenerator(device);
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor state = gen.get_state();
    ZS_REQUIRE(static_cast<size_t>(state.nbytes()) == bytes.size(), CheckpointError, "checkpoint '", dir,
               "': the CUDA RNG state of rank ", comm_->rank(), " has ", bytes.size(), " bytes, this LibTorch's ",
               device.str(), " generator has ", state.nbytes());
    std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
    gen.set_state(state);
  } else if (r->has("rng/cuda")) {
    ZS_LOG(kInfo) << "checkpoint '" << dir << "' holds a CUDA RNG state; this run is on " << device.str()
                  << ", so only the CPU RNG is restored";
  } else if (device.is_cuda()) {
    ZS_LOG(kWarn) << "checkpoint '" << dir << "' has no CUDA RNG state (saved by a run on the CPU or by an "
                  << "older zeroshard): " << device.str() << "'s generator is not restored, so random draws "
                  << "on the GPU (dropout) differ from an uninterrupted run";
  }
  for (const RankFileSection& sec : r->sections()) {
    if (sec.name.rfind("user/", 0) == 0) out.per_rank[sec.name.substr(5)] = r->read_bytes(sec.name);
  }
}

}  // namespace zeroshard
