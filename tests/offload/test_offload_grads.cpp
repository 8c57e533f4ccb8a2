// SPDX-License-Identifier: Apache-2.0
// Gradient offload (offload.grads = CPU / NVME, ZeRO-Infinity's gradient swapping): each unit's fp32
// gradient shard goes to a ShardStore as its reduction completes, and comes back only to be read
// (clipping, loss-scale unscaling, the optimizer step) or added to (accumulation over
// micro-batches). Training with them on NVMe or in host memory must give the same parameters, bit
// for bit, as with resident gradients, for AdamW and SGD, with the optimizer state on the host or
// on NVMe and the parameters resident or on NVMe too; a clip or unscale factor taken at the next
// load must equal the in-place multiply; between the backward pass and the step at most a shard or
// two of gradients are resident; a corrupted gradient file is named with its offset, before or
// during a step, and leaves the training state intact; a disk that fills up while a gradient is
// stored fails the backward naming the file, and the run goes on exactly after a reset. Run at 1
// and 2 ranks.

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "common/test_util.h"
#include "offload/offload_test_options.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/io/fault_io.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/optim/grad_scaler.h"
#include "zeroshard/store/shard_store.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
namespace fs = std::filesystem;

namespace {

// Under the build tree, one per rank.
struct TempDir : zs::test::RankDir {
  explicit TempDir(const std::string& name) : RankDir("offload_grads_" + name) {}
};

using Trainer = zs_test::GptTrainer;
using zs::test::contains;
using zs_test::max_diff;
using zs_test::offload_optimizer_options;

zs::OptimizerOptions adamw_config() { return zs_test::trainer_adamw_options(); }

zs::OptimizerOptions sgd_config() { return zs_test::trainer_sgd_options(); }

// Gradients at `grads`, parameters at `params` (the shared helper takes them the other way round).
zs::ShardingOptions offloaded(zs::OffloadTarget grads, zs::OffloadTarget params, const std::string& dir) {
  return zs_test::offload_placement(params, grads, dir);
}

std::string any_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no exception>";
}

// A trainable flat parameter whose gradient file spans at least two 4096-byte chunks (the last
// such one: the last the optimizer step reaches).
zs::FlatParam* large_trainable(zs::ShardingEngine& e) {
  zs::FlatParam* pick = nullptr;
  for (zs::FlatParam* f : zs::detail::flat_params(e)) {
    if (f->trainable() && f->shard_numel() * 4 > 4096 + 100) pick = f;
  }
  return pick;
}

// Flips one byte of `file` at `offset` (returns the original byte).
char flip_byte(const std::string& file, off_t offset) {
  const int fd = ::open(file.c_str(), O_RDWR);
  EXPECT_GE(fd, 0) << file;
  char saved = 0;
  EXPECT_EQ(::pread(fd, &saved, 1, offset), 1);
  const char junk = static_cast<char>(saved ^ 0x24);
  EXPECT_EQ(::pwrite(fd, &junk, 1, offset), 1);
  ::close(fd);
  return saved;
}

// After a backward: no gradient byte is resident, every trainable flat parameter's gradient is a
// placeholder on the meta device with its file on disk (NVME).
void expect_gradients_offloaded(zs::ShardingEngine& e, bool nvme, const std::string& what) {
  EXPECT_EQ(e.memory().current(zs::MemCategory::kGradShards), 0) << what;
  for (zs::FlatParam* f : zs::detail::flat_params(e)) {
    if (!f->trainable()) continue;
    ASSERT_TRUE(f->grad_shard().defined()) << what << ": " << f->name();
    EXPECT_TRUE(f->grad_shard().is_meta()) << what << ": " << f->name();
    if (nvme) EXPECT_TRUE(fs::exists(f->grad_file())) << f->grad_file();
  }
}

