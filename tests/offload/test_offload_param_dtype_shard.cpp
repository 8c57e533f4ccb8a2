// SPDX-License-Identifier: Apache-2.0
// offload.keep_param_dtype_shard: with the parameter shards offloaded (offload.params = CPU / NVME)
// and bf16 compute, each shard also stays resident in bf16, the gathers read that copy and never the
// store, and the fp32 master stays in the store, where the optimizer step updates it (ZeRO-Offload's
// layout: the device holds 2 bytes per parameter). The training must be bit for bit that of
// resident fp32 shards with the same param_dtype (the gathered values are the cast master either
// way), for AdamW and SGD, optimizer state on the host or on NVMe, FULL_SHARD and SHARD_GRAD_OP; a
// disk that fills up during the step loses nothing; a checkpoint resumes exactly into it (the copy
// follows loaded values); a ShardedInit builds it; bad settings are refused by name. Run at 1 and 2
// ranks.

#include <string>

#include "common/test_util.h"
#include "offload/offload_test_options.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/memory_stats.h"
#include "zeroshard/io/fault_io.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/store/shard_store.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;

namespace {

using Trainer = zs_test::GptTrainer;
using zs::test::contains;
using zs_test::max_diff;

// Shards at `params` (NVMe files under `dir`), bf16 compute, with or without the resident copy.
zs::ShardingOptions bf16_offloaded(zs::OffloadTarget params, const std::string& dir, bool keep_copy,
                                   zs::ShardingStrategy strategy = zs::ShardingStrategy::kFullShard) {
  zs::ShardingOptions o = zs_test::offload_placement(params, zs::OffloadTarget::kDevice, dir);
  o.strategy = strategy;
  o.param_dtype = c10::kBFloat16;
  o.keep_param_dtype_shard = keep_copy;
  return o;
}

zs::ShardingOptions bf16_resident(zs::ShardingStrategy strategy = zs::ShardingStrategy::kFullShard) {
  zs::ShardingOptions o;
  o.strategy = strategy;
  o.param_dtype = c10::kBFloat16;
  return o;
}

int64_t param_store_reads(zs::ShardingEngine& e) { return e.param_store()->io_stats().bytes_read; }

// Every flat parameter holds its bf16 copy and nothing else of its shard: the engine's count of
// resident shard bytes is 2 per shard element.
void expect_only_copies_resident(zs::ShardingEngine& e, const std::string& what) {
  int64_t copies = 0;
  for (zs::FlatParam* f : zs::detail::flat_params(e)) {
    EXPECT_TRUE(f->has_param_dtype_copy()) << f->name() << ", " << what;
    EXPECT_FALSE(f->shard_resident()) << f->name() << ", " << what;
    copies += 2 * f->shard_numel();
  }
  EXPECT_EQ(e.memory().current(zs::MemCategory::kShardedParams), copies) << what;
}

}  // namespace

