// Checkpointer: snapshot -> rank files -> manifest -> rename (save), and manifest -> structure
// check -> per-rank range reads with resharding (load). See checkpoint.h.

#include "zeroshard/sharding/checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <google/protobuf/text_format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "zeroshard/core/checkpoint_format.h"
#include "zeroshard/core/error.h"
#include "zeroshard/core/logging.h"
#include "zeroshard/sharding/flat_param.h"

namespace zeroshard {
namespace fs = std::filesystem;

CheckpointOptions CheckpointOptions::from_config(const config::CheckpointConfig& cfg) {
  CheckpointOptions o;
  o.dir = cfg.dir();
  o.keep_last = cfg.keep_last();
  o.async_save = cfg.async_save();
  return o;
}

namespace {

std::string flat_key(size_t i) { return "f" + std::to_string(i); }

std::string shape_str(const google::protobuf::RepeatedField<int64_t>& s) {
  std::string out = "[";
  for (int i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s.Get(i));
  return out + "]";
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// One section to write: metadata and a host tensor (or raw bytes).
struct PendingSection {
  std::string name, dtype;
  std::vector<int64_t> shape;
  at::Tensor tensor;  // CPU, contiguous; or undefined with `bytes` set
  std::string bytes;
};

// Everything a save writes, captured on the training thread.
struct Snapshot {
  int64_t step = 0;
  int rank = 0, world = 1, shard_rank = 0;
  bool holds_shards = true;
  std::vector<PendingSection> sections;
  ckpt::Manifest manifest;  // rank 0: all but rank_files
};

// The failure flags of all ranks (collective): entry r is 1 if rank r failed.
std::vector<int64_t> exchange_failures(Communicator& comm, bool failed, const std::string& tag) {
  at::Tensor t = at::zeros({comm.size()}, at::kLong);
  t[comm.rank()] = failed ? 1 : 0;
  comm.all_reduce(t, ReduceOp::kSum, tag)->wait();
  std::vector<int64_t> out(static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) out[static_cast<size_t>(r)] = t[r].item<int64_t>();
  return out;
}

std::string failed_ranks(const std::vector<int64_t>& f) {
  std::string s;
  for (size_t r = 0; r < f.size(); ++r) {
    if (f[r]) s += (s.empty() ? "" : ", ") + std::to_string(r);
  }
  return s;
}

// The error text of the lowest failed rank, on every rank (collective; call only when one failed).
std::string first_error(Communicator& comm, const std::vector<int64_t>& failures, const std::string& mine,
                        const std::string& tag) {
  int root = 0;
  while (root < static_cast<int>(failures.size()) && failures[static_cast<size_t>(root)] == 0) ++root;
  at::Tensor len = at::zeros({1}, at::kLong);
  if (comm.rank() == root) len[0] = static_cast<int64_t>(mine.size());
  comm.broadcast(len, root, tag + ".len")->wait();
  at::Tensor text = at::zeros({std::max<int64_t>(1, len[0].item<int64_t>())}, at::kByte);
  if (comm.rank() == root) std::memcpy(text.data_ptr(), mine.data(), mine.size());
  comm.broadcast(text, root, tag + ".text")->wait();
  std::string out(static_cast<const char*>(text.data_ptr()), static_cast<size_t>(len[0].item<int64_t>()));
  return failures.size() > 1 && comm.rank() != root ? "rank " + std::to_string(root) + ": " + out : out;
}

bool any(const std::vector<int64_t>& f) {
  for (int64_t v : f) {
    if (v) return true;
  }
  return false;
}

}  // namespace

struct Checkpointer::Impl {
  Impl(ShardingEngine& e, CheckpointOptions opts, std::string cfg)
      : engine(e), o(std::move(opts)), config_text(std::move(cfg)) {}
  ShardingEngine& engine;
  CheckpointOptions o;
  std::string config_text;
  std::shared_ptr<Communicator> comm;     // the engine's world (sync saves, loads)
  std::shared_ptr<Communicator> bg_comm;  // the background writer's own
  std::thread worker;
  std::exception_ptr worker_error;
  int64_t durable_step = -1;
  std::mutex mu;