// One step of 3 micro-batches accumulated (each backward reduces and adds into the gradient
// shard), the loss scaled by a factor that is not a power of two, unscaled, clipped. The
// reference unscales through param_shards() (in place); offloaded gradients take the factors at
// their next load.
void accumulated_scaled_step(Trainer& t, zs::GradScaler& scaler, zs::ShardedOptimizer& opt, int step, bool by_shards) {
  for (int m = 0; m < 3; ++m) {
    torch::manual_seed(1000 + 31 * step + 7 * m + zs::test::rank());
    torch::Tensor x = torch::randint(t.config.vocab, {2, t.config.seq}, torch::kLong);
    torch::Tensor y = torch::randint(t.config.vocab, {2, t.config.seq}, torch::kLong);
    torch::Tensor loss = t.engine->forward(
        [&] { return torch::cross_entropy_loss(t.model->forward(x).view({-1, t.config.vocab}), y.view({-1})); });
    scaler.scale(loss / 3).backward();
  }
  const bool finite = by_shards ? scaler.unscale_and_check(t.engine->param_shards()) : scaler.unscale_and_check(t.engine->gradients());
  ASSERT_TRUE(finite);
  t.engine->clip_grad_norm(0.5);
  t.engine->step(opt);
  scaler.update();
  t.engine->zero_grad();
}

zs::GradScaler static_scaler() {
  zs::LossScaleOptions o;
  o.mode = zs::LossScaleMode::kStatic;
  o.initial_scale = 1000;  // not a power of two: unscaling rounds
  return zs::GradScaler(o, /*fp16_in_use=*/false, zs::test::session().world());
}

}  // namespace

// The reference: the same optimizer and parameter placement with resident gradients.
TEST(OffloadGrads, NvmeGradsTrainBitwiseAsResident) {
  for (auto opt_where : {zs::OffloadTarget::kCpu, zs::OffloadTarget::kNvme}) {
    for (auto params : {zs::OffloadTarget::kDevice, zs::OffloadTarget::kNvme}) {
      for (bool sgd : {false, true}) {
        const auto cfg = sgd ? sgd_config() : adamw_config();
        const std::string what = std::string(sgd ? "SGD" : "AdamW") + ", optimizer state on " +
                                 zs::to_string(opt_where) + ", parameters on " + zs::to_string(params);
        TempDir ref_dir("ref");
        Trainer ref(offloaded(zs::OffloadTarget::kDevice, params, ref_dir.path));
        zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(opt_where, params, ref_dir.path), zs::test::rank());
        ref.train(ref_opt, 0, 4);
        TempDir dir("equal");
        Trainer t(offloaded(zs::OffloadTarget::kNvme, params, dir.path));
        ASSERT_NE(t.engine->grad_store(), nullptr);
        zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(opt_where, params, dir.path), zs::test::rank());
        t.train(opt, 0, 3);
        t.forward_backward(3);  // clipped: norms kept from the writes, nothing read or written
        expect_gradients_offloaded(*t.engine, true, what);
        t.engine->step(opt);
        t.engine->zero_grad();
        EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0) << what;
        EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kGradShards), 0) << what;
        const zs::ShardStore::IoStats io = t.engine->grad_store()->io_stats();
        EXPECT_GT(io.bytes_read, 0) << what;
        EXPECT_GT(io.bytes_written, 0) << what;
        // Written once per backward (no micro-batch accumulation here), read once, by the step:
        // clipping takes each norm as it was written.
        EXPECT_EQ(io.bytes_read, io.bytes_written) << what;
      }
    }
  }
}

