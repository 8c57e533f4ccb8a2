// SPDX-License-Identifier: Apache-2.0
// Parameter offload (offload.params = CPU / NVME, ZeRO-Infinity's parameter swapping): the
// parameter shards live in a ShardStore between uses. Training a GPT with them on NVMe (or in host
// memory) must give the same parameters, bit for bit, as with resident shards, for AdamW and SGD,
// with the optimizer state on the host or on NVMe, under every sharding strategy; between uses no
// shard stays resident; a checkpoint saved with offloaded shards resumes exactly; a parameter file
// changed behind the engine's back is named with its offset; a write-back that fails (disk full)
// keeps the values in memory and the training continues exactly once the disk has room. Run at 1
// and 2 ranks.

#include <fcntl.h>
#include <unistd.h>

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_set>

#include "common/test_util.h"
#include "offload/offload_test_options.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/io/fault_io.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/core/host_memory.h"
#include "zeroshard/store/shard_store.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
namespace fs = std::filesystem;

namespace {

// Under the build tree (a disk: O_DIRECT works there): per rank, or one for all ranks (a
// checkpoint directory), made by rank 0 while the others wait.
struct TempDir {
  explicit TempDir(const std::string& name, bool per_rank = true) {
    if (per_rank) {
      path = own.emplace("offload_params_" + name).path;
    } else {
      path = shared.emplace("offload_params_" + name).path;
    }
  }
  std::optional<zs::test::RankDir> own;
  std::optional<zs::test::SharedDir> shared;
  std::string path;
};

using Trainer = zs_test::GptTrainer;
using zs_test::max_diff;

zs::OptimizerOptions adamw_config() { return zs_test::trainer_adamw_options(); }

zs::OptimizerOptions sgd_config() { return zs_test::trainer_sgd_options(); }

// Small blocks: a shard spans several checksum chunks and I/O pieces. Two generations, as
// resolve() sets them for a run whose optimizer state is on NVMe too: an optimizer with its state
// on NVMe then keeps its fp32 master in the store alone (1: in its own records, as before).
zs::ShardingOptions offloaded(zs::OffloadTarget where, const std::string& dir,
                              zs::ShardingStrategy strategy = zs::ShardingStrategy::kFullShard, int generations = 2) {
  zs::ShardingOptions o;
  o.strategy = strategy;
  o.offload_params.target = where;
  o.offload_params.nvme_path = dir;
  o.offload_params.block_size = 4096;
  o.offload_params.queue_depth = 4;
  o.offload_params.generations = generations;
  return o;
}

zs::OffloadOptions optimizer_options(zs::OffloadTarget where, const std::string& dir) {
  zs::OffloadOptions o;
  o.target = where;
  o.params = zs::OffloadTarget::kNvme;
  o.nvme_path = dir;
  o.block_size = 4096;
  o.buffer_count = 3;
  o.queue_depth = 4;
  return o;
}

zs_test::GptConfig deeper_gpt() {
  zs_test::GptConfig c = zs_test::trainer_gpt_config();
  c.layers = 10;
  return c;
}

using zs::test::contains;

// The last trainable flat parameter: the last shard an optimizer step updates.
zs::FlatParam* last_trainable(zs::ShardingEngine& e) {
  zs::FlatParam* last = nullptr;
  for (zs::FlatParam* f : zs::detail::flat_params(e)) {
    if (f->trainable()) last = f;
  }
  return last;
}

int64_t shard_bytes_total(zs::ShardingEngine& e) {
  int64_t n = 0;
  for (zs::FlatParam* f : zs::detail::flat_params(e)) n += 4 * f->shard_numel();
  return n;
}

}  // namespace

// The reference: the same optimizer placement with resident shards. Offloaded shards must not
// change a bit of the training, for either optimizer, either optimizer-state placement and every
// strategy that shards (NO_SHARD: a one-rank shard group, where resident fp32 shards are aliased
// by the parameters and offloaded ones are not).
TEST(OffloadParams, NvmeShardsTrainBitwiseAsResident) {
  for (auto opt_where : {zs::OffloadTarget::kCpu, zs::OffloadTarget::kNvme}) {
    for (bool sgd : {false, true}) {
      const auto cfg = sgd ? sgd_config() : adamw_config();
      for (auto strategy : {zs::ShardingStrategy::kFullShard, zs::ShardingStrategy::kShardGradOp,
                            zs::ShardingStrategy::kNoShard}) {
        // NO_SHARD all-reduces where the others reduce-scatter (other rounding): a reference each.
        TempDir ref_dir("ref");
        zs::ShardingOptions rso;
        rso.strategy = strategy;
        Trainer ref(rso);
        zs::OffloadOptions ro = optimizer_options(opt_where, ref_dir.path);
        ro.params = zs::OffloadTarget::kDevice;
        zs::OffloadedOptimizer ref_opt(cfg, ro, zs::test::rank());
        ref.train(ref_opt, 0, 5);
        const auto want = ref.params();
        TempDir dir("equal");
        Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path, strategy));
        ASSERT_NE(t.engine->param_store(), nullptr);
        zs::OffloadedOptimizer opt(cfg, optimizer_options(opt_where, dir.path), zs::test::rank());
        t.train(opt, 0, 5);
        const std::string what = std::string(sgd ? "SGD" : "AdamW") + ", optimizer state on " +
                                 zs::to_string(opt_where) + ", strategy " + std::to_string(static_cast<int>(strategy));
        EXPECT_EQ(max_diff(t.params(), want), 0.0) << what;
        // Between steps no shard is resident; every shard has its file.
        EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << what;
        for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) {
          EXPECT_FALSE(f->shard_resident()) << f->name();
          EXPECT_TRUE(fs::exists(f->shard_file())) << f->shard_file();
        }
        const zs::ShardStore::IoStats io = t.engine->param_store()->io_stats();
        EXPECT_GT(io.bytes_read, 0) << what;
        EXPECT_GT(io.bytes_written, 0) << what;
      }
    }
  }
}

