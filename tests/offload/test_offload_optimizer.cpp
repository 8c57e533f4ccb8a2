// SPDX-License-Identifier: Apache-2.0
// The offloaded optimizer (offload.optimizer = CPU / NVME) inside the sharding engine: training a
// GPT with its optimizer state in host memory or streamed through files must give the same
// parameters, bit for bit, as the device-resident AdamW and SGD; plus the files' life cycle, bad paths,
// disk-full and I/O faults injected through a wrapped I/O engine (the step fails, the training
// state is as before, a retry gives the uninterrupted result), and corrupted or truncated state
// files (checksum / short-read errors naming the file). Run at 1 and 2 ranks.

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "common/test_util.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/base/error.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
namespace fs = std::filesystem;

namespace {

// A directory per test and rank under the build tree (not /tmp: tmpfs may refuse O_DIRECT, which
// has its own test), removed at the end.
struct TempDir : zs::test::RankDir {
  explicit TempDir(const std::string& name) : RankDir("offload_test_" + name) {}
};

using Trainer = zs_test::GptTrainer;
using zs_test::max_diff;

zs::OptimizerOptions adamw_config() { return zs_test::trainer_adamw_options(); }

// Shard snapshot of this rank (no collective), to check that a failed step changed nothing.
std::vector<at::Tensor> shard_values(zs::ShardingEngine& e) {
  std::vector<at::Tensor> out;
  for (auto& s : e.param_shards()) out.push_back(s.param.clone());
  return out;
}

bool same_shards(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].equal(b[i])) return false;
  }
  return true;
}

zs::OffloadOptions nvme_options(const std::string& dir, int64_t block = 4096, int buffers = 3) {
  zs::OffloadOptions o;
  o.target = zs::OffloadTarget::kNvme;
  o.nvme_path = dir;
  o.block_size = block;  // 1024 elements per chunk: several chunks and a partial last one per shard
  o.buffer_count = buffers;
  o.queue_depth = 4;
  return o;
}

// SGD as the trainer's AdamW config, with momentum (0: no state) and Nesterov.
zs::OptimizerOptions sgd_config(double momentum, bool nesterov) {
  zs::OptimizerOptions c = adamw_config();
  c.type = zs::OptimizerOptions::Type::kSgd;
  c.lr = 0.05;
  c.weight_decay = 0.01;
  c.momentum = momentum;
  c.nesterov = nesterov;
  return c;
}

std::map<std::string, at::Tensor> reference_after(int steps, const zs::OptimizerOptions& cfg = adamw_config()) {
  Trainer t;
  auto opt = zs::make_optimizer(cfg);
  t.train(*opt, 0, steps);
  return t.params();
}

// Wraps an engine; fails writes with `write_errno` once `fail_writes` is set, or reads with EIO.
class FaultyIo : public zs::IoEngine {
 public:
  explicit FaultyIo(std::shared_ptr<zs::IoEngine> inner) : inner_(std::move(inner)) {}
  Handle submit_read(zs::AioFile& f, void* buf, int64_t bytes, int64_t offset) override {
    if (fail_reads) ZS_THROW(zs::IoError, "read of '", f.path(), "' at offset ", offset, " failed: Input/output error (injected)");
    return inner_->submit_read(f, buf, bytes, offset);
  }
  Handle submit_write(zs::AioFile& f, const void* buf, int64_t bytes, int64_t offset) override {
    if (fail_writes && writes_before_failure-- <= 0) {
      ZS_THROW(zs::IoError, "write of '", f.path(), "' at offset ", offset,
               " failed: disk full: No space left on device (injected)");
    }
    return inner_->submit_write(f, buf, bytes, offset);
  }
  void wait(Handle h) override { inner_->wait(h); }
  void wait_all() override { inner_->wait_all(); }
  zs::IoBackend backend() const override { return inner_->backend(); }
  const zs::IoOptions& options() const override { return inner_->options(); }
  bool fail_writes = false;
  int writes_before_failure = 0;
  bool fail_reads = false;