// offload.grads = CPU with everything else in host memory: on a CPU run the store keeps the
// gradient tensor itself; the training is that of resident gradients.
TEST(OffloadGrads, CpuGradsTrainBitwiseAsResident) {
  for (auto params : {zs::OffloadTarget::kDevice, zs::OffloadTarget::kCpu}) {
    Trainer ref(offloaded(zs::OffloadTarget::kDevice, params, ""));
    zs::OffloadedOptimizer ref_opt(adamw_config(), offload_optimizer_options(zs::OffloadTarget::kCpu, params, ""),
                                   zs::test::rank());
    ref.train(ref_opt, 0, 4);
    Trainer t(offloaded(zs::OffloadTarget::kCpu, params, ""));
    zs::OffloadedOptimizer opt(adamw_config(), offload_optimizer_options(zs::OffloadTarget::kCpu, params, ""),
                               zs::test::rank());
    t.train(opt, 0, 3);
    t.forward_backward(3);
    expect_gradients_offloaded(*t.engine, false, "CPU");
    t.engine->step(opt);
    t.engine->zero_grad();
    EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0) << zs::to_string(params);
    EXPECT_EQ(t.engine->grad_store()->bytes_on_disk(), 0);
    EXPECT_GT(t.engine->grad_store()->bytes_in_host(), 0);
  }
}

// Micro-batch accumulation (load, add, store again), loss scaling by 1000 and clipping: the factors
// taken at the next load equal the in-place multiplies of resident gradients, bit for bit. And
// the shard-list overload of unscale_and_check refuses offloaded gradients by name.
TEST(OffloadGrads, AccumulationUnscaleAndClipBitwiseAsResident) {
  const auto cfg = adamw_config();
  TempDir ref_dir("scaled_ref");
  Trainer ref(offloaded(zs::OffloadTarget::kDevice, zs::OffloadTarget::kDevice, ref_dir.path));
  zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice,
                                                        ref_dir.path),
                                 zs::test::rank());
  zs::GradScaler ref_scaler = static_scaler();
  for (int s = 0; s < 3; ++s) accumulated_scaled_step(ref, ref_scaler, ref_opt, s, /*by_shards=*/true);

  TempDir dir("scaled");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path));
  zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path),
                             zs::test::rank());
  zs::GradScaler scaler = static_scaler();
  for (int s = 0; s < 3; ++s) accumulated_scaled_step(t, scaler, opt, s, /*by_shards=*/false);
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
  // 3 micro-batches: the first stores, the next two load, add and store again.
  const zs::ShardStore::IoStats io = t.engine->grad_store()->io_stats();
  EXPECT_GT(io.bytes_written, 0);

  t.forward_backward(3);
  zs::GradScaler other = static_scaler();
  const std::string err = error_text_of<zs::UsageError>([&] { other.unscale_and_check(t.engine->param_shards()); });
  EXPECT_TRUE(contains(err, "is offloaded (offload.grads): call unscale_and_check(engine.gradients())")) << err;
}

// Between the backward pass and the step at most the gradient being added to or read and the one
// read ahead are resident: with 11 units the peak stays at two shards, well under the total.
TEST(OffloadGrads, FewGradientShardsResidentAtOnce) {
  TempDir dir("peak");
  zs_test::GptConfig c = zs_test::trainer_gpt_config();
  c.layers = 10;
  Trainer t(offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path), 11, c);
  zs::OffloadedOptimizer opt(adamw_config(),
                             offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path),
                             zs::test::rank());
  t.train(opt, 0, 3);
  int64_t total = 0, largest = 0;
  for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) {
    if (!f->trainable()) continue;
    total += 4 * f->shard_numel();
    largest = std::max<int64_t>(largest, 4 * f->shard_numel());
  }
  const int64_t peak = t.engine->memory().peak(zs::MemCategory::kGradShards);
  if (zs::test::rank() == 0) {
    std::printf("  resident gradient peak %lld of %lld bytes (largest shard %lld), on disk %lld\n",
                static_cast<long long>(peak), static_cast<long long>(total), static_cast<long long>(largest),
                static_cast<long long>(t.engine->grad_store()->bytes_on_disk()));
  }
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, 2 * largest) << "more than two gradient shards were resident at once";
  EXPECT_LT(peak, total / 2);
  EXPECT_GE(t.engine->grad_store()->bytes_on_disk(), total);
}