// Pretrained weights loaded between two steps stay loaded: the offloaded optimizer keeps an fp32
// master of its own (in NVMe state files; on the host when the shards are on a GPU), and the step
// after load_pretrained takes the loaded values as its master instead of writing the old ones
// back. With lr 0 the parameters after that step are exactly the loaded weights. (Before, the
// NVMe cases ended with the weights of before the load.)
TEST(OffloadParams, WeightsLoadedBetweenStepsSurviveTheNextStep) {
  TempDir file_dir("pretrained", /*per_rank=*/false);
  const std::string file = file_dir.path + "/weights.safetensors";
  Trainer source(zs::ShardingOptions{}, /*init_seed=*/5);
  std::map<std::string, at::Tensor> loaded = source.params();
  loaded.erase("lm_head_weight");  // tied to the token embedding: stored once
  if (zs::test::rank() == 0) {
    std::vector<zs::TensorInfo> infos;
    for (const auto& [name, t] : loaded) infos.push_back({name, t.scalar_type(), t.sizes().vec()});
    zs::SafetensorsWriter w(file, infos);
    for (const auto& [name, t] : loaded) w.write(name, t.cpu());
    w.finish();
  }
  zs::test::barrier();
  zs::OptimizerOptions cfg = adamw_config();
  cfg.lr = 0;
  for (auto opt_where : {zs::OffloadTarget::kCpu, zs::OffloadTarget::kNvme}) {
    for (bool params_offloaded : {false, true}) {
      const std::string what = std::string("optimizer state on ") + zs::to_string(opt_where) +
                               (params_offloaded ? ", parameters on NVMe" : ", parameters resident");
      TempDir dir("reload");
      Trainer t(params_offloaded ? offloaded(zs::OffloadTarget::kNvme, dir.path) : zs::ShardingOptions{});
      zs::OffloadOptions oo = optimizer_options(opt_where, dir.path);
      oo.params = params_offloaded ? zs::OffloadTarget::kNvme : zs::OffloadTarget::kDevice;
      zs::OffloadedOptimizer opt(cfg, oo, zs::test::rank());
      t.train(opt, 0, 2);
      ASSERT_GT(max_diff(loaded, t.params()), 0.0) << what << ": the test needs other initial weights";
      zs::load_pretrained(*t.engine, file);
      EXPECT_EQ(max_diff(loaded, t.params()), 0.0) << what << ", right after the load";
      t.train(opt, 2, 4);
      EXPECT_EQ(max_diff(loaded, t.params()), 0.0) << what << ", two steps after the load";
    }
  }
}

// offload.params = CPU: on a CPU run the host tensor is the working shard (nothing copied), and the
// training is that of resident shards.
TEST(OffloadParams, CpuShardsTrainBitwiseAsResident) {
  Trainer ref;
  zs::OffloadOptions ro;
  ro.target = zs::OffloadTarget::kCpu;
  zs::OffloadedOptimizer ref_opt(adamw_config(), ro, zs::test::rank());
  ref.train(ref_opt, 0, 4);
  Trainer t(offloaded(zs::OffloadTarget::kCpu, ""));
  zs::OffloadOptions o = ro;
  o.params = zs::OffloadTarget::kCpu;
  zs::OffloadedOptimizer opt(adamw_config(), o, zs::test::rank());
  t.train(opt, 0, 4);
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
  EXPECT_EQ(t.engine->param_store()->bytes_on_disk(), 0);
}

// At most the units being gathered (this one and the prefetched next) plus the one read ahead hold
// their shards: with 12 units, the peak of resident shard bytes (read-ahead buffers included) stays
// at three shards, well under the total.
TEST(OffloadParams, FewShardsResidentAtOnce) {
  TempDir dir("peak");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path), 11, deeper_gpt());
  zs::OffloadedOptimizer opt(adamw_config(), optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
  t.train(opt, 0, 3);
  const int64_t total = shard_bytes_total(*t.engine);
  int64_t largest = 0;
  for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) largest = std::max<int64_t>(largest, 4 * f->shard_numel());
  const int64_t peak = t.engine->memory().peak(zs::MemCategory::kShardedParams);
  if (zs::test::rank() == 0) {
    std::printf("  resident shard peak %lld of %lld bytes (largest shard %lld), on disk %lld\n",
                static_cast<long long>(peak), static_cast<long long>(total), static_cast<long long>(largest),
                static_cast<long long>(t.engine->param_store()->bytes_on_disk()));
  }
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, 3 * largest) << "more than three shards were resident at once";
  EXPECT_LT(peak, total / 2);
  EXPECT_GE(t.engine->param_store()->bytes_on_disk(), total);
}