 private:
  std::shared_ptr<zs::IoEngine> inner_;
};

// A FaultyIo over the I/O engine `o` would build.
std::shared_ptr<FaultyIo> faulty_io(const zs::OffloadOptions& o) {
  zs::IoOptions io_opts;
  io_opts.queue_depth = o.queue_depth;
  io_opts.block_size = o.block_size;
  return std::make_shared<FaultyIo>(zs::make_io_engine(io_opts));
}

using zs::test::contains;

}  // namespace

TEST(OffloadedOptimizer, CpuStateEqualsDeviceStateBitwise) {
  const auto ref = reference_after(6);
  Trainer t;
  zs::OffloadOptions o;
  o.target = zs::OffloadTarget::kCpu;
  o.block_size = 4096;
  zs::OffloadedOptimizer opt(adamw_config(), o, zs::test::rank(), &t.engine->memory());
  t.train(opt, 0, 6);
  EXPECT_EQ(max_diff(t.params(), ref), 0.0);
  // Moments live on the host (offloaded), none on the device.
  EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kOptimizerState), 0);
  EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kOffloadHost), 2 * 4 * t.engine->num_padded_trainable_params() /
                                                                            t.engine->shard_group_size());
}

TEST(OffloadedOptimizer, NvmeStateEqualsDeviceStateBitwise) {
  const auto ref = reference_after(6);
  for (auto backend : {zs::IoBackend::kAuto, zs::IoBackend::kThreads}) {
    for (int buffers : {2, 4}) {
      TempDir dir("equal");
      Trainer t;
      auto o = nvme_options(dir.path, 4096, buffers);
      o.io_backend = backend;
      zs::OffloadedOptimizer opt(adamw_config(), o, zs::test::rank(), &t.engine->memory());
      t.train(opt, 0, 6);
      EXPECT_EQ(max_diff(t.params(), ref), 0.0) << zs::to_string(backend) << ", " << buffers << " buffers";
      const auto io = opt.io_stats();
      EXPECT_GT(io.bytes_read, 0);
      EXPECT_GT(io.bytes_written, 0);
      EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kOptimizerState), 0);
      EXPECT_GT(t.engine->memory().current(zs::MemCategory::kNvme), 0);
      EXPECT_GT(t.engine->memory().current(zs::MemCategory::kPinnedHost), 0);
      if (zs::test::rank() == 0) std::printf("  %s\n", opt.describe().c_str());
    }
  }
}

// A shard's records are as few and as even as the block size allows, rounded up to 4 KiB per array:
// a step moves the state it needs plus at most 4 KiB per record and array, not a block of padding.
// 5000 elements in blocks of 4096: two records; [master | m | v] is 60,000 bytes, whole blocks
// would be 98,304.
TEST(OffloadedOptimizer, RecordsCarryNoBlockOfPadding) {
  TempDir dir("records");
  zs::OffloadedOptimizer opt(adamw_config(), nvme_options(dir.path, 16384), zs::test::rank());
  torch::manual_seed(5);
  std::vector<zs::ParamShard> shards{{at::randn({5000}), at::randn({5000}), "w", {}, false}};
  opt.step(shards);
  const auto before = opt.io_stats();
  opt.step(shards);
  const auto after = opt.io_stats();
  const int64_t needed = 3 * 4 * 5000, padding = 2 * 3 * 4096;
  for (int64_t moved : {after.bytes_read - before.bytes_read, after.bytes_written - before.bytes_written}) {
    EXPECT_GE(moved, needed);
    EXPECT_LE(moved, needed + padding);
  }
}

