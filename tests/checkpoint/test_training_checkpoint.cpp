// SPDX-License-Identifier: Apache-2.0
// Training checkpoints (sharding/checkpoint.h): save -> load in a fresh engine resumes bit for bit
// (every strategy; optimizer state on the device, on the host and on NVMe), RNG and user entries
// come back, async save writes the same bytes as sync save, consolidated weights load into the
// plain model with torch::load and give the sharded model's outputs, and every kind of bad or
// damaged checkpoint is a CheckpointError naming the file, while the previous checkpoint stays
// loadable. Run at 1, 2 and 4 ranks.

#include <unistd.h>

#include <torch/serialize.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "common/test_util.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/io/fault_io.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;
using Strategy = zs::ShardingStrategy;
using zs_test::GptTrainer;
using zs_test::max_diff;

namespace {

// A checkpoint root shared by all ranks (same path), recreated per test.
std::string fresh_root(const std::string& name) {
  const std::string root = (fs::current_path() / ("ckpt_test_" + name)).string();
  if (zs::test::rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  zs::test::world()->barrier("test.fresh_root")->wait();
  return root;
}

void barrier() { zs::test::world()->barrier("test.barrier")->wait(); }

zs::ShardingOptions strategy_options(Strategy s) {
  zs::ShardingOptions o;
  o.strategy = s;
  o.hybrid_group_size = zs::test::world_size() >= 2 ? 2 : 1;
  return o;
}

std::string error_of(const std::function<void()>& fn) { return zs::test::error_text_of<zs::CheckpointError>(fn); }
using zs::test::contains;

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Trains step `step` (steps [step - 1, step)) and saves it; returns the step directory.
std::string train_and_save(GptTrainer& t, zs::ShardedOptimizer& opt, zs::Checkpointer& ckpt, int step) {
  t.train(opt, step - 1, step);
  zs::TrainingState st;
  st.step = step;
  return ckpt.save(opt, st);
}

// Trains 0..3, saves, trains 3..6 (run A); a fresh engine with other initial weights loads and
// trains 3..6 (run B). Returns max |A - B| over the parameters.
double resume_difference(zs::ShardingOptions o, const std::function<std::unique_ptr<zs::ShardedOptimizer>()>& make_opt,
                         const std::string& root) {
  zs::CheckpointOptions co;
  co.dir = root;
  std::map<std::string, at::Tensor> a;
  double rng_after_save = 0;
  {
    GptTrainer t(o);
    auto opt = make_opt();
    zs::Checkpointer ckpt(*t.engine, co);
    t.train(*opt, 0, 3);
    zs::TrainingState st;
    st.step = 3;
    st.per_rank["loader"] = "rank" + std::to_string(zs::test::rank()) + "@3";
    st.global["epoch"] = "1";
    ckpt.save(*opt, st);
    rng_after_save = torch::rand({1}).item<double>();
    t.train(*opt, 3, 6);
    a = t.params();
  }
  GptTrainer t(o, /*init_seed=*/99);
  auto opt = make_opt();
  zs::Checkpointer ckpt(*t.engine, co);
  zs::TrainingState st = ckpt.load(*opt);
  EXPECT_EQ(st.step, 3);
  EXPECT_TRUE(st.rng_restored);
  EXPECT_FALSE(st.resharded);
  EXPECT_EQ(torch::rand({1}).item<double>(), rng_after_save) << "the RNG state was not restored";
  EXPECT_EQ(st.per_rank["loader"], "rank" + std::to_string(zs::test::rank()) + "@3");
  EXPECT_EQ(st.global["epoch"], "1");
  EXPECT_EQ(opt->steps(), 3);
  t.train(*opt, 3, 6);
  return max_diff(t.params(), a);
}

}  // namespace

TEST(TrainingCheckpoint, ResumeIsBitwiseForEveryStrategy) {
  for (auto s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard, Strategy::kHybridShard}) {
    const std::string root = fresh_root("resume");
    const double d = resume_difference(strategy_options(s), [] { return zs::make_optimizer(zs_test::trainer_adamw_options()); }, root);
    EXPECT_EQ(d, 0.0) << zs::to_string(s);
  }
}