  Snapshot snapshot(ShardedOptimizer& opt, const TrainingState& st);
  std::string write(const Snapshot& s, Communicator& c);  // collective over c
  void join();
  void apply(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir, TrainingState& out);
  void check_structure(const ckpt::Manifest& m, const std::vector<FlatParam*>& flats, const std::string& dir) const;
};

Checkpointer::Checkpointer(ShardingEngine& engine, CheckpointOptions options, std::string config_text)
    : impl_(std::make_unique<Impl>(engine, std::move(options), std::move(config_text))) {
  ZS_REQUIRE(impl_->o.keep_last >= 1, ConfigError, "checkpoint.keep_last = ", impl_->o.keep_last, " must be >= 1");
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

void Checkpointer::wait() { impl_->join(); }

int64_t Checkpointer::last_durable_step() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->durable_step;
}

// ---- save ----

// Sync saves write straight from the live tensors (training waits); async saves copy them first.
Snapshot Checkpointer::Impl::snapshot(ShardedOptimizer& opt, const TrainingState& st) {
  at::NoGradGuard no_grad;
  const bool copy = o.async_save;
  auto host = [copy](const at::Tensor& t) {
    at::Tensor h = t.detach().to(at::kCPU).contiguous();
    return copy && h.data_ptr() == t.data_ptr() ? h.clone() : h;
  };
  Snapshot s;
  s.step = st.step;
  s.rank = comm->rank();
  s.world = comm->size();
  s.holds_shards = engine.replica_rank() == 0;
  const std::vector<FlatParam*> flats = engine.flat_params();
  s.shard_rank = flats.empty() ? 0 : flats.front()->shard_group().rank();
  const std::vector<std::string> state_names = opt.state_names();
  std::vector<ShardOptimizerState> opt_state;
  if (s.holds_shards) opt_state = opt.export_state();
  size_t trainable_index = 0;
  for (size_t i = 0; i < flats.size(); ++i) {
    FlatParam& f = *flats[i];
    if (s.holds_shards) {
      s.sections.push_back({flat_key(i) + "/param", "float32", {f.shard_numel()},
                            host(f.shard()), {}});
    }
    if (!f.trainable()) continue;
    const size_t pos = trainable_index++;
    if (s.holds_shards && pos < opt_state.size()) {
      const ShardOptimizerState& os = opt_state[pos];
      for (size_t k = 0; k < os.tensors.size(); ++k) {
        s.sections.push_back({flat_key(i) + "/opt/" + state_names.at(k), "float32", {f.shard_numel()},
                              host(os.tensors[k].to(at::kFloat)), {}});
      }
    }
  }
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    at::Tensor rng = gen.get_state();
    s.sections.push_back({"rng/cpu", "uint8", {rng.numel()}, rng.contiguous(), {}});
  }
  for (const auto& [k, v] : st.per_rank) s.sections.push_back({"user/" + k, "bytes", {}, at::Tensor(), v});
  if (s.rank == 0) {
    for (const auto& b : engine.model().named_buffers()) {
      s.sections.push_back({"buffer/" + b.key(), c10::toString(b.value().scalar_type()), b.value().sizes().vec(),
                            host(b.value()), {}});
    }
    ckpt::Manifest& m = s.manifest;
    m.set_format_version(ckpt::kFormatVersion);
    m.set_zeroshard_version(ZS_VERSION);
    m.set_step(st.step);
    m.set_world_size(s.world);
    m.set_strategy(config::ShardingConfig::Strategy_Name(engine.options().strategy));
    m.set_shard_group_size(engine.shard_group_size());
    m.set_config_text(config_text);
    m.set_optimizer(opt.describe());
    for (const auto& n : state_names) m.add_optimizer_state_names(n);
    m.set_optimizer_steps(opt.steps());
    trainable_index = 0;
    for (size_t i = 0; i < flats.size(); ++i) {
      FlatParam& f = *flats[i];
      ckpt::FlatEntry* fe = m.add_flats();
      fe->set_unit(f.name());
      fe->set_name(flat_key(i));
      fe->set_trainable(f.trainable());
      fe->set_numel(f.numel());
      fe->set_padded_numel(f.padded_numel());
      fe->set_shard_numel(f.shard_numel());
      if (f.trainable()) {
        const size_t pos = trainable_index++;
        const bool has = pos < opt_state.size() && !opt_state[pos].tensors.empty();
        fe->set_optimizer_updates(pos < opt_state.size() ? opt_state[pos].updates : 0);
        fe->set_has_optimizer_state(has);
      }
      for (const ParamSlot& ps : f.slots()) {
        ckpt::ParamEntry* pe = fe->add_params();
        pe->set_name(ps.name);
        for (const auto& a : ps.aliases) pe->add_aliases(a);
        for (int64_t d : ps.shape) pe->add_shape(d);
        pe->set_offset(ps.offset);
        pe->set_numel(ps.numel);
      }
    }
    for (const auto& b : engine.model().named_buffers()) {
      ckpt::BufferEntry* be = m.add_buffers();
      be->set_name(b.key());
      be->set_dtype(c10::toString(b.value().scalar_type()));
      for (int64_t d : b.value().sizes()) be->add_shape(d);
    }
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
  return s;
}

std::string Checkpointer::Impl::write(const Snapshot& s, Communicator& c) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string root = o.dir;
  const std::string final_dir = root + "/" + ckpt::step_dir_name(s.step);
  const std::string tmp = root + "/.tmp-" + ckpt::step_dir_name(s.step);
  const std::string tag = "zs.ckpt." + std::to_string(s.step);
  std::string my_error;
  // 1. Rank 0 prepares the temporary directory.
  if (s.rank == 0) {
    try {
      std::error_code ec;
      fs::create_directories(root, ec);
      ZS_REQUIRE(!ec, CheckpointError, "cannot create checkpoint.dir '", root, "': ", ec.message());
      fs::remove_all(tmp, ec);  // a save of this step that died earlier
      ZS_REQUIRE(fs::create_directory(tmp, ec) && !ec, CheckpointError, "cannot create '", tmp, "': ",
                 ec ? ec.message() : "it already exists");
    } catch (const Error& e) {
      my_error = e.message();
    } catch (const std::exception& e) {
      my_error = e.what();
    }
  }
  auto failures = exchange_failures(c, !my_error.empty(), tag + ".prepare");
  if (any(failures)) {
    ZS_THROW(CheckpointError, "save of step ", s.step, " failed: ", first_error(c, failures, my_error, tag + ".prep_error"),
             "; earlier checkpoints are untouched");
  }
  // 2. Every rank writes its file and a small record of it for the manifest.
  int64_t bytes = 0;
  try {
    ckpt::RankFileWriter w(tmp + "/" + ckpt::rank_file_name(s.rank), s.rank, s.shard_rank);
    for (const PendingSection& p : s.sections) {
      if (p.tensor.defined()) {
        w.add(p.name, p.dtype, p.shape, p.tensor.data_ptr(), static_cast<int64_t>(p.tensor.nbytes()));
      } else {
        w.add(p.name, p.dtype, p.shape, p.bytes.data(), static_cast<int64_t>(p.bytes.size()));
      }
    }
    ckpt::RankFile rf = w.finish(ckpt::rank_file_name(s.rank));
    rf.set_holds_shards(s.holds_shards);
    bytes = rf.bytes();
    ckpt::write_file_atomic(tmp, "rank-" + std::to_string(s.rank) + ".meta", rf.SerializeAsString());
  } catch (const Error& e) {
    my_error = e.message();
  } catch (const std::exception& e) {
    my_error = e.what();
  }
  failures = exchange_failures(c, !my_error.empty(), tag + ".files");
  if (any(failures)) {
    if (s.rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    const std::string what = first_error(c, failures, my_error, tag + ".error");
    ZS_THROW(CheckpointError, "save of step ", s.step, " failed on rank(s) ", failed_ranks(failures), ": ",
             my_error.empty() ? what : my_error,
             "; the partial save was discarded and earlier checkpoints are untouched");
  }
  // 3. Rank 0 completes it: manifest, rename, latest, retention.
  if (s.rank == 0) {
    try {
      ckpt::Manifest m = s.manifest;
      for (int r = 0; r < s.world; ++r) {
        const std::string meta = tmp + "/rank-" + std::to_string(r) + ".meta";
        std::ifstream in(meta, std::ios::binary);
        std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        ZS_REQUIRE(m.add_rank_files()->ParseFromString(data), CheckpointError, "cannot read '", meta, "'");
        ::unlink(meta.c_str());
      }
      m.set_created_unix_s(std::chrono::duration_cast<std::chrono::seconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count());
      ckpt::write_file_atomic(tmp, ckpt::kManifestName, m.SerializeAsString());
      std::error_code ec;
      if (fs::exists(final_dir, ec)) {  // the same step saved again: replace it
        const std::string old = root + "/.old-" + ckpt::step_dir_name(s.step);
        fs::remove_all(old, ec);
        fs::rename(final_dir, old, ec);
        ZS_REQUIRE(!ec, CheckpointError, "cannot move the earlier '", final_dir, "' aside: ", ec.message());
        fs::rename(tmp, final_dir, ec);
        std::error_code ignored;
        fs::remove_all(old, ignored);
      } else {
        fs::rename(tmp, final_dir, ec);
      }
      ZS_REQUIRE(!ec, CheckpointError, "cannot rename '", tmp, "' to '", final_dir, "': ", ec.message());
      ckpt::fsync_dir(root);
      ckpt::write_file_atomic(root, ckpt::kLatestName, ckpt::step_dir_name(s.step) + "\n");
      // Retention, and debris of saves that died.
      auto all = ckpt::list_checkpoints(root);
      for (size_t i = 0; i + static_cast<size_t>(o.keep_last) < all.size(); ++i) {
        if (all[i].second != final_dir) fs::remove_all(all[i].second, ec);
      }
      for (const auto& e : fs::directory_iterator(root, ec)) {
        const std::string name = e.path().filename().string();
        if (name.rfind(".tmp-step-", 0) == 0) fs::remove_all(e.path(), ec);
      }
    } catch (const Error& e) {
      my_error = e.message();
    } catch (const std::exception& e) {
      my_error = e.what();
    }
  }
  failures = exchange_failures(c, !my_error.empty(), tag + ".commit");
  if (any(failures)) {
    if (s.rank == 0) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    const std::string what = first_error(c, failures, my_error, tag + ".commit_error");
    ZS_THROW(CheckpointError, "save of step ", s.step, " failed while rank 0 completed it: ", what,
             "; earlier checkpoints are untouched");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ZS_LOG(kInfo) << "checkpoint " << final_dir << " durable (" << bytes / 1048576.0 << " MiB on this rank in "
                << secs << " s)";
  {
    std::lock_guard<std::mutex> lock(mu);
    durable_step = s.step;
  }
  return final_dir;
}

std::string Checkpointer::save(ShardedOptimizer& optimizer, const TrainingState& state) {
  Impl& im = *impl_;
  ZS_REQUIRE(!im.o.dir.empty(), ConfigError, "checkpoint.dir is empty: set it to save checkpoints");
  im.join();  // one save at a time; a failed async save reports here
  for (FlatParam* f : im.engine.flat_params()) {
    ZS_REQUIRE(!f->has_grad_buffer() && !f->reduce_pending(), UsageError, "checkpoint save with gradients of unit '",
               f->name(), "' still pending: save between optimizer steps");
  }
  auto snap = std::make_shared<Snapshot>(im.snapshot(optimizer, state));
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

// ---- load ----

void Checkpointer::Impl::check_structure(const ckpt::Manifest& m, const std::vector<FlatParam*>& flats,
                                         const std::string& dir) const {
  // Compare parameter by parameter first, so the error names the first parameter that differs.
  std::vector<const ckpt::ParamEntry*> saved;
  for (const auto& fe : m.flats()) {
    for (const auto& p : fe.params()) saved.push_back(&p);
  }
  std::vector<const ParamSlot*> mine;
  for (FlatParam* f : flats) {
    for (const ParamSlot& s : f->slots()) mine.push_back(&s);
  }
  for (size_t i = 0; i < std::max(saved.size(), mine.size()); ++i) {
    ZS_REQUIRE(i < saved.size(), CheckpointError, "checkpoint '", dir, "' is of another model: it has no parameter '",
               mine[i]->name, "' ", shape_str(mine[i]->shape), " (it has ", saved.size(), " parameters, the model ",
               mine.size(), ")");
    ZS_REQUIRE(i < mine.size(), CheckpointError, "checkpoint '", dir, "' is of another model: its parameter '",
               saved[i]->name(), "' ", shape_str(saved[i]->shape()), " is not in the model (", saved.size(),
               " saved parameters, the model has ", mine.size(), ")");
    std::vector<int64_t> saved_shape(saved[i]->shape().begin(), saved[i]->shape().end());
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

TrainingState Checkpointer::load(ShardedOptimizer& optimizer, const std::string& path) {
  Impl& im = *impl_;
  im.join();
  const std::string where = path.empty() ? im.o.dir : path;
  ZS_REQUIRE(!where.empty(), ConfigError, "nothing to load: no path given and checkpoint.dir is empty");
  for (FlatParam* f : im.engine.flat_params()) {
    ZS_REQUIRE(!f->has_grad_buffer() && !f->reduce_pending(), UsageError, "checkpoint load with gradients of unit '",
               f->name(), "' pending: load between optimizer steps");
  }
  TrainingState out;
  std::string my_error;
  try {
    out.path = ckpt::resolve_checkpoint(where);
    const ckpt::Manifest m = ckpt::read_manifest(out.path);
    im.apply(optimizer, m, out.path, out);
  } catch (const Error& e) {
    my_error = e.message();
  } catch (const std::exception& e) {
    my_error = e.what();
  }
  const auto failures = exchange_failures(*im.comm, !my_error.empty(), "zs.ckpt.load");
  if (any(failures)) {
    const std::string what = first_error(*im.comm, failures, my_error, "zs.ckpt.load_error");
    ZS_THROW(CheckpointError, "loading checkpoint '", where, "' failed on rank(s) ", failed_ranks(failures), ": ",
             my_error.empty() ? what : my_error);
  }
  ZS_LOG(kInfo) << "loaded checkpoint " << out.path << " (step " << out.step << (out.resharded ? ", resharded" : "")
                << ")";
  return out;
}

void Checkpointer::Impl::apply(ShardedOptimizer& opt, const ckpt::Manifest& m, const std::string& dir, TrainingState& out) {
  at::NoGradGuard no_grad;
  const std::vector<FlatParam*> flats = engine.flat_params();
  check_structure(m, flats, dir);
  const std::vector<std::string> names = opt.state_names();
  bool any_state = false;
  for (const auto& fe : m.flats()) any_state = any_state || fe.has_optimizer_state();
  if (any_state) {
    std::vector<std::string> saved(m.optimizer_state_names().begin(), m.optimizer_state_names().end());
    ZS_REQUIRE(saved == names, CheckpointError, "checkpoint '", dir, "' holds optimizer state for ", m.optimizer(),
               " (", saved.size(), " tensors per element), the optimizer now is ", opt.describe(), " (", names.size(),
               "); load with the same optimizer type");
  }
  // The saved shards: shard rank -> rank file (opened lazily).
  std::map<int, const ckpt::RankFile*> shard_files;
  const ckpt::RankFile* own_file = nullptr;
  for (const auto& rf : m.rank_files()) {
    if (rf.holds_shards()) shard_files[rf.shard_rank()] = &rf;
    if (rf.rank() == comm->rank()) own_file = &rf;
  }
  ZS_REQUIRE(static_cast<int>(shard_files.size()) == m.shard_group_size(), CheckpointError, "checkpoint '", dir,
             "' lists ", shard_files.size(), " shard files, its shard group had ", m.shard_group_size(), " ranks");
  std::map<int, std::unique_ptr<ckpt::RankFileReader>> readers;
  auto reader = [&](int shard_rank) -> ckpt::RankFileReader& {
    auto it = readers.find(shard_rank);
    if (it != readers.end()) return *it->second;
    const ckpt::RankFile* rf = shard_files.at(shard_rank);
    auto r = std::make_unique<ckpt::RankFileReader>(dir + "/" + rf->file(), *rf);
    return *readers.emplace(shard_rank, std::move(r)).first->second;
  };
  out.resharded = m.world_size() != comm->size() || m.shard_group_size() != engine.shard_group_size();
  // Elements [lo, hi) of flat i's saved section `what`, gathered from the saved shards. When one
  // saved section is exactly the range (same layout), it is read straight into the result.
  auto read_range = [&](size_t i, const std::string& what, int64_t lo, int64_t hi) {
    const auto& fe = m.flats(static_cast<int>(i));
    const int64_t S = fe.shard_numel();
    auto section_of = [&](int j) -> std::pair<ckpt::RankFileReader*, const ckpt::Section*> {
      ckpt::RankFileReader& r = reader(j);
      const ckpt::Section& sec = r.section(flat_key(i) + "/" + what);
      ZS_REQUIRE(sec.bytes() == S * 4, CheckpointError, "'", r.path(), "' section '", sec.name(), "' has ", sec.bytes(),
                 " bytes, expected ", S * 4);
      return {&r, &sec};
    };
    if (fe.padded_numel() == flats[i]->padded_numel() && hi - lo == S && lo % S == 0) {
      at::Tensor out_t = at::empty({S}, at::kFloat);
      auto [r, sec] = section_of(static_cast<int>(lo / S));
      r->read(*sec, out_t.data_ptr());
      return out_t;
    }
    at::Tensor out_t = at::zeros({hi - lo}, at::kFloat);
    const int64_t end = std::min(hi, fe.numel());  // beyond numel: padding, zeros
    at::Tensor whole = at::empty({S}, at::kFloat);
    for (int64_t e = lo; e < end;) {
      const int j = static_cast<int>(e / S);
      const int64_t src_hi = std::min<int64_t>(end, (j + 1) * S);
      auto [r, sec] = section_of(j);
      r->read(*sec, whole.data_ptr());
      out_t.narrow(0, e - lo, src_hi - e).copy_(whole.narrow(0, e - j * S, src_hi - e));
      e = src_hi;
    }
    return out_t;
  };
  std::vector<ShardOptimizerState> opt_state;
  for (size_t i = 0; i < flats.size(); ++i) {
    FlatParam& f = *flats[i];
    const auto& fe = m.flats(static_cast<int>(i));
    const int64_t lo = static_cast<int64_t>(f.shard_group().rank()) * f.shard_numel();
    const int64_t hi = lo + f.shard_numel();
    f.shard().copy_(read_range(i, "param", lo, hi));
    if (!f.trainable()) continue;
    ShardOptimizerState st;
    st.updates = fe.optimizer_updates();
    if (fe.has_optimizer_state()) {
      for (const auto& n : names) st.tensors.push_back(read_range(i, "opt/" + n, lo, hi));
    }
    opt_state.push_back(std::move(st));
  }
  // Gathered copies hold the old values: every unit gathers again at its next forward.
  for (FlatParam* f : flats) f->free_full();
  opt.import_state(std::move(opt_state), m.optimizer_steps());
  // Buffers, from rank 0's file.
  if (m.buffers_size() > 0) {
    const ckpt::RankFile* rf0 = nullptr;
    for (const auto& rf : m.rank_files()) {
      if (rf.rank() == 0) rf0 = &rf;
    }
    ZS_REQUIRE(rf0 != nullptr, CheckpointError, "checkpoint '", dir, "' has no rank 0 file");
    ckpt::RankFileReader r(dir + "/" + rf0->file(), *rf0);
    for (auto& b : engine.model().named_buffers()) {
      const ckpt::Section& sec = r.section("buffer/" + b.key());
      std::vector<int64_t> shape(sec.shape().begin(), sec.shape().end());
      ZS_REQUIRE(shape == b.value().sizes().vec(), CheckpointError, "checkpoint '", dir, "': buffer '", b.key(),
                 "' is ", shape_str(shape), ", the model's is ", shape_str(b.value().sizes().vec()));
      at::Tensor host = at::empty(b.value().sizes(), b.value().options().device(at::kCPU));
      ZS_REQUIRE(static_cast<int64_t>(host.nbytes()) == sec.bytes(), CheckpointError, "checkpoint '", dir,
                 "': buffer '", b.key(), "' has ", sec.bytes(), " bytes, expected ", host.nbytes(), " (dtype ",
                 sec.dtype(), " vs ", c10::toString(b.value().scalar_type()), ")");
      r.read(sec, host.data_ptr());
      b.value().copy_(host);
    }
  }
  // This rank's own RNG state and entries, when the ranks are the same ones that saved.
  if (m.world_size() == comm->size() && own_file != nullptr) {
    ckpt::RankFileReader r(dir + "/" + own_file->file(), *own_file);
    if (r.has("rng/cpu")) {
      const std::string bytes = r.read_bytes("rng/cpu");
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      at::Tensor state = gen.get_state();
      ZS_REQUIRE(static_cast<size_t>(state.nbytes()) == bytes.size(), CheckpointError, "checkpoint '", dir,
                 "': the CPU RNG state has ", bytes.size(), " bytes, this LibTorch's has ", state.nbytes());
      std::memcpy(state.data_ptr(), bytes.data(), bytes.size());
      gen.set_state(state);
      out.rng_restored = true;
    }
    for (const auto& sec : r.index().sections()) {
      if (sec.name().rfind("user/", 0) == 0) out.per_rank[sec.name().substr(5)] = r.read_bytes(sec.name());
    }
  } else {
    ZS_LOG(kInfo) << "checkpoint saved at " << m.world_size() << " ranks, loading at " << comm->size()
                  << ": RNG states and per-rank entries are not restored";
  }
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

}  // namespace zeroshard