// Built under a ShardedInit with offloaded shards, each unit's shard goes to the store as soon as
// the unit is built: the build (host allocator, measured) holds the root's parameters and about
// one unit, not the shards of every unit built so far. And it trains as resident shards do.
TEST(OffloadParams, ShardedInitBuildsStraightIntoTheStore) {
  auto& s = zs::test::session();
  zs_test::GptConfig c = zs_test::trainer_gpt_config();
  c.dim = 64;
  c.layers = 16;
  int64_t whole = 0, unit = 0, blocks = 0;
  {
    zs_test::Gpt plain(c);
    std::unordered_set<const void*> seen;
    for (auto& p : plain->parameters()) {
      if (seen.insert(p.unsafeGetTensorImpl()).second) whole += 4 * p.numel();
    }
    for (auto& b : plain->blocks) {
      int64_t n = 0;
      for (auto& p : b->parameters()) n += 4 * p.numel();
      unit = std::max(unit, n);
      ++blocks;
    }
  }
  const int64_t root = whole - blocks * unit;
  std::map<std::string, at::Tensor> results[2];
  for (bool offload : {false, true}) {
    TempDir dir(offload ? "init_nvme" : "init_ref");
    zs::ShardingOptions o = offload ? offloaded(zs::OffloadTarget::kNvme, dir.path) : zs::ShardingOptions{};
    torch::manual_seed(11);
    zs::ShardedInit init(s, o);
    zs::begin_host_memory_window();
    zs_test::Gpt model(c);
    const int64_t peak = zs::host_memory_window_peak();
    init.stop();
    if (offload) {
      const int64_t bound = root + 3 * unit + 64 * 1024;
      if (s.rank() == 0) {
        std::printf("  build peak with shards on NVMe (host allocator): %lld B of a %lld B model (bound %lld)\n",
                    static_cast<long long>(peak), static_cast<long long>(whole), static_cast<long long>(bound));
      }
      EXPECT_LE(peak, bound) << "building kept more than a unit or so beyond the root's parameters";
    }
    zs::ShardingEngine engine(init, model.ptr());
    engine.set_param_groups(zs_test::trainer_param_groups());
    EXPECT_EQ(engine.param_store() != nullptr, offload);
    zs::OffloadOptions oo = optimizer_options(zs::OffloadTarget::kNvme, dir.path);
    oo.params = o.offload_params.target;
    zs::OffloadedOptimizer opt(adamw_config(), oo, s.rank());
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(1000 + 31 * step + s.rank());
      torch::Tensor x = torch::randint(c.vocab, {3, c.seq}, torch::kLong);
      torch::Tensor y = torch::randint(c.vocab, {3, c.seq}, torch::kLong);
      engine.forward([&] { return torch::cross_entropy_loss(model->forward(x).view({-1, c.vocab}), y.view({-1})); })
          .backward();
      engine.step(opt);
      engine.zero_grad();
    }
    results[offload] = engine.full_state_dict();
  }
  EXPECT_EQ(max_diff(results[1], results[0]), 0.0);
}

// Save with offloaded shards, resume into a fresh engine with offloaded shards: the same result as
// training straight through.
TEST(OffloadParams, ResumeFromCheckpointExactly) {
  const auto cfg = adamw_config();
  TempDir ref_dir("resume_ref");
  Trainer ref;
  zs::OffloadOptions ro = optimizer_options(zs::OffloadTarget::kNvme, ref_dir.path);
  ro.params = zs::OffloadTarget::kDevice;
  zs::OffloadedOptimizer ref_opt(cfg, ro, zs::test::rank());
  ref.train(ref_opt, 0, 6);
  const auto want = ref.params();

  TempDir ckpt_dir("resume_ckpt", /*per_rank=*/false);
  zs::CheckpointOptions co;
  co.dir = ckpt_dir.path;
  {
    TempDir dir("resume_a");
    Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
    zs::OffloadedOptimizer opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
    t.train(opt, 0, 3);
    zs::Checkpointer ckpt(*t.engine, co);
    zs::TrainingState st;
    st.step = 3;
    ckpt.save(opt, st);
    EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << "save left shards resident";
  }
  TempDir dir("resume_b");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path), /*init_seed=*/99);  // other initial values
  zs::OffloadedOptimizer opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
  zs::Checkpointer ckpt(*t.engine, co);
  EXPECT_EQ(ckpt.load(opt).step, 3);
  EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << "load left shards resident";
  t.train(opt, 3, 6);
  EXPECT_EQ(max_diff(t.params(), want), 0.0);
}

// With parameters and optimizer state on NVMe, a save and a load stream shard by shard: the host
// memory each allocates (the allocator's peak over the call) stays within a training step's and
// within a few shards' values, where holding this rank's parameters and moments at once (12 bytes
// per element) would not. The first step after the load, which applies the loaded moments position by
// position, stays within a step plus one position's moments. The resumed run is exact.
TEST(OffloadParams, SaveAndLoadStreamShardByShard) {
  const auto cfg = adamw_config();
  TempDir ckpt_dir("stream_ckpt", /*per_rank=*/false);
  zs::CheckpointOptions co;
  co.dir = ckpt_dir.path;
  zs_test::GptConfig gpt = deeper_gpt();
  gpt.layers = 48;  // the state of many units against the few a step holds
  int64_t step_peak = 0, save_peak = 0, state_bytes = 0, largest = 0;
  std::map<std::string, at::Tensor> want;
  {
    TempDir dir("stream_a");
    Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path), 11, gpt);
    zs::OffloadedOptimizer opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
    t.train(opt, 0, 2);
    zs::begin_host_memory_window();
    t.train(opt, 2, 3);
    step_peak = zs::host_memory_window_peak();
    state_bytes = 3 * shard_bytes_total(*t.engine);  // fp32 shards and two moments
    for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) largest = std::max<int64_t>(largest, 4 * f->shard_numel());
    zs::Checkpointer ckpt(*t.engine, co);
    zs::TrainingState st;
    st.step = 3;
    zs::begin_host_memory_window();
    ckpt.save(opt, st);
    save_peak = zs::host_memory_window_peak();
    t.train(opt, 3, 5);
    want = t.params();
  }
  TempDir dir("stream_b");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path), /*init_seed=*/99, gpt);
  zs::OffloadedOptimizer opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
  zs::Checkpointer ckpt(*t.engine, co);
  zs::begin_host_memory_window();
  EXPECT_EQ(ckpt.load(opt).step, 3);
  const int64_t load_peak = zs::host_memory_window_peak();
  zs::begin_host_memory_window();
  t.train(opt, 3, 4);
  const int64_t first_step_peak = zs::host_memory_window_peak();
  t.train(opt, 4, 5);
  if (zs::test::rank() == 0) {
    std::printf("  host peak: step %lld, save %lld, load %lld, first step after load %lld bytes; "
                "shards + moments %lld, largest shard %lld\n",
                static_cast<long long>(step_peak), static_cast<long long>(save_peak), static_cast<long long>(load_peak),
                static_cast<long long>(first_step_peak), static_cast<long long>(state_bytes),
                static_cast<long long>(largest));
  }
  const int64_t few_positions = 4 * 3 * largest;  // a shard and its two moments, four times over
  ASSERT_LT(2 * few_positions, state_bytes) << "the model is too small to tell streaming from holding everything";
  EXPECT_GT(step_peak, 0);
  EXPECT_LE(save_peak, step_peak) << "the save held more than a training step does";
  EXPECT_LE(save_peak, few_positions) << "the save held more than a few shards' values at once";
  EXPECT_LE(load_peak, step_peak) << "the load held more than a training step does";
  EXPECT_LE(load_peak, few_positions) << "the load held more than a few shards' values at once";
  EXPECT_LE(first_step_peak, step_peak + 2 * largest) << "applying the loaded moments held more than one position's";
  EXPECT_EQ(max_diff(t.params(), want), 0.0) << "the resumed run differs";
}