// Clipping takes a stored gradient's squared norm as it was written: not a byte read, the same norm
// bit for bit as with resident gradients, gradients accumulated over micro-batches included (the
// norm of the sum). A clip after a factor was recorded (here a second clip) reads them back, and
// still agrees.
TEST(OffloadGrads, ClippingReadsNoStoredGradient) {
  const auto cfg = adamw_config();
  Trainer ref;
  zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                                 zs::test::rank());
  TempDir dir("clip_norms");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice, dir.path));
  zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                             zs::test::rank());
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    for (Trainer* tr : {&ref, &t}) {
      for (int m = 0; m < 2; ++m) {
        torch::manual_seed(2000 + 31 * step + 7 * m + zs::test::rank());
        torch::Tensor x = torch::randint(tr->config.vocab, {2, tr->config.seq}, torch::kLong);
        torch::Tensor y = torch::randint(tr->config.vocab, {2, tr->config.seq}, torch::kLong);
        torch::Tensor loss = tr->engine->forward(
            [&] { return torch::cross_entropy_loss(tr->model->forward(x).view({-1, tr->config.vocab}), y.view({-1})); });
        (loss / 2).backward();
      }
    }
    const zs::ShardStore& store = *t.engine->grad_store();
    const int64_t before = store.io_stats().bytes_read;
    const double ref_norm = ref.engine->clip_grad_norm(0.5);
    const double norm = t.engine->clip_grad_norm(0.5);
    EXPECT_EQ(store.io_stats().bytes_read, before) << "clipping read stored gradients";
    EXPECT_GT(norm, 0.0);
    EXPECT_EQ(norm, ref_norm);
    const double again_ref = ref.engine->clip_grad_norm(0.5);
    const double again = t.engine->clip_grad_norm(0.5);
    EXPECT_GT(store.io_stats().bytes_read, before) << "a clip after a recorded factor must read the gradients";
    EXPECT_EQ(again, again_ref);
    ref.engine->step(ref_opt);
    t.engine->step(opt);
    ref.engine->zero_grad();
    t.engine->zero_grad();
  }
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
}

// A gradient file changed behind the engine's back, found by the clip before the step: named with
// its chunk and offset; nothing of the training state changed, so the step is redone from a new
// backward and the run equals the uninterrupted one.
TEST(OffloadGrads, CorruptedGradientFileBeforeTheStepIsNamed) {
  const auto cfg = adamw_config();
  TempDir ref_dir("corrupt_ref");
  Trainer ref;
  zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                                 zs::test::rank());
  ref.train(ref_opt, 0, 4);

  TempDir dir("corrupt");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice, dir.path));
  zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                             zs::test::rank());
  t.train(opt, 0, 2);
  zs::FlatParam* victim = large_trainable(*t.engine);
  ASSERT_NE(victim, nullptr);
  const std::string file = victim->grad_file();
  t.forward_backward(2);  // clipped once: the factor waits for the next load
  flip_byte(file, 4096 + 33);
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->clip_grad_norm(1.0); });
  EXPECT_TRUE(contains(err, file)) << err;
  EXPECT_TRUE(contains(err, "chunk 1 at offset 4096")) << err;
  EXPECT_TRUE(contains(err, "gradient shard of unit '" + victim->name() + "'")) << err;
  EXPECT_TRUE(contains(err, "CRC-32C")) << err;
  t.engine->zero_grad();
  t.train(opt, 2, 4);
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
}