TEST(TrainingCheckpoint, ResumeIsBitwiseWithOffloadedOptimizer) {
  for (auto target : {zs::OffloadTarget::kCpu, zs::OffloadTarget::kNvme}) {
    const std::string root = fresh_root("resume_offload");
    const std::string nvme = root + "/nvme";
    if (zs::test::rank() == 0) fs::create_directories(nvme);
    barrier();
    auto make = [&]() -> std::unique_ptr<zs::ShardedOptimizer> {
      zs::OffloadOptions o;
      o.target = target;
      o.nvme_path = nvme;
      o.block_size = 4096;
      return std::make_unique<zs::OffloadedOptimizer>(zs_test::trainer_adamw_options(), o, zs::test::rank());
    };
    EXPECT_EQ(resume_difference(strategy_options(Strategy::kFullShard), make, root + "/ckpt"), 0.0)
        << zs::to_string(target);
  }
}

TEST(TrainingCheckpoint, LayoutLatestAndRetention) {
  const std::string root = fresh_root("retention");
  GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::CheckpointOptions co;
  co.dir = root;
  co.keep_last = 2;
  zs::Checkpointer ckpt(*t.engine, co);
  for (int step = 1; step <= 4; ++step) {
    EXPECT_EQ(train_and_save(t, *opt, ckpt, step), root + "/" + zs::ckpt::step_dir_name(step));
  }
  barrier();
  const auto all = zs::ckpt::list_checkpoints(root);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].first, 3);
  EXPECT_EQ(all[1].first, 4);
  EXPECT_EQ(slurp(root + "/latest"), zs::ckpt::step_dir_name(4) + "\n");
  const auto m = zs::ckpt::read_manifest(all[1].second);
  EXPECT_EQ(m.world_size(), zs::test::world_size());
  EXPECT_EQ(m.rank_files_size(), zs::test::world_size());
  EXPECT_EQ(m.step(), 4);
  EXPECT_NE(zs::ckpt::describe_manifest(m).find("h0.qkv.weight"), std::string::npos);
  EXPECT_NE(zs::ckpt::verify_checkpoint(root).find("ok  rank-0.zsr"), std::string::npos);
}

TEST(TrainingCheckpoint, AsyncSaveWritesTheSameBytesAsSyncSave) {
  const std::string root = fresh_root("async");
  GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  t.train(*opt, 0, 2);
  zs::TrainingState st;
  st.step = 2;
  zs::CheckpointOptions sync_o, async_o;
  sync_o.dir = root + "/sync";
  async_o.dir = root + "/async";
  async_o.async_save = true;
  zs::Checkpointer sync_ckpt(*t.engine, sync_o), async_ckpt(*t.engine, async_o);
  // The RNG is part of the state: draw nothing between the two snapshots.
  sync_ckpt.save(*opt, st);
  async_ckpt.save(*opt, st);
  t.train(*opt, 2, 3);  // training goes on while the async save writes
  async_ckpt.wait();
  EXPECT_EQ(async_ckpt.last_durable_step(), 2);
  barrier();
  const std::string a = sync_o.dir + "/" + zs::ckpt::step_dir_name(2), b = async_o.dir + "/" + zs::ckpt::step_dir_name(2);
  for (int r = 0; r < zs::test::world_size(); ++r) {
    const std::string f = zs::ckpt::rank_file_name(r);
    EXPECT_EQ(slurp(a + "/" + f), slurp(b + "/" + f)) << f << " differs between sync and async save";
  }
  auto ma = zs::ckpt::read_manifest(a), mb = zs::ckpt::read_manifest(b);
  ma.clear_created_unix_s();
  mb.clear_created_unix_s();
  ma.clear_manifest_crc32c();  // covers the creation time too
  mb.clear_manifest_crc32c();
  EXPECT_EQ(ma.SerializeAsString(), mb.SerializeAsString());
}

TEST(TrainingCheckpoint, ConsolidatedWeightsLoadIntoThePlainModel) {
  const std::string root = fresh_root("consolidate");
  GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  t.train(*opt, 0, 3);
  zs::CheckpointOptions co;
  co.dir = root;
  zs::Checkpointer ckpt(*t.engine, co);
  zs::TrainingState st;
  st.step = 3;
  ckpt.save(*opt, st);
  torch::manual_seed(5);
  torch::Tensor x = torch::randint(t.config.vocab, {2, t.config.seq}, torch::kLong);
  torch::Tensor sharded_out = t.engine->forward([&] { return t.model->forward(x); }).detach();
  if (zs::test::rank() == 0) {
    const std::string out = root + "/full.pt";
    const auto stats = zs::ckpt::consolidate(root, out, at::kFloat);
    EXPECT_GT(stats.elements, 0);
    zs_test::Gpt plain(t.config);  // other initial weights until loaded
    torch::load(plain, out);
    torch::Tensor plain_out = plain->forward(x);
    EXPECT_LE((plain_out - sharded_out).abs().max().item<double>(), 1e-5);
    // Tied weights stay tied after loading.
    EXPECT_EQ(plain->wte->weight.data_ptr(), plain->named_parameters()["lm_head_weight"].data_ptr());
  }
  barrier();
}