// An async save would copy the state offloaded to NVMe into host memory: refused, nothing written.
TEST(OffloadParams, AsyncSaveOfStateOnNvmeIsRefused) {
  TempDir dir("async_nvme");
  TempDir ckpt_dir("async_nvme_ckpt", /*per_rank=*/false);
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
  zs::OffloadedOptimizer opt(adamw_config(), optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
  t.train(opt, 0, 1);
  zs::CheckpointOptions co;
  co.dir = ckpt_dir.path + "/ckpt";
  co.async_save = true;
  zs::Checkpointer ckpt(*t.engine, co);
  zs::TrainingState st;
  st.step = 1;
  const std::string err = error_text_of<zs::UsageError>([&] { ckpt.save(opt, st); });
  EXPECT_TRUE(contains(err, "checkpoint.async_save copies this rank's optimizer state into host memory")) << err;
  EXPECT_TRUE(contains(err, "save synchronously (checkpoint.async_save = false)")) << err;
  EXPECT_FALSE(fs::exists(co.dir + "/" + zs::ckpt::step_dir_name(1)));
}

// A parameter file changed behind the engine's back: the next gather names the file, the chunk and
// its offset.
TEST(OffloadParams, CorruptedParameterFileIsNamed) {
  TempDir dir("corrupt");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
  zs::OffloadedOptimizer opt(adamw_config(), optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
  t.train(opt, 0, 2);
  zs::FlatParam* victim = nullptr;
  for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) {
    if (f->shard_numel() * 4 > 4096 + 100) victim = f;  // at least two chunks
  }
  ASSERT_NE(victim, nullptr);
  const std::string file = victim->shard_file();
  const int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << file;
  const char junk = 0x5a;
  ASSERT_EQ(::pwrite(fd, &junk, 1, 4096 + 33), 1);  // inside chunk 1
  ::close(fd);
  const std::string err = error_text_of<zs::IoError>([&] { t.forward_backward(2); });
  EXPECT_TRUE(contains(err, file)) << err;
  EXPECT_TRUE(contains(err, "chunk 1 at offset 4096")) << err;
  EXPECT_TRUE(contains(err, "unit '" + victim->name() + "'")) << err;
  EXPECT_TRUE(contains(err, "CRC-32C")) << err;
  t.engine->reset_after_error();
}

// Optimizer state in host memory, shards on NVMe: the step updates each shard in place (the file is
// the only master). A shard file found corrupted in the middle of a step fails it naming the file;
// the shards before it keep their update, and once the file is repaired the retried step skips
// them: the run equals the uninterrupted one.
TEST(OffloadParams, CorruptedFileMidStepThenRetryCompletesTheStep) {
  const auto cfg = adamw_config();
  Trainer ref;
  zs::OffloadOptions ro;
  ro.target = zs::OffloadTarget::kCpu;
  ro.block_size = 4096;
  zs::OffloadedOptimizer ref_opt(cfg, ro, zs::test::rank());
  ref.train(ref_opt, 0, 4);
  const auto want = ref.params();

  TempDir dir("midstep");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
  zs::OffloadOptions o = ro;
  o.params = zs::OffloadTarget::kNvme;
  zs::OffloadedOptimizer opt(cfg, o, zs::test::rank());
  t.train(opt, 0, 2);
  t.forward_backward(2);
  zs::FlatParam* last = last_trainable(*t.engine);
  ASSERT_NE(last, nullptr);
  const std::string file = last->shard_file();
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << file;
  char saved = 0;
  ASSERT_EQ(::pread(fd, &saved, 1, 5), 1);
  const char junk = static_cast<char>(saved ^ 0x40);
  ASSERT_EQ(::pwrite(fd, &junk, 1, 5), 1);
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "step 3 failed")) << err;
  EXPECT_TRUE(contains(err, file)) << err;
  EXPECT_TRUE(contains(err, "chunk 0 at offset 0")) << err;
  EXPECT_TRUE(contains(err, "completes the step")) << err;
  ASSERT_EQ(::pwrite(fd, &saved, 1, 5), 1);  // repaired
  ::close(fd);
  t.engine->step(opt);
  t.engine->zero_grad();
  EXPECT_EQ(opt.steps(), 3);
  t.train(opt, 3, 4);
  EXPECT_EQ(max_diff(t.params(), want), 0.0);
}