// The same during an optimizer step with its state on NVMe (two generations): the step fails at
// that shard naming the file, rolls back the shards it updated, and the run redone from a new
// backward equals the uninterrupted one, with the parameters on NVMe as well.
TEST(OffloadGrads, CorruptedGradientFileDuringTheStepRollsBack) {
  const auto cfg = adamw_config();
  TempDir ref_dir("midstep_ref");
  Trainer ref;
  zs::OffloadedOptimizer ref_opt(
      cfg, offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice, ref_dir.path), zs::test::rank());
  ref.train(ref_opt, 0, 4);

  TempDir dir("midstep");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path));
  zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path),
                             zs::test::rank());
  t.train(opt, 0, 2);
  t.forward_backward(2);
  zs::FlatParam* victim = large_trainable(*t.engine);
  ASSERT_NE(victim, nullptr);
  flip_byte(victim->grad_file(), 7);
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "step 3 failed")) << err;
  EXPECT_TRUE(contains(err, victim->grad_file())) << err;
  EXPECT_TRUE(contains(err, "chunk 0 at offset 0")) << err;
  EXPECT_TRUE(contains(err, "as before this step")) << err;
  EXPECT_EQ(opt.steps(), 2);
  t.engine->zero_grad();
  t.train(opt, 2, 4);
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
}

// The disk fills up while a unit's gradient is stored: the backward fails naming the file; the
// gradient stays in memory until reset_after_error() drops this step's gradients, and the step
// redone once the disk has room equals the uninterrupted run.
TEST(OffloadGrads, DiskFullWhileStoringAGradientFailsTheBackward) {
  const auto cfg = adamw_config();
  Trainer ref;
  zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                                 zs::test::rank());
  ref.train(ref_opt, 0, 4);

  TempDir dir("enospc");
  zs::ShardingOptions so = offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice, dir.path);
  auto faulty = zs_test::faulty_test_io();
  so.offload_grads.io = faulty;
  Trainer t(so);
  zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                             zs::test::rank());
  t.train(opt, 0, 2);
  faulty->fail_writes_after_bytes(4096);  // the second gradient stored finds the disk full
  const std::string err = any_error_of([&] { t.forward_backward(2); });
  EXPECT_TRUE(contains(err, "disk full")) << err;
  EXPECT_TRUE(contains(err, ".grad")) << err;
  EXPECT_GT(t.engine->memory().current(zs::MemCategory::kGradShards), 0) << "the unstored gradient must stay resident";
  faulty->clear();
  t.engine->reset_after_error();
  EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kGradShards), 0);
  t.train(opt, 2, 4);
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
}

// Gradient I/O failing on one rank only: the write-behind checked at the end of backward, or
// clipping's reads of the stored gradients. Every rank raises the failing rank's error there, before
// the next collective (the others did their own I/O without a fault), and the step redone once the
// drive works equals the uninterrupted run.
TEST(OffloadGrads, GradientIoFailingOnOneRankFailsEveryRank) {
  ZS_REQUIRE_RANKS(2);
  const int victim = zs::test::world_size() - 1;
  const bool me_victim = zs::test::rank() == victim;
  const auto cfg = adamw_config();
  Trainer ref;
  zs::OffloadedOptimizer ref_opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                                 zs::test::rank());
  ref.train(ref_opt, 0, 4);
  for (bool in_clip : {false, true}) {
    SCOPED_TRACE(in_clip ? "clipping's reads" : "the backward's writes");
    TempDir dir(in_clip ? "one_rank_clip" : "one_rank_flush");
    zs::ShardingOptions so = offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice, dir.path);
    auto faulty = zs_test::faulty_test_io();
    so.offload_grads.io = faulty;
    Trainer t(so);
    zs::OffloadedOptimizer opt(cfg, offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                               zs::test::rank());
    t.train(opt, 0, 2);
    if (me_victim) {
      // Parameters stay on the device and the step's gradients start empty: the first gradient
      // read of the step is the second clip's.
      if (in_clip) {
        faulty->fail_reads();
      } else {
        faulty->fail_writes_after_bytes(0);
      }
    }
    // The first clip takes the norms kept from the writes; a second one reads the gradients back
    // (the first one's factor is recorded for them).
    const std::string err = error_text_of<zs::IoError>([&] {
      t.forward_backward(2);
      if (in_clip) t.engine->clip_grad_norm(1.0);
    });
    const std::string what = in_clip ? "reading the gradient shards for clip_grad_norm failed on rank(s) "
                                     : "writing the gradient shards behind the backward failed on rank(s) ";
    EXPECT_TRUE(contains(err, what + std::to_string(victim) + ": ")) << err;
    EXPECT_TRUE(contains(err, ".grad")) << err;
    if (me_victim) {
      EXPECT_GT(faulty->injected(), 0);
    } else {
      EXPECT_EQ(faulty->injected(), 0);
    }
    faulty->clear();
    t.engine->reset_after_error();
    t.train(opt, 2, 4);
    EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
  }
}