TEST(OffloadedOptimizer, FilesAreCreatedLockedAndRemoved) {
  TempDir dir("files");
  const std::string rank_dir = dir.path + "/zeroshard-rank" + std::to_string(zs::test::rank());
  // A state file an earlier (crashed) run left behind is removed, not read.
  fs::create_directories(rank_dir);
  { std::FILE* f = std::fopen((rank_dir + "/7-old.state.0").c_str(), "w"); std::fputs("stale", f); std::fclose(f); }
  {
    Trainer t;
    zs::OffloadedOptimizer opt(adamw_config(), nvme_options(dir.path), zs::test::rank());
    EXPECT_EQ(opt.rank_dir(), rank_dir);
    EXPECT_FALSE(fs::exists(rank_dir + "/7-old.state.0"));
    t.train(opt, 0, 1);
    int state_files = 0;
    for (const auto& e : fs::directory_iterator(rank_dir)) state_files += contains(e.path().string(), ".state.");
    EXPECT_EQ(state_files, 2 * static_cast<int>(t.engine->param_shards().size()));
    // A second optimizer on the same directory is refused while the first holds it.
    const std::string err = error_text_of<zs::IoError>(
        [&] { zs::OffloadedOptimizer second(adamw_config(), nvme_options(dir.path), zs::test::rank()); });
    EXPECT_TRUE(contains(err, "in use by another process")) << err;
  }
  EXPECT_FALSE(fs::exists(rank_dir)) << "the rank directory should be removed with the optimizer";
}

TEST(OffloadedOptimizer, BadPathsFailAtConstruction) {
  const std::string missing = (fs::current_path() / "no_such_offload_dir").string();
  std::string err = error_text_of<zs::IoError>(
      [&] { zs::OffloadedOptimizer o(adamw_config(), nvme_options(missing), zs::test::rank()); });
  EXPECT_TRUE(contains(err, "offload.nvme_path '" + missing + "'")) << err;
  EXPECT_TRUE(contains(err, "No such file")) << err;
  // /proc: a directory nobody can create files in, even root.
  err = error_text_of<zs::IoError>([&] { zs::OffloadedOptimizer o(adamw_config(), nvme_options("/proc"), zs::test::rank()); });
  EXPECT_TRUE(contains(err, "/proc")) << err;
  // A file, not a directory.
  TempDir dir("notdir");
  const std::string file = dir.path + "/plain";
  { std::FILE* f = std::fopen(file.c_str(), "w"); std::fclose(f); }
  err = error_text_of<zs::IoError>([&] { zs::OffloadedOptimizer o(adamw_config(), nvme_options(file), zs::test::rank()); });
  EXPECT_TRUE(contains(err, "is not a directory")) << err;
}

// (The config's offload rules, e.g. NVME without nvme_path: tests/config/test_config_rules.cpp.)
TEST(OffloadedOptimizer, UsageErrors) {
  // OptimizerOptions are checked as make_optimizer() checks them, SGD's fields too.
  auto sgd = sgd_config(-0.5, false);
  zs::OffloadOptions o;
  std::string err = error_text_of<zs::UsageError>([&] { zs::OffloadedOptimizer opt(sgd, o, 0); });
  EXPECT_TRUE(contains(err, "OptimizerOptions.momentum = -0.5")) << err;
  auto adam_momentum = adamw_config();
  adam_momentum.momentum = 0.9;
  err = error_text_of<zs::UsageError>([&] { zs::OffloadedOptimizer opt(adam_momentum, o, 0); });
  EXPECT_TRUE(contains(err, "apply only to type SGD")) << err;
  // OffloadOptions out of what the optimizer can do: named by field.
  zs::OffloadOptions three = o;
  three.target = zs::OffloadTarget::kCpu;
  three.nvme_generations = 3;
  err = error_text_of<zs::UsageError>([&] { zs::OffloadedOptimizer opt(adamw_config(), three, 0); });
  EXPECT_TRUE(contains(err, "OffloadOptions.nvme_generations = 3 must be 1 or 2")) << err;
  zs::OffloadOptions device = o;
  device.target = zs::OffloadTarget::kDevice;
  err = error_text_of<zs::UsageError>([&] { zs::OffloadedOptimizer opt(adamw_config(), device, 0); });
  EXPECT_TRUE(contains(err, "OffloadedOptimizer needs OffloadOptions.target = CPU or NVME, got DEVICE")) << err;
  // State of the wrong optimizer (Adam's two moments into SGD) is refused, naming what fits.
  zs::OffloadedOptimizer sgd_opt(sgd_config(0.9, false), o, 0);
  std::vector<zs::ShardOptimizerState> adam_state(1);
  adam_state[0].tensors = {at::zeros({4}), at::zeros({4})};
  err = error_text_of<zs::UsageError>([&] { sgd_opt.import_state(adam_state, 1); });
  EXPECT_TRUE(contains(err, "position 0 has 2 state tensors; expected none or 1 (momentum_buffer)")) << err;
  // make_engine_optimizer: the offloaded optimizer for CPU / NVME, make_optimizer's for DEVICE.
  zs::OffloadOptions on_cpu;
  on_cpu.target = zs::OffloadTarget::kCpu;
  EXPECT_NE(zs::make_engine_optimizer(adamw_config(), on_cpu, 0)->describe().find("state=CPU"), std::string::npos);
  on_cpu.target = zs::OffloadTarget::kDevice;
  EXPECT_EQ(zs::make_engine_optimizer(adamw_config(), on_cpu, 0)->describe(),
            zs::make_optimizer(adamw_config())->describe());
}