// The same failure, but instead of the retry a new backward: its gradients cannot complete the
// partly applied step, and the optimizer says so instead of mixing two steps.
TEST(OffloadParams, PartialStepRefusesOtherGradients) {
  TempDir dir("midstep_other");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
  zs::OffloadOptions o;
  o.target = zs::OffloadTarget::kCpu;
  o.params = zs::OffloadTarget::kNvme;
  zs::OffloadedOptimizer opt(adamw_config(), o, zs::test::rank());
  t.train(opt, 0, 1);
  t.forward_backward(1);
  zs::FlatParam* last = last_trainable(*t.engine);
  ASSERT_NE(last, nullptr);
  const int fd = ::open(last->shard_file().c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char saved = 0;
  ASSERT_EQ(::pread(fd, &saved, 1, 9), 1);
  const char junk = static_cast<char>(saved ^ 0x11);
  ASSERT_EQ(::pwrite(fd, &junk, 1, 9), 1);
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "step 2 failed")) << err;
  ASSERT_EQ(::pwrite(fd, &saved, 1, 9), 1);  // repaired
  ::close(fd);
  t.engine->zero_grad();
  t.forward_backward(2);  // other gradients
  const std::string err2 = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err2, "was partly applied")) << err2;
  EXPECT_TRUE(contains(err2, "only a retry with the same gradients")) << err2;
  EXPECT_EQ(opt.steps(), 1);
}

// The disk fills up while a step writes the new parameters back: the step fails naming the file,
// the values (rolled back to the step's start) stay in memory, and once the disk has room the
// retried step and the rest of the run equal the uninterrupted one.
// Disk full on one rank only, in the optimizer state's writes: engine.step throws on every rank
// (the failing rank its own error, the others naming that rank), so no rank goes on alone into the
// buffer average or the next forward's all-gather; once the disk has room the retry completes the
// step where it failed (the others only join the agreement) and the run equals the uninterrupted
// one, NO_SHARD (whose units stay gathered between steps) included. Before, the failing rank threw
// while its peers went on into the next collective and waited for it until the watchdog.
TEST(OffloadParams, DiskFullOnOneRankFailsTheStepOnEveryRank) {
  ZS_REQUIRE_RANKS(2);
  const int victim = zs::test::world_size() - 1;
  const auto cfg = adamw_config();
  for (auto strategy : {zs::ShardingStrategy::kFullShard, zs::ShardingStrategy::kNoShard}) {
    SCOPED_TRACE(zs::to_string(strategy));
    zs::ShardingOptions so;
    so.strategy = strategy;
    TempDir ref_dir("one_rank_ref");
    Trainer ref(so);
    zs::OffloadOptions ro = optimizer_options(zs::OffloadTarget::kNvme, ref_dir.path);
    ro.params = zs::OffloadTarget::kDevice;
    zs::OffloadedOptimizer ref_opt(cfg, ro, zs::test::rank());
    ref.train(ref_opt, 0, 4);
    const auto want = ref.params();

    TempDir dir("one_rank");
    Trainer t(so);
    zs::OffloadOptions o = optimizer_options(zs::OffloadTarget::kNvme, dir.path);
    o.params = zs::OffloadTarget::kDevice;
    auto faulty = zs_test::faulty_test_io();
    zs::OffloadedOptimizer opt(cfg, o, zs::test::rank(), nullptr, faulty);
    t.train(opt, 0, 2);
    t.forward_backward(2);
    if (zs::test::rank() == victim) faulty->fail_writes_after_bytes(4096);
    const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
    EXPECT_TRUE(contains(err, "disk full")) << err;
    if (zs::test::rank() == victim) {
      EXPECT_TRUE(contains(err, "offloaded optimizer step 3 failed on rank " + std::to_string(victim))) << err;
      EXPECT_EQ(opt.steps(), 2);
    } else {
      const std::string r = std::to_string(victim);
      EXPECT_TRUE(contains(err, "the optimizer step failed on rank(s) " + r + "; rank " + r + ": offloaded optimizer "
                                "step 3 failed on rank " + r)) << err;
      EXPECT_TRUE(contains(err, "This rank's step succeeded and is kept")) << err;
      EXPECT_EQ(opt.steps(), 3);
    }
    faulty->clear();
    t.engine->step(opt);  // the gradients are still there: retry
    EXPECT_EQ(opt.steps(), 3);
    t.engine->zero_grad();
    t.train(opt, 3, 4);
    EXPECT_EQ(max_diff(t.params(), want), 0.0);
  }
}

