// SPDX-License-Identifier: Apache-2.0
// How a save completes (checkpoint/src/checkpoint_save.cpp), where real jobs hurt:
//  - saving a step that exists already (after resuming from it) replaces it without a moment in
//    which `latest` names a missing directory: checked at every rename the process makes (this
//    binary interposes rename(2), so libstdc++'s std::filesystem::rename comes here first), on
//    the atomic-exchange path and on the path for filesystems without it;
//  - a rank whose record of its file rank 0 cannot see (checkpoint.dir not shared by the ranks)
//    fails the save on every rank instead of committing a manifest with an empty record;
//  - retention after resuming from an older step keeps the resumed run's saves, not the
//    abandoned run's higher steps.
// Run at 1 and 2 ranks.

#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include "common/test_util.h"
#include "engine/gpt_trainer.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/checkpoint/checkpoint_format.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

// ---- rename(2) interposed for this process ----

namespace {

std::mutex g_watch_mu;
std::string g_watch_root;                 // checkpoint root whose `latest` is checked; empty: none
std::atomic<int> g_renames_checked{0};
std::atomic<int> g_latest_missing{0};     // renames that found `latest` naming a missing checkpoint
std::atomic<bool> g_refuse_exchange{false};  // renameat2(RENAME_EXCHANGE) fails with EINVAL (NFS)

void check_latest() {
  std::string root;
  {
    std::lock_guard<std::mutex> lock(g_watch_mu);
    root = g_watch_root;
  }
  if (root.empty()) return;
  ++g_renames_checked;
  std::ifstream in(root + "/latest");
  std::string name;
  if (!(in >> name)) return;  // no `latest` (yet, or while none can be named): nothing to resolve
  if (!fs::exists(root + "/" + name + "/manifest.pb")) ++g_latest_missing;
}

}  // namespace

extern "C" int rename(const char* from, const char* to) {
  using Fn = int (*)(const char*, const char*);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "rename"));
  check_latest();
  const int rc = real(from, to);
  check_latest();
  return rc;
}

extern "C" int renameat2(int olddirfd, const char* from, int newdirfd, const char* to, unsigned int flags) {
  using Fn = int (*)(int, const char*, int, const char*, unsigned int);
  static Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "renameat2"));
  if ((flags & RENAME_EXCHANGE) && g_refuse_exchange) {
    errno = EINVAL;
    return -1;
  }
  check_latest();
  const int rc = real(olddirfd, from, newdirfd, to, flags);
  check_latest();
  return rc;
}