// SGD (no momentum, momentum, Nesterov) with its state on the host and on NVMe trains exactly as
// the device-resident SGD, and its state moves between placements mid-run (export_state /
// import_state, what checkpoints use): the continued run equals the uninterrupted one.
TEST(OffloadedOptimizer, SgdOnHostAndNvmeEqualsDeviceSgdBitwise) {
  struct Case {
    double momentum;
    bool nesterov;
  };
  for (const Case& k : {Case{0, false}, Case{0.9, false}, Case{0.9, true}}) {
    SCOPED_TRACE("momentum " + std::to_string(k.momentum) + (k.nesterov ? ", nesterov" : ""));
    const auto cfg = sgd_config(k.momentum, k.nesterov);
    const auto ref = reference_after(6, cfg);
    const int64_t state_bytes = k.momentum != 0 ? 4 : 0;
    {
      Trainer t;
      zs::OffloadOptions o;
      o.target = zs::OffloadTarget::kCpu;
      zs::OffloadedOptimizer opt(cfg, o, zs::test::rank(), &t.engine->memory());
      t.train(opt, 0, 6);
      EXPECT_EQ(max_diff(t.params(), ref), 0.0) << "state on the host";
      EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kOptimizerState), 0);
      EXPECT_EQ(t.engine->memory().current(zs::MemCategory::kOffloadHost),
                state_bytes * t.engine->num_padded_trainable_params() / t.engine->shard_group_size());
      EXPECT_EQ(opt.state_names(), zs::make_optimizer(cfg)->state_names());
      EXPECT_NE(opt.describe().find("OffloadedSgd("), std::string::npos) << opt.describe();
    }
    {
      TempDir dir("sgd");
      Trainer t;
      zs::OffloadedOptimizer opt(cfg, nvme_options(dir.path), zs::test::rank(), &t.engine->memory());
      t.train(opt, 0, 6);
      EXPECT_EQ(max_diff(t.params(), ref), 0.0) << "state on NVMe";
      EXPECT_GT(t.engine->memory().current(zs::MemCategory::kNvme), 0);
    }
    {  // NVMe for 3 steps, then the device optimizer takes its state over
      TempDir dir("sgd_out");
      Trainer t;
      zs::OffloadedOptimizer opt(cfg, nvme_options(dir.path), zs::test::rank());
      t.train(opt, 0, 3);
      auto dev = zs::make_optimizer(cfg);
      dev->import_state(opt.export_state(), opt.steps());
      t.train(*dev, 3, 6);
      EXPECT_EQ(max_diff(t.params(), ref), 0.0) << "NVMe state continued on the device";
    }
    {  // the device optimizer for 3 steps, then NVMe takes its state over
      TempDir dir("sgd_in");
      Trainer t;
      auto dev = zs::make_optimizer(cfg);
      t.train(*dev, 0, 3);
      zs::OffloadedOptimizer opt(cfg, nvme_options(dir.path), zs::test::rank());
      opt.import_state(dev->export_state(), dev->steps());
      t.train(opt, 3, 6);
      EXPECT_EQ(max_diff(t.params(), ref), 0.0) << "device state continued on NVMe";
      EXPECT_EQ(opt.steps(), 6);
    }
  }
}