// A read of an offloaded parameter shard fails on one rank, in a forward's gathers or in the
// backward's: every rank raises it at the same unit, before that unit's all-gather (the failing
// rank its own error, the others naming that rank), where before the others waited in the gather
// for the rank that had left until the watchdog ended the job. Once the drive reads again the same
// step runs (the next forward resets the failed backward) and the run equals the uninterrupted one.
TEST(OffloadParams, ReadFailureOnOneRankFailsThePassOnEveryRank) {
  ZS_REQUIRE_RANKS(2);
  const int victim = zs::test::world_size() - 1;
  const bool me_victim = zs::test::rank() == victim;
  const auto cfg = adamw_config();
  TempDir ref_dir("read_fail_ref");
  Trainer ref(offloaded(zs::OffloadTarget::kNvme, ref_dir.path));
  zs::OffloadedOptimizer ref_opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, ref_dir.path), zs::test::rank());
  ref.train(ref_opt, 0, 4);
  const auto want = ref.params();
  for (bool in_backward : {false, true}) {
    SCOPED_TRACE(in_backward ? "in backward" : "in forward");
    TempDir dir("read_fail");
    zs::ShardingOptions so = offloaded(zs::OffloadTarget::kNvme, dir.path);
    auto faulty = zs_test::faulty_test_io();
    so.offload_params.io = faulty;
    Trainer t(so);
    zs::OffloadedOptimizer opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
    t.train(opt, 0, 2);
    const torch::Tensor x = torch::randint(t.config.vocab, {3, t.config.seq}, torch::kLong);
    const std::string err = error_text_of<zs::IoError>([&] {
      if (!in_backward && me_victim) faulty->fail_reads();
      torch::Tensor loss = t.engine->forward([&] { return t.model->forward(x).square().mean(); });
      if (in_backward && me_victim) faulty->fail_reads();
      loss.backward();
    });
    EXPECT_TRUE(contains(err, "reading the parameter shards of unit '")) << err;
    EXPECT_TRUE(contains(err, "failed on rank(s) " + std::to_string(victim) + ": ")) << err;
    EXPECT_TRUE(contains(err, ".param")) << err;
    // The other ranks read everything and fail all the same.
    if (me_victim) {
      EXPECT_GT(faulty->injected(), 0);
    } else {
      EXPECT_EQ(faulty->injected(), 0);
    }
    faulty->clear();
    t.forward_backward(2);
    t.engine->step(opt);
    t.engine->zero_grad();
    t.train(opt, 3, 4);
    EXPECT_EQ(max_diff(t.params(), want), 0.0);
  }
}

TEST(OffloadParams, DiskFullOnWriteBackKeepsStateAndRetrySucceeds) {
  const auto cfg = adamw_config();
  TempDir ref_dir("enospc_ref");
  Trainer ref;
  zs::OffloadOptions ro = optimizer_options(zs::OffloadTarget::kNvme, ref_dir.path);
  ro.params = zs::OffloadTarget::kDevice;
  zs::OffloadedOptimizer ref_opt(cfg, ro, zs::test::rank());
  ref.train(ref_opt, 0, 4);
  const auto want = ref.params();

  // 2: the master held once, in the store: the step is abandoned whole and nothing stays
  // resident. 1: the master in the optimizer's records: the shards are restored from them and the
  // restored values whose write fails stay in memory.
  for (int generations : {2, 1}) {
    SCOPED_TRACE(std::to_string(generations) + " store generation(s)");
    TempDir dir("enospc");
    zs::ShardingOptions so = offloaded(zs::OffloadTarget::kNvme, dir.path, zs::ShardingStrategy::kFullShard, generations);
    auto faulty = zs_test::faulty_test_io();
    so.offload_params.io = faulty;
    Trainer t(so);
    zs::OffloadedOptimizer opt(cfg, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
    t.train(opt, 0, 2);
    t.forward_backward(2);
    faulty->fail_writes_after_bytes(4096);  // the second shard written back finds the disk full
    const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
    EXPECT_TRUE(contains(err, "disk full")) << err;
    EXPECT_TRUE(contains(err, ".param")) << err;
    EXPECT_TRUE(contains(err, "step 3 failed")) << err;
    EXPECT_TRUE(contains(err, "as before this step")) << err;
    EXPECT_EQ(opt.steps(), 2);
    if (generations == 2) {
      EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << "the step is abandoned whole";
    } else {
      EXPECT_TRUE(contains(err, "stay in memory")) << err;
      EXPECT_GT(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << "unwritten shards must stay resident";
    }
    faulty->clear();
    t.engine->step(opt);  // the gradients are still there: retry
    t.engine->zero_grad();
    t.train(opt, 3, 4);
    EXPECT_EQ(max_diff(t.params(), want), 0.0);
    EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), 0);
  }
}

// Optimizer state and parameter shards on NVMe on a CPU run: the fp32 master is on the drive once,
// in the parameter store's two generations, and the optimizer's files hold the moments only
// (AdamW two, SGD with momentum one, plain SGD none). A step reads each state file once and each
// parameter file once. Training equals the resident reference bit for bit.
TEST(OffloadParams, MasterHeldOnceOnTheDrive) {
  struct Case {
    const char* name;
    zs::OptimizerOptions opt;
    int moments;
  };
  zs::OptimizerOptions momentum = sgd_config();
  momentum.momentum = 0.9;
  zs::OptimizerOptions plain = sgd_config();
  plain.momentum = 0;
  plain.nesterov = false;
  for (const Case& c : {Case{"AdamW", adamw_config(), 2}, Case{"SGD with momentum", momentum, 1},
                        Case{"plain SGD", plain, 0}}) {
    SCOPED_TRACE(c.name);
    TempDir ref_dir("once_ref");
    Trainer ref;
    zs::OffloadOptions ro = optimizer_options(zs::OffloadTarget::kNvme, ref_dir.path);
    ro.params = zs::OffloadTarget::kDevice;
    zs::OffloadedOptimizer ref_opt(c.opt, ro, zs::test::rank());
    ref.train(ref_opt, 0, 3);

    TempDir dir("once");
    Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
    zs::OffloadedOptimizer opt(c.opt, optimizer_options(zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
    t.train(opt, 0, 2);
    int64_t elems = 0, param_blocks = 0;
    for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) {
      if (f->shard_offloaded()) param_blocks += std::max<int64_t>(4096, (4 * f->shard_numel() + 4095) / 4096 * 4096);
      if (f->trainable()) elems += (f->shard_numel() + 1023) / 1024 * 1024;  // records: 1024 floats per array
    }
    int64_t state_files = 0, param_files = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir.path)) {
      const std::string name = e.path().filename().string();
      if (name.find(".state.") != std::string::npos) state_files += static_cast<int64_t>(fs::file_size(e.path()));
      if (name.find(".param") != std::string::npos) param_files += static_cast<int64_t>(fs::file_size(e.path()));
    }
    EXPECT_EQ(state_files, 2 * c.moments * 4 * elems) << "two generations of the moments, no master";
    EXPECT_EQ(param_files, 2 * param_blocks) << "two generations of the fp32 shards";
    t.forward_backward(2);
    const zs::OffloadedOptimizer::IoStats before = opt.io_stats();
    t.engine->step(opt);
    t.engine->zero_grad();
    const zs::OffloadedOptimizer::IoStats after = opt.io_stats();
    EXPECT_EQ(after.bytes_read - before.bytes_read, c.moments * 4 * elems) << "the moments read once";
    EXPECT_EQ(after.bytes_written - before.bytes_written, c.moments * 4 * elems);
    EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
  }
}