// The store's write-behind: a write that fails keeps the values in memory (loadable, bit for bit),
// flush() names the file once, and the next save retries; a write that lands is read back from the
// file. Files of a gradient store are <slot>-<unit>.grad under zeroshard-grads-rank<R>.
TEST(OffloadGrads, WriteBehindKeepsFailedValuesAndFlushNamesTheFile) {
  TempDir dir("store");
  zs::StoreOptions o;
  o.target = zs::OffloadTarget::kNvme;
  o.nvme_path = dir.path;
  o.block_size = 4096;
  auto faulty = zs_test::faulty_test_io();
  zs::MemoryStats mem;
  zs::ShardStore store(o, zs::test::rank(), &mem, faulty, zs::ShardStore::Kind::kGrads);
  const int slot = store.add("blocks.3", 3000);
  const std::string file = store.file(slot);
  EXPECT_TRUE(contains(file, "zeroshard-grads-rank" + std::to_string(zs::test::rank()))) << file;
  EXPECT_TRUE(contains(file, "-blocks.3.grad")) << file;
  const at::Tensor values = torch::randn({3000});
  faulty->fail_writes_after_bytes(0);
  store.save_async(slot, values);
  EXPECT_EQ(mem.current(zs::MemCategory::kGradShards), 3000 * 4) << "held until the write lands";
  const std::string err = error_text_of<zs::IoError>([&] { store.flush(); });
  EXPECT_TRUE(contains(err, "disk full")) << err;
  EXPECT_TRUE(contains(err, file)) << err;
  EXPECT_TRUE(contains(err, "stay in memory")) << err;
  store.flush();  // reported once
  EXPECT_TRUE(torch::equal(store.load(slot, at::kCPU), values));
  EXPECT_EQ(mem.current(zs::MemCategory::kGradShards), 3000 * 4) << "the only copy stays held";
  faulty->clear();
  const at::Tensor next = torch::randn({3000});
  store.save_async(slot, next);
  store.flush();
  EXPECT_EQ(mem.current(zs::MemCategory::kGradShards), 0);
  const int64_t read_before = store.io_stats().bytes_read;
  EXPECT_TRUE(torch::equal(store.load(slot, at::kCPU), next));
  EXPECT_GT(store.io_stats().bytes_read, read_before) << "a landed write is read back from the file";
}

// (A config asking for gradient offload without an offloaded optimizer or without nvme_path is
// refused by validation: tests/config/test_config_rules.cpp.)
TEST(OffloadGrads, UsageErrors) {
  std::string err;
  TempDir dir("errors");
  Trainer t(offloaded(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice, dir.path));
  t.forward_backward(0);
  // A device-state optimizer cannot step offloaded gradients.
  auto dev = zs::make_optimizer(adamw_config());
  err = error_text_of<zs::UsageError>([&] { t.engine->step(*dev); });
  EXPECT_TRUE(contains(err, "cannot step offloaded parameter or gradient shards")) << err;
  // param_shards() hands out placeholders: a step that bypasses the engine is refused by name.
  zs::OffloadedOptimizer opt(adamw_config(), offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, ""),
                             zs::test::rank());
  err = error_text_of<zs::UsageError>([&] { opt.step(t.engine->param_shards()); });
  EXPECT_TRUE(contains(err, "is offloaded (offload.grads)")) << err;
  EXPECT_TRUE(contains(err, "engine.step(optimizer)")) << err;
  t.engine->step(opt);  // through the engine it works
  EXPECT_EQ(opt.steps(), 1);
}