namespace {

std::string fresh_root(const std::string& name) {
  const std::string root = (fs::current_path() / ("ckpt_commit_" + name)).string();
  if (zs::test::rank() == 0) {
    fs::remove_all(root);
    fs::create_directories(root);
  }
  zs::test::world()->barrier("test.fresh_root")->wait();
  return root;
}

std::string error_of(const std::function<void()>& fn) { return zs::test::error_text_of<zs::CheckpointError>(fn); }
using zs::test::contains;

std::string save(zs_test::GptTrainer& t, zs::ShardedOptimizer& opt, zs::Checkpointer& ckpt, int64_t step) {
  t.train(opt, 0, 1);
  zs::TrainingState st;
  st.step = step;
  return ckpt.save(opt, st);
}

std::vector<int64_t> steps_in(const std::string& root) {
  std::vector<int64_t> out;
  for (const auto& [step, path] : zs::ckpt::list_checkpoints(root)) out.push_back(step);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST(CheckpointCommit, ResavingAStepNeverLeavesLatestNamingAMissingCheckpoint) {
  for (bool exchange : {true, false}) {
    SCOPED_TRACE(exchange ? "atomic exchange" : "filesystem without exchange");
    const std::string root = fresh_root(exchange ? "resave_exchange" : "resave_fallback");
    zs_test::GptTrainer t;
    auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
    zs::CheckpointOptions co;
    co.dir = root;
    zs::Checkpointer ckpt(*t.engine, co);
    save(t, *opt, ckpt, 4);
    save(t, *opt, ckpt, 5);
    g_refuse_exchange = !exchange;
    {
      std::lock_guard<std::mutex> lock(g_watch_mu);
      g_watch_root = root;
    }
    g_renames_checked = 0;
    g_latest_missing = 0;
    for (int i = 0; i < 3; ++i) save(t, *opt, ckpt, 5);  // resumed from step 5 and saved it again
    {
      std::lock_guard<std::mutex> lock(g_watch_mu);
      g_watch_root.clear();
    }
    g_refuse_exchange = false;
    if (zs::test::rank() == 0) {
      EXPECT_GT(g_renames_checked.load(), 0) << "the interposed rename was never called: the check checked nothing";
      EXPECT_EQ(g_latest_missing.load(), 0) << "`latest` named a missing checkpoint while step 5 was replaced";
    }
    EXPECT_EQ(steps_in(root), (std::vector<int64_t>{4, 5}));
    EXPECT_EQ(zs::ckpt::resolve_checkpoint(root), root + "/step-00000005");
    EXPECT_FALSE(fs::exists(root + "/.old-step-00000005"));
    zs::TrainingState st;
    EXPECT_EQ(error_of([&] { st = ckpt.load(*opt); }), "<no exception>");
    EXPECT_EQ(st.step, 5);
  }
}

// Rank 1 writes into a checkpoint directory of its own (as a node-local disk would), where the
// save's temporary directory happens to exist too: rank 0 cannot see rank 1's record. The save
// must fail on every rank, naming rank 1, and leave the previous checkpoint the one to load; it
// used to read the missing record as an empty one and commit a checkpoint that cannot load.
TEST(CheckpointCommit, ARanksRecordRankZeroCannotSeeFailsTheSave) {
  ZS_REQUIRE_RANKS(2);
  const std::string root = fresh_root("unshared");
  const std::string other = fresh_root("unshared_rank1");
  zs_test::GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::CheckpointOptions co;
  co.dir = root;
  {
    zs::Checkpointer shared(*t.engine, co);
    save(t, *opt, shared, 1);
  }
  if (zs::test::rank() == 1) {
    co.dir = other;
    fs::create_directories(other + "/.tmp-step-00000002");
  }
  zs::Checkpointer ckpt(*t.engine, co);
  const std::string msg = error_of([&] { save(t, *opt, ckpt, 2); });
  EXPECT_TRUE(contains(msg, "rank 1's record")) << msg;
  EXPECT_TRUE(contains(msg, "missing")) << msg;
  EXPECT_TRUE(contains(msg, "shares")) << "should say what to do: " << msg;
  if (zs::test::rank() == 0) {
    EXPECT_EQ(steps_in(root), (std::vector<int64_t>{1}));
    EXPECT_EQ(zs::ckpt::resolve_checkpoint(root), root + "/step-00000001");
  }
  // Without the temporary directory, rank 1 says itself that it does not see rank 0's directory.
  if (zs::test::rank() == 1) fs::remove_all(other + "/.tmp-step-00000003");
  const std::string unseen = error_of([&] { save(t, *opt, ckpt, 3); });
  EXPECT_TRUE(contains(unseen, "does not exist on rank 1")) << unseen;
  EXPECT_TRUE(contains(unseen, "every rank sees")) << unseen;
}

// A run saved steps 10, 20, 30, was rolled back to step 10 and saved 11 and 12. Retention (keep
// 3) must keep the newest saves, 11 and 12, and the newest of the abandoned run, 30: it used to
// keep the highest steps, deleting each new save as soon as the next one was written.
TEST(CheckpointCommit, RetentionAfterResumingFromAnOlderStepKeepsTheNewestSaves) {
  const std::string root = fresh_root("retention");
  zs_test::GptTrainer t;
  auto opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  zs::CheckpointOptions co;
  co.dir = root;
  co.keep_last = 3;
  zs::Checkpointer ckpt(*t.engine, co);
  for (int64_t step : {10, 20, 30}) save(t, *opt, ckpt, step);
  EXPECT_EQ(ckpt.load(*opt, root + "/step-00000010").step, 10);
  save(t, *opt, ckpt, 11);
  EXPECT_EQ(steps_in(root), (std::vector<int64_t>{11, 20, 30}));
  save(t, *opt, ckpt, 12);
  EXPECT_EQ(steps_in(root), (std::vector<int64_t>{11, 12, 30}));
  EXPECT_EQ(ckpt.load(*opt).step, 12) << "`latest` is the last save";
  // Without `latest`, the most recently saved checkpoint is the one to resume from, not the
  // highest step.
  zs::test::world()->barrier("test.before_remove")->wait();
  if (zs::test::rank() == 0) fs::remove(root + "/latest");
  zs::test::world()->barrier("test.after_remove")->wait();
  EXPECT_EQ(zs::ckpt::resolve_checkpoint(root), root + "/step-00000012");
  const auto by_save = zs::ckpt::list_checkpoints_by_save(root);
  ASSERT_EQ(by_save.size(), 3u);
  EXPECT_EQ(by_save[0].step, 30);
  EXPECT_EQ(by_save[2].step, 12);
}