TEST(TrainingCheckpoint, DamagedCheckpointsAreNamedErrors) {
  const std::string root = fresh_root("damaged");
  zs::CheckpointOptions co;
  co.dir = root;
  GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::Checkpointer ckpt(*t.engine, co);
  const std::string dir = train_and_save(t, *opt, ckpt, 1);
  const std::string victim = dir + "/" + zs::ckpt::rank_file_name(0);
  const std::string good = slurp(victim);
  auto restore = [&] {
    barrier();
    if (zs::test::rank() == 0) std::ofstream(victim, std::ios::binary | std::ios::trunc) << good;
    barrier();
  };
  auto damage = [&](const std::function<void()>& how) {
    barrier();
    if (zs::test::rank() == 0) how();
    barrier();
  };
  // A flipped bit inside the first section.
  damage([&] {
    std::string bad = good;
    bad[40] ^= 0x10;
    std::ofstream(victim, std::ios::binary | std::ios::trunc) << bad;
  });
  std::string err = error_of([&] { ckpt.load(*opt, dir); });
  EXPECT_TRUE(contains(err, victim) && contains(err, "checksum")) << err;
  restore();
  // Truncated.
  damage([&] { fs::resize_file(victim, good.size() / 2); });
  err = error_of([&] { ckpt.load(*opt, dir); });
  EXPECT_TRUE(contains(err, victim) && contains(err, "truncated")) << err;
  restore();
  // Missing.
  damage([&] { fs::remove(victim); });
  err = error_of([&] { ckpt.load(*opt, dir); });
  EXPECT_TRUE(contains(err, victim) && contains(err, "cannot be opened")) << err;
  restore();
  // A newer format version.
  const std::string manifest = dir + "/manifest.pb";
  const std::string good_manifest = slurp(manifest);
  damage([&] {
    zs::ckpt::Manifest m;
    m.ParseFromString(good_manifest);
    m.set_format_version(zs::ckpt::kFormatVersion + 1);
    std::ofstream(manifest, std::ios::binary | std::ios::trunc) << m.SerializeAsString();
  });
  err = error_of([&] { ckpt.load(*opt, dir); });
  EXPECT_TRUE(contains(err, "format version 2") && contains(err, "newer zeroshard")) << err;
  damage([&] { std::ofstream(manifest, std::ios::binary | std::ios::trunc) << good_manifest; });
  // Not a checkpoint.
  err = error_of([&] { ckpt.load(*opt, root + "/nothing_here"); });
  EXPECT_TRUE(contains(err, "nothing_here") && contains(err, "does not exist")) << err;
  const std::string empty_dir = root + "/empty";
  if (zs::test::rank() == 0) fs::create_directories(empty_dir);
  barrier();
  err = error_of([&] { ckpt.load(*opt, empty_dir); });
  EXPECT_TRUE(contains(err, "is not a checkpoint")) << err;
  // After all that, the intact checkpoint still loads.
  EXPECT_EQ(ckpt.load(*opt, dir).step, 1);
}

TEST(TrainingCheckpoint, AnotherModelIsRefusedNamingTheParameter) {
  const std::string root = fresh_root("other_model");
  zs::CheckpointOptions co;
  co.dir = root;
  {
    GptTrainer t;
    auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
    zs::Checkpointer ckpt(*t.engine, co);
    train_and_save(t, *opt, ckpt, 1);
  }
  zs_test::GptConfig wider = zs_test::trainer_gpt_config();
  wider.dim = 32;
  GptTrainer t(zs::ShardingOptions{}, 11, wider);
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::Checkpointer ckpt(*t.engine, co);
  const std::string err = error_of([&] { ckpt.load(*opt); });
  EXPECT_TRUE(contains(err, "another model") && contains(err, "[37, 24]") && contains(err, "[37, 32]")) << err;
}