// State in host memory, shards on NVMe, and the disk full while the step writes shards back: the
// update is in place on the only master and cannot be undone, so the step completes, the unwritten
// shards stay in memory, and the error says the step was applied and must not be repeated. Once the
// disk has room the run goes on and equals the uninterrupted one.
TEST(OffloadParams, CpuStateStepWithFailedWriteBackIsAppliedOnce) {
  const auto cfg = adamw_config();
  Trainer ref;
  zs::OffloadOptions ro;
  ro.target = zs::OffloadTarget::kCpu;
  zs::OffloadedOptimizer ref_opt(cfg, ro, zs::test::rank());
  ref.train(ref_opt, 0, 4);
  const auto want = ref.params();

  TempDir dir("cpu_enospc");
  zs::ShardingOptions so = offloaded(zs::OffloadTarget::kNvme, dir.path);
  auto faulty = zs_test::faulty_test_io();
  so.offload_params.io = faulty;
  Trainer t(so);
  zs::OffloadOptions o = ro;
  o.params = zs::OffloadTarget::kNvme;
  zs::OffloadedOptimizer opt(cfg, o, zs::test::rank());
  t.train(opt, 0, 2);
  t.forward_backward(2);
  faulty->fail_writes_after_bytes(4096);
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "offloaded optimizer step 3 was applied")) << err;
  EXPECT_TRUE(contains(err, "disk full")) << err;
  EXPECT_TRUE(contains(err, "do not repeat the step")) << err;
  EXPECT_EQ(opt.steps(), 3);
  EXPECT_GT(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << "unwritten shards must stay resident";
  faulty->clear();
  t.engine->zero_grad();
  t.train(opt, 3, 4);
  EXPECT_EQ(max_diff(t.params(), want), 0.0);
  EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kShardedParams), 0);
}

// A drive too small for the parameter shards fails when the engine is built (the space is reserved
// there), naming the file, the unit and what to do; not mid-run. The small drive: a 128 KiB tmpfs
// mounted for the test (root with CAP_SYS_ADMIN; skipped, saying so, where mounting is refused).
// The errors of wrapping a GPT big enough for a 128 KiB drive (about 200 KB of fp32 shards per
// block on each rank) with its parameter shards, then its gradient shards, on NVMe under `drive`.
struct WrapErrors {
  std::string params, grads;
};
WrapErrors wrap_errors_on(const std::string& drive) {
  zs_test::GptConfig big = zs_test::trainer_gpt_config();
  big.dim = 64, big.layers = 4;
  WrapErrors e;
  e.params = error_text_of<zs::IoError>([&] { Trainer t(offloaded(zs::OffloadTarget::kNvme, drive), 11, big); });
  // The gradient shards' store (parameters resident) reserves its space at the same point.
  zs::ShardingOptions grads;
  grads.offload_grads = offloaded(zs::OffloadTarget::kNvme, drive).offload_params;
  e.grads = error_text_of<zs::IoError>([&] { Trainer t(grads, 11, big); });
  return e;
}

TEST(OffloadParams, DriveTooSmallFailsWhenTheEngineIsBuilt) {
  TempDir dir("too_small");
  const std::string mnt = dir.path + "/drive";
  fs::create_directories(mnt);
  if (::mount("zeroshard-test", mnt.c_str(), "tmpfs", 0, "size=128k") != 0) {
    GTEST_SKIP() << "cannot mount a 128 KiB tmpfs at " << mnt << " (" << std::strerror(errno)
                 << "): needs root with CAP_SYS_ADMIN";
  }
  const auto [err, grad_err] = wrap_errors_on(mnt);
  ::umount2(mnt.c_str(), MNT_DETACH);
  EXPECT_TRUE(contains(err, "cannot reserve ")) << err;
  EXPECT_TRUE(contains(err, mnt + "/zeroshard-params-rank" + std::to_string(zs::test::rank()) + "/")) << err;
  EXPECT_TRUE(contains(err, "No space left on device (errno 28) - the drive under offload.nvme_path is too small "
                            "for the parameter shards"))
      << err;
  EXPECT_TRUE(contains(grad_err, mnt + "/zeroshard-grads-rank" + std::to_string(zs::test::rank()) + "/")) << grad_err;
  EXPECT_TRUE(contains(grad_err, "too small for the gradient shards")) << grad_err;
}

