// SPDX-License-Identifier: Apache-2.0
// Stopping a run at a step boundary when the scheduler asks (stop_signals.h, Trainer::fit): a
// SIGUSR1 raised on one rank in the middle of step 3 stops every rank after step 3, with a
// checkpoint of step 3 and exit status 128 + SIGUSR1; the same command again with --resume=auto
// ends with parameters equal, element by element, to those of a run never stopped (which
// --resume=auto started at step 0: its checkpoint.dir was empty). A second signal ends the
// process at once, as the signal's default action does. Also the Trainer's refusal of a global
// batch with nothing for the loss to count. Run at 1 and 2 ranks.

#include <sys/wait.h>
#include <unistd.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/sin.h>

#include <csignal>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "common/test_util.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/config/main.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/unit.h"
#include "zeroshard/train/stop_signals.h"
#include "zeroshard/train/trainer.h"

namespace zs = zeroshard;
namespace F = torch::nn::functional;

namespace {

struct HiddenImpl : torch::nn::Module {
  HiddenImpl() : fc(register_module("fc", torch::nn::Linear(8, 16))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};

struct NetImpl : torch::nn::Module {
  NetImpl()
      : hidden(register_module("hidden", zs::Unit<HiddenImpl>())),
        head(register_module("head", torch::nn::Linear(16, 1))) {}
  torch::Tensor forward(torch::Tensor x) { return head(hidden(x)); }
  zs::Unit<HiddenImpl> hidden;
  torch::nn::Linear head;
};
TORCH_MODULE(Net);

// 64 points of a smooth function of 8 inputs, the same on every rank and in every run.
class Points : public zs::Dataset {
 public:
  int64_t size() const override { return 64; }
  zs::Example get(int64_t i) const override {
    const at::Tensor x = at::sin(at::arange(8, at::kFloat) * 0.37 + static_cast<double>(i) * 0.11);
    return {x, (x.sum() * 0.5).reshape({1})};
  }
};

zs::Run make_run(const std::string& ckpt_dir, const std::string& resume_flag) {
  const std::vector<std::string> args = {"test_stop",
                                         "--set", "checkpoint.dir=" + ckpt_dir,
                                         "--set", "train.steps=6",
                                         "--set", "train.batch_size=8",
                                         "--set", "optimizer.lr=0.01",
                                         "--set", "logging.progress=LINES",
                                         resume_flag};
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  const zs::Program program{"test_stop", {zs::keys::engine(), zs::keys::trainer()}};
  return zs::load_run(static_cast<int>(argv.size()), argv.data(), program);
}

struct Outcome {
  zs::TrainResult result;
  bool resumed = false;
  std::map<std::string, at::Tensor> params;
};

// One run of `run`; `before_micro_batch(k)` is called before the k-th micro-batch (0-based).
Outcome train(const zs::Run& run, const std::function<void(int64_t)>& before_micro_batch) {
  zs::Session& s = zs::test::session();
  const std::optional<zs::TrainStart> start = zs::start_training(s, run, "stop test");
  EXPECT_TRUE(start.has_value());
  torch::manual_seed(11);
  Net net;
  zs::ShardingEngine engine(s, net.ptr(), run.options.sharding);
  zs::Trainer trainer(s, engine, *start);
  zs::TrainTask task;
  task.train = std::make_shared<Points>();
  int64_t calls = 0;
  task.loss = [&](const zs::Batch& b) {
    before_micro_batch(calls++);
    return F::mse_loss(net->forward(b.data), b.target);
  };
  Outcome out;
  out.resumed = trainer.resuming();
  out.result = trainer.fit(task);
  out.params = engine.full_state_dict();
  return out;
}

double max_param_diff(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  if (a.size() != b.size() || a.empty()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, zs::test::max_abs_diff(t, it->second));
  }
  return worst;
}

TEST(StopSignal, OneRankSignalledStopsEveryRankWithACheckpointAndTheResumeEqualsAnUnstoppedRun) {
  const zs::test::SharedDir plain_dir("stop_plain");
  const zs::test::SharedDir stopped_dir("stop_stopped");
  const int signalled_rank = zs::test::world_size() - 1;

  const Outcome plain = train(make_run(plain_dir.path, "--resume=auto"), [](int64_t) {});
  EXPECT_FALSE(plain.resumed) << "--resume=auto with an empty checkpoint.dir starts at step 0";
  EXPECT_EQ(plain.result.steps, 6);
  EXPECT_EQ(plain.result.stop_signal, 0);
  EXPECT_EQ(plain.result.exit_status, 0);

  const Outcome stopped = train(make_run(stopped_dir.path, "--resume=auto"), [&](int64_t k) {
    if (k == 2 && zs::test::rank() == signalled_rank) std::raise(SIGUSR1);  // inside step 3
  });
  EXPECT_EQ(stopped.result.stop_signal, SIGUSR1) << "on rank " << zs::test::rank();
  EXPECT_EQ(stopped.result.exit_status, 128 + SIGUSR1);
  EXPECT_EQ(stopped.result.steps, 3);
  EXPECT_TRUE(zs::test::contains(stopped.result.checkpoint, "step-00000003")) << stopped.result.checkpoint;
  EXPECT_GT(max_param_diff(plain.params, stopped.params), 0) << "3 steps did not move the parameters";

  const Outcome resumed = train(make_run(stopped_dir.path, "--resume=auto"), [](int64_t) {});
  EXPECT_TRUE(resumed.resumed);
  EXPECT_EQ(resumed.result.steps, 6);
  EXPECT_EQ(resumed.result.stop_signal, 0);
  EXPECT_EQ(max_param_diff(plain.params, resumed.params), 0);
}

// TrainTask::loss_items counting nothing in a whole global batch (every target masked, say): a
// DataError naming the step on every rank, not a division by zero into NaN parameters.
TEST(TrainerLossItems, AGlobalBatchWithNothingToCountIsADataError) {
  zs::Session& s = zs::test::session();
  const zs::test::SharedDir dir("loss_items_none");
  const zs::Run run = make_run(dir.path, "--resume=auto");
  const std::optional<zs::TrainStart> start = zs::start_training(s, run, "loss items test");
  ASSERT_TRUE(start.has_value());
  torch::manual_seed(11);
  Net net;
  zs::ShardingEngine engine(s, net.ptr(), run.options.sharding);
  zs::Trainer trainer(s, engine, *start);
  zs::TrainTask task;
  task.train = std::make_shared<Points>();
  task.loss = [&](const zs::Batch& b) { return F::mse_loss(net->forward(b.data), b.target, torch::kSum); };
  task.loss_items = [](const zs::Batch&) { return 0.0; };
  const std::string err = zs::test::error_text_of<zs::DataError>([&] { trainer.fit(task); });
  EXPECT_NE(err.find("step 1: no sample of the global batch has an item the loss counts (TrainTask::loss_items is 0 "
                     "on every rank)"),
            std::string::npos)
      << err;
  for (const auto& [name, t] : engine.full_state_dict()) EXPECT_TRUE(t.isfinite().all().item<bool>()) << name;
}

TEST(StopSignal, ResumeAutoNeedsACheckpointDirectory) {
  const zs::Run run = make_run("", "--resume=auto");
  zs::Session& s = zs::test::session();
  const std::optional<zs::TrainStart> start = zs::start_training(s, run, "stop test");
  ASSERT_TRUE(start.has_value());
  Net net;
  zs::ShardingEngine engine(s, net.ptr(), run.options.sharding);
  const std::string err = zs::test::error_text_of<zs::UsageError>([&] { zs::Trainer trainer(s, engine, *start); });
  EXPECT_TRUE(zs::test::contains(err, "--resume=auto needs a checkpoint directory: --set checkpoint.dir=DIR")) << err;
}

TEST(StopSignal, ResumeTakesNoOtherValue) {
  const std::string err = zs::test::error_text_of<zs::UsageError>(
      [] { zs::parse_train_flags({"prog", "--resume=yes"}, "a program"); });
  EXPECT_TRUE(zs::test::contains(err, "--resume takes no value, or =auto; got 'yes'")) << err;
  const zs::TrainFlags auto_flags = zs::parse_train_flags({"prog", "--resume=auto"}, "a program");
  EXPECT_TRUE(auto_flags.resume_auto);
  EXPECT_FALSE(auto_flags.resume);
  const zs::TrainFlags bare = zs::parse_train_flags({"prog", "--resume"}, "a program");
  EXPECT_TRUE(bare.resume);
}

// A checkpoint of the test's Net saved by a Checkpointer outside the Trainer, with `global` as its
// TrainingState's global entries (where the Trainer keeps its data position).
void save_outside_the_trainer(const std::string& dir, const std::map<std::string, std::string>& global) {
  const zs::Run run = make_run(dir, "--resume");
  zs::Session& s = zs::test::session();
  torch::manual_seed(11);
  Net net;
  zs::ShardingEngine engine(s, net.ptr(), run.options.sharding);
  auto opt = zs::make_engine_optimizer(run.options.optimizer, run.options.offload, s.rank(), &engine.memory());
  zs::Checkpointer ckpt(engine, run.options.checkpoint);
  zs::TrainingState st;
  st.step = 2;
  st.global = global;
  ckpt.save(*opt, st);
  ckpt.wait();
}

// --resume from a checkpoint whose data position the Trainer cannot continue: refused on every
// rank, naming the checkpoint and what is wrong, before any step.
TEST(TrainerResume, RefusesACheckpointItCannotContinueTheDataOf) {
  struct Case {
    std::string name;
    std::map<std::string, std::string> global;
    std::string message;
  };
  for (const Case& c :
       {Case{"none", {}, "holds no data position (train.data): it was not saved by this program's training loop"},
        Case{"malformed", {{"train.data", "three"}, {"train.global_batch", "8"}},
             "bad data position 'three' (expected <epoch>:<steps>)"},
        Case{"negative", {{"train.data", "0:-1"}, {"train.global_batch", "8"}},
             "bad data position '0:-1' (expected <epoch>:<steps>)"}}) {
    SCOPED_TRACE(c.name);
    const zs::test::SharedDir dir("resume_refused_" + c.name);
    save_outside_the_trainer(dir.path, c.global);
    const std::string err =
        zs::test::error_text_of<zs::CheckpointError>([&] { train(make_run(dir.path, "--resume"), [](int64_t) {}); });
    EXPECT_TRUE(zs::test::contains(err, "step-00000002")) << err;
    EXPECT_TRUE(zs::test::contains(err, c.message)) << err;
  }
  const zs::test::SharedDir dir("resume_refused_batch");
  save_outside_the_trainer(dir.path, {{"train.data", "0:2"}, {"train.global_batch", "16"}});
  const std::string err =
      zs::test::error_text_of<zs::ConfigError>([&] { train(make_run(dir.path, "--resume"), [](int64_t) {}); });
  EXPECT_TRUE(zs::test::contains(err, "was trained with train.batch_size = 16, this run has 8")) << err;
}

int g_previous_handler_calls = 0;
extern "C" void count_calls(int) { ++g_previous_handler_calls; }

TEST(StopSignals, RecordsTheFirstSignalAndGivesTheHandlersBack) {
  struct sigaction mine {}, saved {};
  mine.sa_handler = count_calls;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(::sigaction(SIGUSR2, &mine, &saved), 0);
  {
    zs::StopSignals stop({SIGUSR2});
    EXPECT_EQ(stop.received(), 0);
    std::raise(SIGUSR2);
    EXPECT_EQ(stop.received(), SIGUSR2);
    EXPECT_EQ(g_previous_handler_calls, 0);
    const std::string err = zs::test::error_text_of<zs::UsageError>([] { zs::StopSignals second({SIGUSR2}); });
    EXPECT_TRUE(zs::test::contains(err, "a second StopSignals")) << err;
    stop.clear();
    EXPECT_EQ(stop.received(), 0);
  }
  std::raise(SIGUSR2);
  EXPECT_EQ(g_previous_handler_calls, 1) << "the handler from before StopSignals is back";
  ::sigaction(SIGUSR2, &saved, nullptr);
}

TEST(StopSignals, ASecondSignalEndsTheProcessAtOnce) {
  if (zs::test::rank() != 0) GTEST_SKIP() << "one child process is enough";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // the child touches nothing of MPI's
    zs::StopSignals stop({SIGUSR2});
    std::raise(SIGUSR2);
    if (stop.received() != SIGUSR2) ::_exit(3);
    std::raise(SIGUSR2);  // ends here
    ::_exit(4);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFSIGNALED(status)) << "exit status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  if (WIFSIGNALED(status)) EXPECT_EQ(WTERMSIG(status), SIGUSR2);
}