// A first SGD step that fails mid-way on NVMe (the momentum buffers were just written, as zeros,
// for every shard) rolls back like any other step: the retry and two more steps equal the
// uninterrupted run. (Whether the retry treats the buffer as new or continues its zeros cannot
// show in the numbers: with dampening 0, the only value the config allows, 0.9 * 0 + d = d.)
TEST(OffloadedOptimizer, SgdFailedFirstStepOnNvmeRollsBack) {
  const auto cfg = sgd_config(0.9, false);
  const auto ref = reference_after(3, cfg);
  TempDir dir("sgd_enospc");
  Trainer t;
  auto o = nvme_options(dir.path);
  auto faulty = faulty_io(o);
  zs::OffloadedOptimizer opt(cfg, o, zs::test::rank(), nullptr, faulty);
  t.forward_backward(0);
  const auto before = shard_values(*t.engine);
  faulty->fail_writes = true;
  // Past the initial records every shard writes at its first step, into the update's writes.
  int64_t records = 0;
  for (const auto& s : t.engine->param_shards()) records += (s.param.numel() + 1023) / 1024;
  faulty->writes_before_failure = static_cast<int>(records) + 2;
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "step 1 failed")) << err;
  EXPECT_TRUE(same_shards(before, shard_values(*t.engine))) << "a failed step changed the parameters";
  faulty->fail_writes = false;
  t.engine->step(opt);  // retry the first step
  t.engine->zero_grad();
  t.train(opt, 1, 3);
  EXPECT_EQ(max_diff(t.params(), ref), 0.0);
}

// Disk full in the middle of a step: the step fails with a clear error, the shards are as before
// the step, and retrying the step (the disk has room again) gives the uninterrupted result.
TEST(OffloadedOptimizer, DiskFullMidStepRollsBackAndRetrySucceeds) {
  const auto ref = reference_after(4);
  TempDir dir("enospc");
  Trainer t;
  auto o = nvme_options(dir.path);
  auto faulty = faulty_io(o);
  zs::OffloadedOptimizer opt(adamw_config(), o, zs::test::rank(), nullptr, faulty);
  t.train(opt, 0, 3);
  t.forward_backward(3);
  const auto before = shard_values(*t.engine);
  faulty->fail_writes = true;
  faulty->writes_before_failure = 5;  // fail in the middle of the step
  const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "disk full")) << err;
  EXPECT_TRUE(contains(err, "step 4 failed")) << err;
  EXPECT_TRUE(contains(err, "as before this step")) << err;
  EXPECT_TRUE(same_shards(before, shard_values(*t.engine))) << "a failed step changed the parameters";
  EXPECT_EQ(opt.steps(), 3);
  faulty->fail_writes = false;
  t.engine->step(opt);  // the gradients are still there: retry
  t.engine->zero_grad();
  EXPECT_EQ(max_diff(t.params(), ref), 0.0);
}