// Disk full on one rank mid-save (the rank's I/O engine runs out of space after 2 KiB, as a full
// disk would): every rank gets the error, the partial save is discarded, `latest` and the previous
// checkpoint are untouched.
TEST(TrainingCheckpoint, FailedSaveKeepsThePreviousCheckpoint) {
  const std::string root = fresh_root("disk_full");
  auto disk = std::make_shared<zs::FaultInjectingIo>(zs::make_io_engine({}));
  zs::CheckpointOptions co;
  co.dir = root;
  co.io = disk;
  GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::Checkpointer ckpt(*t.engine, co);
  train_and_save(t, *opt, ckpt, 1);
  t.train(*opt, 1, 2);
  const int victim = zs::test::world_size() - 1;
  if (zs::test::rank() == victim) disk->fail_writes_after_bytes(2048);
  zs::TrainingState st;
  st.step = 2;
  const std::string err = error_of([&] { ckpt.save(*opt, st); });
  disk->clear();
  EXPECT_TRUE(contains(err, "save of step 2 failed on rank(s) " + std::to_string(victim))) << err;
  EXPECT_TRUE(contains(err, "earlier checkpoints are untouched")) << err;
  if (zs::test::rank() == victim) {
    EXPECT_TRUE(contains(err, "disk full") && contains(err, "No space left on device")) << err;
    EXPECT_GT(disk->injected(), 0);
  }
  barrier();
  EXPECT_EQ(slurp(root + "/latest"), zs::ckpt::step_dir_name(1) + "\n");
  EXPECT_FALSE(fs::exists(root + "/" + zs::ckpt::step_dir_name(2)));
  EXPECT_FALSE(fs::exists(root + "/.tmp-" + zs::ckpt::step_dir_name(2)));
  EXPECT_EQ(ckpt.load(*opt).step, 1);
}

// What a rank killed mid-save leaves (a .tmp-* directory with some files, no manifest) is never
// taken for a checkpoint, and the next successful save clears it.
TEST(TrainingCheckpoint, InterruptedSaveIsNeverLoaded) {
  const std::string root = fresh_root("killed");
  zs::CheckpointOptions co;
  co.dir = root;
  GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::Checkpointer ckpt(*t.engine, co);
  train_and_save(t, *opt, ckpt, 1);
  const std::string debris = root + "/.tmp-" + zs::ckpt::step_dir_name(7);
  if (zs::test::rank() == 0) {
    fs::create_directories(debris);
    std::ofstream(debris + "/rank-0.zsr") << "ZSHARD-RANKFILE1 partial";
  }
  barrier();
  EXPECT_EQ(ckpt.load(*opt).step, 1);
  EXPECT_TRUE(contains(error_of([&] { ckpt.load(*opt, debris); }), "has no manifest.pb"));
  train_and_save(t, *opt, ckpt, 2);
  barrier();
  EXPECT_FALSE(fs::exists(debris));
}

// The checkpoint records each parameter's group; a resume that would decay or scale a parameter
// differently is refused naming it, and the same groups load.
TEST(TrainingCheckpoint, OtherParamGroupsAreRefusedNamingTheParameter) {
  const std::string root = fresh_root("param_groups");
  zs::CheckpointOptions co;
  co.dir = root;
  std::string dir;
  {
    GptTrainer t;
    auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
    zs::Checkpointer ckpt(*t.engine, co);
    dir = train_and_save(t, *opt, ckpt, 1);
  }
  GptTrainer t(zs::ShardingOptions{}, /*init_seed=*/5);
  zs::ParamGroupOptions other = zs_test::trainer_param_groups();
  other.rules.back().lr_scale = 0.25;  // h1.fc.* trained with 0.5
  t.engine->set_param_groups(other);
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::Checkpointer ckpt(*t.engine, co);
  const std::string err = error_of([&] { ckpt.load(*opt, dir); });
  EXPECT_TRUE(contains(err, "'h1.fc.weight'") && contains(err, "lr_scale 0.5") && contains(err, "lr_scale 0.25") &&
              contains(err, "rules[0] ('h1.fc.*')"))
      << err;
  other.no_decay_1d_and_embeddings = false;
  other.rules.clear();
  t.engine->set_param_groups(other);
  const std::string err2 = error_of([&] { ckpt.load(*opt, dir); });
  EXPECT_TRUE(contains(err2, "trained parameter '") && contains(err2, "weight_decay 0,") &&
              contains(err2, "weight_decay 0.1") && contains(err2, "(default)"))
      << err2;
  t.engine->set_param_groups(zs_test::trainer_param_groups());
  EXPECT_EQ(ckpt.load(*opt, dir).step, 1);
  barrier();
}