TEST(ParamDtypeShard, TrainsBitwiseAsResidentShards) {
  for (auto opt_where : {zs::OffloadTarget::kCpu, zs::OffloadTarget::kNvme}) {
    for (bool sgd : {false, true}) {
      const auto cfg = sgd ? zs_test::trainer_sgd_options() : zs_test::trainer_adamw_options();
      for (auto strategy : {zs::ShardingStrategy::kFullShard, zs::ShardingStrategy::kShardGradOp}) {
        const std::string what = std::string(sgd ? "SGD" : "AdamW") + ", optimizer state on " +
                                 zs::to_string(opt_where) + ", strategy " + std::to_string(static_cast<int>(strategy));
        zs::test::RankDir ref_dir("pds_ref");
        Trainer ref(bf16_resident(strategy));
        zs::OffloadedOptimizer ref_opt(
            cfg, zs_test::offload_optimizer_options(opt_where, zs::OffloadTarget::kDevice, ref_dir.path),
            zs::test::rank());
        ref.train(ref_opt, 0, 5);

        zs::test::RankDir dir("pds_equal");
        Trainer t(bf16_offloaded(zs::OffloadTarget::kNvme, dir.path, /*keep_copy=*/true, strategy));
        zs::OffloadedOptimizer opt(
            cfg, zs_test::offload_optimizer_options(opt_where, zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
        expect_only_copies_resident(*t.engine, what + ", after wrap");
        t.train(opt, 0, 5);
        EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0) << what;
        expect_only_copies_resident(*t.engine, what + ", after 5 steps");
        // The step is the only reader or writer of the master: forward and backward read nothing.
        const int64_t before = param_store_reads(*t.engine);
        t.forward_backward(5);
        EXPECT_EQ(param_store_reads(*t.engine), before) << what << ": a gather read the store";
        EXPECT_GT(t.engine->param_store()->io_stats().bytes_written, 0) << what;
      }
    }
  }
}

// The control for the read count above: the same engine without the copy reads every shard from
// the store for every gather. And parameters in host memory (offload.params = CPU) with the copy
// train as resident shards too.
TEST(ParamDtypeShard, WithoutTheCopyGathersReadTheStoreAndCpuShardsKeepItToo) {
  zs::test::RankDir dir("pds_control");
  Trainer t(bf16_offloaded(zs::OffloadTarget::kNvme, dir.path, /*keep_copy=*/false));
  zs::OffloadedOptimizer opt(
      zs_test::trainer_adamw_options(),
      zs_test::offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kNvme, dir.path),
      zs::test::rank());
  t.train(opt, 0, 2);
  for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) EXPECT_FALSE(f->has_param_dtype_copy()) << f->name();
  const int64_t before = param_store_reads(*t.engine);
  t.forward_backward(2);
  int64_t shard_bytes = 0;
  for (zs::FlatParam* f : zs::detail::flat_params(*t.engine)) shard_bytes += 4 * f->shard_numel();
  EXPECT_GE(param_store_reads(*t.engine) - before, shard_bytes) << "every shard is read at least once";

  Trainer ref(bf16_resident());
  zs::OffloadOptions ro = zs_test::offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, "");
  zs::OffloadedOptimizer ref_opt(zs_test::trainer_adamw_options(), ro, zs::test::rank());
  ref.train(ref_opt, 0, 4);
  Trainer c(bf16_offloaded(zs::OffloadTarget::kCpu, "", /*keep_copy=*/true));
  ro.params = zs::OffloadTarget::kCpu;
  zs::OffloadedOptimizer c_opt(zs_test::trainer_adamw_options(), ro, zs::test::rank());
  c.train(c_opt, 0, 4);
  EXPECT_EQ(max_diff(c.params(), ref.params()), 0.0);
  for (zs::FlatParam* f : zs::detail::flat_params(*c.engine)) EXPECT_TRUE(f->has_param_dtype_copy()) << f->name();
}

// The disk fills up while the step writes masters back. State on NVMe: the step rolls back (the
// copies follow the restored masters), and the retry once the disk has room goes on exactly. State
// in host memory: the step is applied (the unwritten masters stay resident, their copies hold the
// new values), and the run goes on without repeating it. Both end equal to resident shards.
TEST(ParamDtypeShard, DiskFullDuringTheStepLosesNothing) {
  const auto cfg = zs_test::trainer_adamw_options();
  for (auto opt_where : {zs::OffloadTarget::kNvme, zs::OffloadTarget::kCpu}) {
    const std::string what = std::string("optimizer state on ") + zs::to_string(opt_where);
    zs::test::RankDir ref_dir("pds_enospc_ref");
    Trainer ref(bf16_resident());
    zs::OffloadedOptimizer ref_opt(
        cfg, zs_test::offload_optimizer_options(opt_where, zs::OffloadTarget::kDevice, ref_dir.path), zs::test::rank());
    ref.train(ref_opt, 0, 4);

    zs::test::RankDir dir("pds_enospc");
    zs::ShardingOptions so = bf16_offloaded(zs::OffloadTarget::kNvme, dir.path, true);
    auto faulty = zs_test::faulty_test_io();
    so.offload_params.io = faulty;
    Trainer t(so);
    zs::OffloadedOptimizer opt(
        cfg, zs_test::offload_optimizer_options(opt_where, zs::OffloadTarget::kNvme, dir.path), zs::test::rank());
    t.train(opt, 0, 2);
    t.forward_backward(2);
    faulty->fail_writes_after_bytes(4096);  // the second master written back finds the disk full
    const std::string err = zs::test::error_text_of<zs::IoError>([&] { t.engine->step(opt); });
    EXPECT_TRUE(contains(err, "disk full")) << what << ": " << err;
    EXPECT_GT(t.engine->memory().current(zs::MemCategory::kShardedParams), 0) << what;
    faulty->clear();
    if (opt_where == zs::OffloadTarget::kNvme) {
      EXPECT_TRUE(contains(err, "step 3 failed")) << err;
      EXPECT_EQ(opt.steps(), 2);
      t.engine->step(opt);  // the gradients are still there: retry
    } else {
      EXPECT_TRUE(contains(err, "offloaded optimizer step 3 was applied")) << err;
      EXPECT_EQ(opt.steps(), 3);
    }
    t.engine->zero_grad();
    t.train(opt, 3, 4);
    EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0) << what;
    expect_only_copies_resident(*t.engine, what);
  }
}