// offload.nvme_generations = 1: one state file per shard, updated in place. The same training, bit
// for bit, on half the disk.
TEST(OffloadedOptimizer, OneGenerationInPlaceEqualsTwoOnHalfTheDisk) {
  for (const auto& cfg : {adamw_config(), sgd_config(0.9, true)}) {
    const auto ref = reference_after(6, cfg);
    int64_t disk[3] = {0, 0, 0};
    for (int generations : {1, 2}) {
      TempDir dir("gen" + std::to_string(generations));
      Trainer t;
      auto o = nvme_options(dir.path);
      o.nvme_generations = generations;
      zs::OffloadedOptimizer opt(cfg, o, zs::test::rank(), &t.engine->memory());
      t.train(opt, 0, 6);
      EXPECT_EQ(max_diff(t.params(), ref), 0.0) << generations << " generation(s)";
      disk[generations] = opt.placement().nvme;
      int files = 0;
      for (const auto& e : fs::directory_iterator(opt.rank_dir())) files += contains(e.path().string(), ".state.");
      EXPECT_EQ(files, generations * static_cast<int>(t.engine->param_shards().size()));
    }
    EXPECT_GT(disk[1], 0);
    EXPECT_EQ(disk[2], 2 * disk[1]);
  }
}

// In place, a failed step cannot be undone: the error says so, and the optimizer refuses to step
// or to export (a checkpoint of a half-updated state) until training restarts from a checkpoint.
TEST(OffloadedOptimizer, OneGenerationFailedStepAsksForARestart) {
  TempDir dir("gen1_fail");
  Trainer t;
  auto o = nvme_options(dir.path);
  o.nvme_generations = 1;
  auto faulty = faulty_io(o);
  zs::OffloadedOptimizer opt(adamw_config(), o, zs::test::rank(), nullptr, faulty);
  t.train(opt, 0, 2);
  t.forward_backward(2);
  faulty->fail_writes = true;
  faulty->writes_before_failure = 3;
  std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "step 3 failed")) << err;
  EXPECT_TRUE(contains(err, "nvme_generations = 1")) << err;
  EXPECT_TRUE(contains(err, "restart from the last checkpoint")) << err;
  faulty->fail_writes = false;
  err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
  EXPECT_TRUE(contains(err, "an earlier step 3 failed")) << err;
  err = error_text_of<zs::IoError>([&] { (void)opt.export_state(); });
  EXPECT_TRUE(contains(err, "cannot export")) << err;
  t.engine->zero_grad();
}

// A state file changed or truncated behind the engine's back is detected before its data is used.
TEST(OffloadedOptimizer, CorruptedOrTruncatedStateFileIsNamed) {
  for (bool truncate : {false, true}) {
    TempDir dir(truncate ? "trunc" : "flip");
    Trainer t;
    zs::OffloadedOptimizer opt(adamw_config(), nvme_options(dir.path), zs::test::rank());
    t.train(opt, 0, 2);  // the initial state went to .0, step 1 to .1, step 2 to .0: current = 0
    const std::string victim = opt.rank_dir() + "/1-" + "h0.state.0";
    ASSERT_TRUE(fs::exists(victim)) << victim;
    if (truncate) {
      ASSERT_EQ(::truncate(victim.c_str(), 4096 + 100), 0);
    } else {
      const int fd = ::open(victim.c_str(), O_WRONLY);
      ASSERT_GE(fd, 0);
      const char junk = 0x5a;
      ASSERT_EQ(::pwrite(fd, &junk, 1, 12288 + 77), 1);  // inside chunk 1 (records of 12288 bytes)
      ::close(fd);
    }
    t.forward_backward(2);
    const auto before = shard_values(*t.engine);
    const std::string err = error_text_of<zs::IoError>([&] { t.engine->step(opt); });
    EXPECT_TRUE(contains(err, victim)) << err;
    if (truncate) {
      EXPECT_TRUE(contains(err, "shorter than expected") || contains(err, "truncated")) << err;
    } else {
      EXPECT_TRUE(contains(err, "chunk 1 at offset 12288")) << err;
      EXPECT_TRUE(contains(err, "CRC-32C")) << err;
    }
    // Rollback reads the same damaged file, so it cannot restore the unit: the error says so.
    EXPECT_TRUE(contains(err, "restart from the last checkpoint") || contains(err, "Restart from the last checkpoint"))
        << err;
    (void)before;
    t.engine->zero_grad();
  }
}