// A run that cannot stop in time (a step that never ends) exits with kStopDeadlineExit once the
// deadline after the signal has passed, saying why on stderr; one that stops in time is untouched.
TEST(StopSignals, TheDeadlineEndsAProcessThatCannotStop) {
  if (zs::test::rank() != 0) GTEST_SKIP() << "one child process is enough";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t stuck = ::fork();
  ASSERT_GE(stuck, 0);
  if (stuck == 0) {  // the child touches nothing of MPI's
    ::dup2(fds[1], STDERR_FILENO);
    zs::StopSignals stop({SIGUSR2}, 0.3, "rank 7");
    std::raise(SIGUSR2);
    ::sleep(20);  // a step that never ends
    ::_exit(5);
  }
  ::close(fds[1]);
  std::string err;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) err.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(stuck, &status, 0), stuck);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), zs::kStopDeadlineExit);
  EXPECT_EQ(err, "zeroshard: rank 7: the stop deadline of 0.3 s after SIGUSR2 passed before the run stopped at a "
                 "step boundary with its checkpoint; exiting now with status 124 (train.stop_deadline_s)\n");
  const pid_t in_time = ::fork();
  ASSERT_GE(in_time, 0);
  if (in_time == 0) {
    {
      zs::StopSignals stop({SIGUSR2}, 0.3);
      std::raise(SIGUSR2);
    }  // stopped (and saved) in time: the watcher ends with the StopSignals
    ::usleep(600 * 1000);
    ::_exit(6);
  }
  ASSERT_EQ(::waitpid(in_time, &status, 0), in_time);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 6);
  EXPECT_CONTAINS(zs::test::error_text_of<zs::UsageError>([] { zs::StopSignals bad({SIGUSR2}, -1); }),
                  "the stop deadline must be 0 (none) or positive seconds, got -1");
}

}  // namespace