// A drive too small on one rank only (rank 1's offload folder is a 128 KiB tmpfs, rank 0's is on
// the disk): every rank fails the wrap with rank 1's error, instead of rank 0 going on to the next
// unit's broadcast and waiting there for a rank that left (until the watchdog). Parameter and
// gradient stores, and a ShardedInit's.
TEST(OffloadParams, DriveTooSmallOnOneRankFailsTheWrapOnEveryRank) {
  ZS_REQUIRE_RANKS(2);
  TempDir dir("too_small_on_one");
  const std::string drive = dir.path + "/drive";
  std::vector<std::string> mounts;
  bool mounted = true;
  if (zs::test::rank() == 1) {
    for (const char* name : {"zeroshard-params-rank1", "zeroshard-grads-rank1"}) {
      const std::string at = drive + "/" + name;
      fs::create_directories(at);
      if (::mount("zeroshard-test", at.c_str(), "tmpfs", 0, "size=128k") != 0) {
        mounted = false;
        break;
      }
      mounts.push_back(at);
    }
  } else {
    fs::create_directories(drive);
  }
  at::Tensor ok = at::full({1}, mounted ? 1 : 0, at::kLong);
  zs::test::world()->all_reduce(ok, zs::ReduceOp::kMin, "zs.test.mounted")->wait();
  if (ok.item<int64_t>() == 0) {
    for (const auto& at : mounts) ::umount2(at.c_str(), MNT_DETACH);
    GTEST_SKIP() << "rank 1 cannot mount a 128 KiB tmpfs: needs root with CAP_SYS_ADMIN";
  }
  const auto [err, grad_err] = wrap_errors_on(drive);
  const std::string init_err = error_text_of<zs::IoError>([&] {
    zs_test::GptConfig big = zs_test::trainer_gpt_config();
    big.dim = 64, big.layers = 4;
    zs::ShardedInit init(zs::test::session(), offloaded(zs::OffloadTarget::kNvme, drive));
    zs_test::Gpt model(big);
  });
  for (const auto& at : mounts) ::umount2(at.c_str(), MNT_DETACH);
  // Rank 1's folder, as every rank names it (TempDir's folders are per rank).
  const std::string rank1_drive = zs::test::RankDir::path_on("offload_params_too_small_on_one", 1) + "/drive";
  const std::string rank1_params = rank1_drive + "/zeroshard-params-rank1/";
  EXPECT_TRUE(contains(err, "storing the parameter shards of unit '")) << err;
  EXPECT_TRUE(contains(err, "failed on rank(s) 1: ")) << err;
  EXPECT_TRUE(contains(err, (zs::test::rank() == 1 ? "" : "rank 1: ") + std::string("cannot reserve "))) << err;
  EXPECT_TRUE(contains(err, rank1_params)) << err;
  EXPECT_TRUE(contains(err, "too small for the parameter shards")) << err;
  EXPECT_TRUE(contains(grad_err, "reserving the gradient shards' store failed on rank(s) 1: ")) << grad_err;
  EXPECT_TRUE(contains(grad_err, rank1_drive + "/zeroshard-grads-rank1/")) << grad_err;
  EXPECT_TRUE(contains(grad_err, "too small for the gradient shards")) << grad_err;
  EXPECT_TRUE(contains(init_err, "storing the parameter shards of unit '")) << init_err;
  EXPECT_TRUE(contains(init_err, "failed on rank(s) 1: ")) << init_err;
  EXPECT_TRUE(contains(init_err, rank1_params)) << init_err;
}

// (A config asking for parameter offload without an offloaded optimizer is refused by validation:
// tests/config/test_config_rules.cpp.)
TEST(OffloadParams, UsageErrors) {
  // An engine with offloaded shards cannot be stepped by a device-state optimizer.
  TempDir dir("errors");
  std::string err;
  {
    Trainer t(offloaded(zs::OffloadTarget::kNvme, dir.path));
    auto dev = zs::make_optimizer(adamw_config());
    t.forward_backward(0);
    err = error_text_of<zs::UsageError>([&] { t.engine->step(*dev); });
    EXPECT_TRUE(contains(err, "cannot step offloaded parameter or gradient shards: step them with an offloaded "
                              "optimizer (make_engine_optimizer with OffloadOptions.target = CPU or NVME)"))
        << err;
    // param_shards() hands out no values: a step that bypasses the engine is refused by name.
    zs::OffloadedOptimizer opt(adamw_config(), optimizer_options(zs::OffloadTarget::kCpu, dir.path), zs::test::rank());
    err = error_text_of<zs::UsageError>([&] { opt.step(t.engine->param_shards()); });
    EXPECT_TRUE(contains(err, "engine.step(optimizer)")) << err;
  }
  // An optimizer made for offloaded parameters, stepped over an engine that keeps them resident.
  Trainer t;
  zs::OffloadedOptimizer opt(adamw_config(), optimizer_options(zs::OffloadTarget::kCpu, dir.path), zs::test::rank());
  t.forward_backward(0);
  err = error_text_of<zs::UsageError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, " was made for offloaded parameter shards (OffloadOptions.params = CPU or NVME), but "
                            "this engine keeps them on the device (ShardingOptions.offload_params.target = DEVICE): "
                            "build both from the same RunOptions (resolve(), run.sharding and run.offload)"))
      << err;
  // A store keeps one or two generations of each shard.
  zs::StoreOptions three = offloaded(zs::OffloadTarget::kNvme, dir.path).offload_params;
  three.generations = 3;
  err = error_text_of<zs::UsageError>([&] { zs::ShardStore store(three, zs::test::rank(), nullptr); });
  EXPECT_TRUE(contains(err, "StoreOptions.generations = 3 must be 1 or 2")) << err;
}