// Save with the copy, resume into a fresh engine built from other initial values: the loaded values
// reach the copies (else the forward would compute with the old ones), and the run equals training
// straight through.
TEST(ParamDtypeShard, ResumesFromCheckpointExactly) {
  const auto cfg = zs_test::trainer_adamw_options();
  const auto nvme = zs::OffloadTarget::kNvme;
  zs::test::RankDir ref_dir("pds_resume_ref");
  Trainer ref(bf16_resident());
  zs::OffloadedOptimizer ref_opt(cfg, zs_test::offload_optimizer_options(nvme, zs::OffloadTarget::kDevice, ref_dir.path),
                                 zs::test::rank());
  ref.train(ref_opt, 0, 6);

  zs::test::SharedDir ckpt_dir("pds_resume_ckpt");
  zs::CheckpointOptions co;
  co.dir = ckpt_dir.path;
  {
    zs::test::RankDir dir("pds_resume_a");
    Trainer t(bf16_offloaded(nvme, dir.path, true));
    zs::OffloadedOptimizer opt(cfg, zs_test::offload_optimizer_options(nvme, nvme, dir.path), zs::test::rank());
    t.train(opt, 0, 3);
    zs::Checkpointer ckpt(*t.engine, co);
    zs::TrainingState st;
    st.step = 3;
    ckpt.save(opt, st);
    expect_only_copies_resident(*t.engine, "after save");
  }
  zs::test::RankDir dir("pds_resume_b");
  Trainer t(bf16_offloaded(nvme, dir.path, true), /*init_seed=*/99);
  zs::OffloadedOptimizer opt(cfg, zs_test::offload_optimizer_options(nvme, nvme, dir.path), zs::test::rank());
  zs::Checkpointer ckpt(*t.engine, co);
  EXPECT_EQ(ckpt.load(opt).step, 3);
  expect_only_copies_resident(*t.engine, "after load");
  t.train(opt, 3, 6);
  EXPECT_EQ(max_diff(t.params(), ref.params()), 0.0);
}

// Built under a ShardedInit, each unit's copy is made as its shard goes to the store; the engine
// adopting the units trains as resident shards do.
TEST(ParamDtypeShard, ShardedInitKeepsTheCopy) {
  auto& s = zs::test::session();
  const zs_test::GptConfig c = zs_test::trainer_gpt_config();
  zs::test::RankDir ref_dir("pds_init_ref");
  Trainer ref(bf16_resident());
  const auto nvme = zs::OffloadTarget::kNvme;
  zs::OffloadedOptimizer ref_opt(zs_test::trainer_adamw_options(),
                                 zs_test::offload_optimizer_options(nvme, zs::OffloadTarget::kDevice, ref_dir.path),
                                 s.rank());
  ref.train(ref_opt, 0, 3);

  zs::test::RankDir dir("pds_init");
  torch::manual_seed(11);  // the trainer's initial values
  zs::ShardedInit init(s, bf16_offloaded(nvme, dir.path, true));
  zs_test::Gpt model(c);
  init.stop();
  zs::ShardingEngine engine(init, model.ptr());
  engine.set_param_groups(zs_test::trainer_param_groups());
  expect_only_copies_resident(engine, "built under a ShardedInit");
  zs::OffloadedOptimizer opt(zs_test::trainer_adamw_options(), zs_test::offload_optimizer_options(nvme, nvme, dir.path),
                             s.rank());
  for (int step = 0; step < 3; ++step) {
    torch::manual_seed(1000 + 31 * step + s.rank());  // the trainer's batches
    torch::Tensor x = torch::randint(c.vocab, {3, c.seq}, torch::kLong);
    torch::Tensor y = torch::randint(c.vocab, {3, c.seq}, torch::kLong);
    engine.forward([&] { return torch::cross_entropy_loss(model->forward(x).view({-1, c.vocab}), y.view({-1})); })
        .backward();
    engine.clip_grad_norm(1.0);
    engine.step(opt);
    engine.zero_grad();
  }
  EXPECT_EQ(max_diff(engine.full_state_dict(), ref.params()), 0.0);
}

// (The config's rules for offload.keep_param_dtype_shard: tests/config/test_config_rules.cpp.)
TEST(ParamDtypeShard, UsageErrors) {
  // Options built in code: the engine refuses before it wraps anything.
  zs::ShardingOptions o = bf16_resident();
  o.keep_param_dtype_shard = true;
  const std::string err = zs::test::error_text_of<zs::UsageError>([&] { Trainer t(o); });
  EXPECT_TRUE(contains(err, "ShardingOptions: keep_param_dtype_shard keeps a param_dtype copy of offloaded shards; it "
                            "needs offload_params.target CPU or NVME (got DEVICE) and a param_dtype other than Float "
                            "(got BFloat16)"))
      << err;
}
