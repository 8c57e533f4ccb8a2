// SPDX-License-Identifier: Apache-2.0
// The optimizer step during backward (ShardingEngine::step_during_backward, offload.overlap_step):
// with the optimizer state in host memory, each unit's shards are updated as soon as their
// gradients are reduced. Training this way must give the parameters and optimizer state of
// step() alone bit for bit, for AdamW and SGD (Nesterov), under FULL_SHARD, SHARD_GRAD_OP,
// NO_SHARD and (at 4 ranks) HYBRID_SHARD, with gradients accumulated under no_sync or reduced at
// every micro-batch: steps whose clip leaves the gradients as they are keep the updates made
// during backward, steps whose clip scales them are restored and redone, a gradient changed
// behind the engine's back is noticed, and a skipped step (zero_grad without step) leaves nothing
// behind. The updates are computed before step() is called. Requests the engine cannot honour are
// refused by name. Run at 1, 2 and 4 ranks.

#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "engine/gpt_trainer.h"
#include "offload/offload_test_options.h"
#include "zeroshard/base/error.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/offload/offload_optimizer.h"

namespace zs = zeroshard;
using zs::test::message_of;

namespace {

using Trainer = zs_test::GptTrainer;

zs::OffloadOptions host_state() {
  zs::OffloadOptions o;
  o.target = zs::OffloadTarget::kCpu;
  return o;
}

// What a step does with its gradients after backward.
enum class Ending { kKeep, kClip, kSkip };

// Ending of step s: the first is skipped (SGD's momentum buffer is created at the next), then
// clips that leave the gradients alone and clips that scale them alternate.
Ending ending_of(int s) { return s == 0 ? Ending::kSkip : (s % 2 == 1 ? Ending::kKeep : Ending::kClip); }

// One step of two micro-batches; with `overlap` the step runs during the second backward.
// `no_sync`: the first micro-batch's gradients stay unreduced until the second.
void train_step(Trainer& t, zs::ShardedOptimizer& opt, int s, bool overlap, bool no_sync) {
  for (int m = 0; m < 2; ++m) {
    torch::manual_seed(2000 + 31 * s + 7 * m + zs::test::rank());
    torch::Tensor x = torch::randint(t.config.vocab, {2, t.config.seq}, torch::kLong);
    torch::Tensor y = torch::randint(t.config.vocab, {2, t.config.seq}, torch::kLong);
    c10::optional<zs::ShardingEngine::NoSync> hold;
    if (no_sync && m == 0) hold.emplace(*t.engine);
    torch::Tensor loss = t.engine->forward(
        [&] { return torch::cross_entropy_loss(t.model->forward(x).view({-1, t.config.vocab}), y.view({-1})); });
    if (overlap && m == 1) t.engine->step_during_backward(opt);
    (loss / 2).backward();
  }
  const Ending e = ending_of(s);
  // Infinity measures only; 1e9 clips with a factor of exactly 1; 0.05 scales every gradient.
  t.engine->clip_grad_norm(e == Ending::kClip ? 0.05 : e == Ending::kKeep ? 1e9
                                                                           : std::numeric_limits<double>::infinity());
  if (e != Ending::kSkip) t.engine->step(opt);
  t.engine->zero_grad();
}

std::vector<at::Tensor> moments(zs::ShardedOptimizer& opt) {
  std::vector<at::Tensor> out;
  for (const zs::ShardOptimizerState& st : opt.export_state()) {
    for (const at::Tensor& t : st.materialize()) out.push_back(t.clone());
  }
  return out;
}

const char* name_of(zs::ShardingStrategy s) {
  switch (s) {
    case zs::ShardingStrategy::kFullShard: return "FULL_SHARD";
    case zs::ShardingStrategy::kShardGradOp: return "SHARD_GRAD_OP";
    case zs::ShardingStrategy::kNoShard: return "NO_SHARD";
    default: return "HYBRID_SHARD";
  }
}

}  // namespace

TEST(OverlapStep, TrainsBitwiseAsStepAlone) {
  const int steps = 5;
  for (auto strategy : {zs::ShardingStrategy::kFullShard, zs::ShardingStrategy::kShardGradOp,
                        zs::ShardingStrategy::kNoShard, zs::ShardingStrategy::kHybridShard}) {
    // HYBRID_SHARD at 4 ranks: shard groups of 2, whose gradients are final only after the
    // replica all-reduce that finishes at the end of backward.
    if (strategy == zs::ShardingStrategy::kHybridShard && zs::test::world_size() != 4) continue;
    for (bool sgd : {false, true}) {
      for (bool no_sync : {true, false}) {
        const std::string what = std::string(name_of(strategy)) + (sgd ? ", SGD" : ", AdamW") +
                                 (no_sync ? ", no_sync" : ", reduced at every micro-batch");
        SCOPED_TRACE(what);
        zs::ShardingOptions so;
        so.strategy = strategy;
        if (strategy == zs::ShardingStrategy::kHybridShard) so.hybrid_group_size = 2;
        const zs::OptimizerOptions cfg = sgd ? zs_test::trainer_sgd_options() : zs_test::trainer_adamw_options();
        Trainer ref(so), ovl(so);
        zs::OffloadedOptimizer ref_opt(cfg, host_state(), zs::test::rank());
        zs::OffloadedOptimizer opt(cfg, host_state(), zs::test::rank());
        for (int s = 0; s < steps; ++s) {
          train_step(ref, ref_opt, s, /*overlap=*/false, no_sync);
          train_step(ovl, opt, s, /*overlap=*/true, no_sync);
        }
        EXPECT_EQ(zs_test::max_diff(ref.params(), ovl.params()), 0.0);
        EXPECT_EQ(ref_opt.steps(), opt.steps());
        const std::vector<at::Tensor> a = moments(ref_opt), b = moments(opt);
        ASSERT_EQ(a.size(), b.size());
        ASSERT_FALSE(a.empty());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(at::equal(a[i], b[i])) << "state tensor " << i;
        const zs::ShardingEngine::OverlapStats st = ovl.engine->overlap_stats();
        EXPECT_EQ(st.steps, steps);
        EXPECT_EQ(st.abandoned, 1);  // step 0
        EXPECT_EQ(st.redone, 2);     // steps 2 and 4 clipped
        // Every trainable shard of every step went to the worker during its backward.
        EXPECT_EQ(st.shards, steps * static_cast<int64_t>(ovl.engine->param_shards().size()));
      }
    }
  }
}

// Gradients halved in place through param_shards() (not through the engine), before a clip whose
// factor is 1 and after it: the version counters tell, and step() redoes the step.
TEST(OverlapStep, GradientsChangedThroughParamShardsAreNoticed) {
  for (bool before_clip : {true, false}) {
    SCOPED_TRACE(before_clip ? "halved before the clip" : "halved after the clip");
    Trainer ref, ovl;
    zs::OffloadedOptimizer ref_opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
    zs::OffloadedOptimizer opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
    for (int s = 0; s < 2; ++s) {
      for (Trainer* t : {&ref, &ovl}) {
        torch::manual_seed(3000 + s + zs::test::rank());
        torch::Tensor x = torch::randint(t->config.vocab, {2, t->config.seq}, torch::kLong);
        torch::Tensor loss = t->engine->forward(
            [&] { return torch::cross_entropy_loss(t->model->forward(x).view({-1, t->config.vocab}), x.view({-1})); });
        if (t == &ovl) t->engine->step_during_backward(opt);
        loss.backward();
        auto halve = [&] {
          if (s == 1) t->engine->param_shards().back().grad.mul_(0.5);
        };
        if (before_clip) halve();
        t->engine->clip_grad_norm(1e9);
        if (!before_clip) halve();
        t->engine->step(t == &ovl ? static_cast<zs::ShardedOptimizer&>(opt) : ref_opt);
        t->engine->zero_grad();
      }
    }
    EXPECT_EQ(zs_test::max_diff(ref.params(), ovl.params()), 0.0);
    const zs::ShardingEngine::OverlapStats st = ovl.engine->overlap_stats();
    EXPECT_EQ(st.steps, 2);
    EXPECT_EQ(st.redone, 1);  // the second step only
  }
}

// The updates are computed during backward, before step() is called: gradients overwritten
// afterwards behind every check (raw memory, no version counted, a factor of 1 in the clip) do not
// reach them, and the result is that of the gradients as backward left them.
TEST(OverlapStep, UpdatesAreComputedBeforeStepIsCalled) {
  Trainer ref, ovl;
  zs::OffloadedOptimizer ref_opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  zs::OffloadedOptimizer opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  for (Trainer* t : {&ref, &ovl}) {
    torch::manual_seed(4000 + zs::test::rank());
    torch::Tensor x = torch::randint(t->config.vocab, {2, t->config.seq}, torch::kLong);
    torch::Tensor loss = t->engine->forward(
        [&] { return torch::cross_entropy_loss(t->model->forward(x).view({-1, t->config.vocab}), x.view({-1})); });
    if (t == &ovl) t->engine->step_during_backward(opt);
    loss.backward();
    t->engine->clip_grad_norm(1e9);  // waits for the updates (a factor of 1: they stand)
    if (t == &ovl) {
      for (const zs::ParamShard& s : t->engine->param_shards()) {
        float* g = s.grad.data_ptr<float>();
        for (int64_t k = 0; k < s.grad.numel(); ++k) g[k] = 1e3f;
      }
    }
    zs::ShardedOptimizer& o = t == &ovl ? static_cast<zs::ShardedOptimizer&>(opt) : ref_opt;
    EXPECT_EQ(o.steps(), 0);  // counted at step()
    t->engine->step(o);
    EXPECT_EQ(o.steps(), 1);
    t->engine->zero_grad();
  }
  EXPECT_EQ(zs_test::max_diff(ref.params(), ovl.params()), 0.0);
  EXPECT_EQ(ovl.engine->overlap_stats().redone, 0);
}

namespace {
// An OffloadedOptimizer whose update of one shard during backward fails (as an I/O error would).
class FailingShardStep final : public zs::ShardedOptimizer {
 public:
  FailingShardStep(zs::OffloadedOptimizer& inner, size_t fail_at)
      : ShardedOptimizer(inner.lr()), inner_(inner), fail_at_(fail_at) {}
  void step(const std::vector<zs::ParamShard>& shards) override { inner_.step(shards); }
  bool steps_shards_during_backward() const override { return true; }
  void begin_shard_step(const std::vector<zs::ParamShard>& shards) override { inner_.begin_shard_step(shards); }
  void step_shard(size_t i, const zs::ParamShard& shard) override {
    if (i == fail_at_) ZS_THROW(zs::IoError, "injected failure updating shard ", i);
    inner_.step_shard(i, shard);
  }
  void finish_shard_step(const std::vector<zs::ParamShard>& shards) override { inner_.finish_shard_step(shards); }
  size_t abandon_shard_step(const std::vector<zs::ParamShard>& shards) override {
    return inner_.abandon_shard_step(shards);
  }
  int64_t state_bytes() const override { return inner_.state_bytes(); }
  std::string describe() const override { return "FailingShardStep"; }
  int64_t steps() const override { return inner_.steps(); }
  std::vector<std::string> state_names() const override { return inner_.state_names(); }
  std::vector<zs::ShardOptimizerState> export_state() const override { return inner_.export_state(); }
  void import_state(std::vector<zs::ShardOptimizerState> state, int64_t steps) override {
    inner_.import_state(std::move(state), steps);
  }

 private:
  zs::OffloadedOptimizer& inner_;
  size_t fail_at_;
};
}  // namespace

// An update that fails on the worker: step() restores the shards updated before it, skips the
// rest, and throws that error; the step retried (a plain one now) gives the step's bits.
TEST(OverlapStep, AFailedUpdateIsUndoneAndTheStepCanBeRetried) {
  Trainer ref, ovl;
  zs::OffloadedOptimizer ref_opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  zs::OffloadedOptimizer inner(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  FailingShardStep failing(inner, /*fail_at=*/1);
  ref.train(ref_opt, 0, 1);
  ovl.train(inner, 0, 1);
  for (Trainer* t : {&ref, &ovl}) {
    torch::manual_seed(6000 + zs::test::rank());
    torch::Tensor x = torch::randint(t->config.vocab, {2, t->config.seq}, torch::kLong);
    torch::Tensor loss = t->engine->forward(
        [&] { return torch::cross_entropy_loss(t->model->forward(x).view({-1, t->config.vocab}), x.view({-1})); });
    if (t == &ovl) t->engine->step_during_backward(failing);
    loss.backward();
    t->engine->clip_grad_norm(1e9);
    if (t == &ovl) {
      EXPECT_CONTAINS(message_of<zs::IoError>([&] { t->engine->step(failing); }),
                      "injected failure updating shard 1");
      EXPECT_EQ(inner.steps(), 1);
    }
    t->engine->step(t == &ovl ? static_cast<zs::ShardedOptimizer&>(failing) : ref_opt);
    t->engine->zero_grad();
  }
  EXPECT_EQ(inner.steps(), 2);
  EXPECT_EQ(zs_test::max_diff(ref.params(), ovl.params()), 0.0);
  EXPECT_EQ(ovl.engine->overlap_stats().redone, 1);
}

// A second backward before step(): refused at its start; reset_after_error restores the shards.
TEST(OverlapStep, AnotherBackwardBeforeStepIsRefusedAndResetRestores) {
  Trainer t;
  zs::OffloadedOptimizer opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  t.train(opt, 0, 1);
  const std::map<std::string, at::Tensor> before = t.params();
  auto loss_of = [&] {
    torch::Tensor x = torch::randint(t.config.vocab, {2, t.config.seq}, torch::kLong);
    return t.engine->forward(
        [&] { return torch::cross_entropy_loss(t.model->forward(x).view({-1, t.config.vocab}), x.view({-1})); });
  };
  torch::Tensor first = loss_of();
  t.engine->step_during_backward(opt);
  first.backward();
  torch::Tensor second = loss_of();
  const std::string text = message_of([&] { second.backward(); });
  EXPECT_CONTAINS(text, "a backward started while the step begun during the last one (step_during_backward)");
  EXPECT_CONTAINS(text, "step() or zero_grad() must come first");
  t.engine->reset_after_error();
  EXPECT_EQ(zs_test::max_diff(before, t.params()), 0.0);
  EXPECT_EQ(t.engine->overlap_stats().abandoned, 1);
  // Training goes on: the next step is a plain one.
  t.train(opt, 1, 2);
  EXPECT_EQ(opt.steps(), 2);
}

TEST(OverlapStep, RequestsItCannotHonourAreRefused) {
  Trainer t;
  auto device_opt = zs::make_optimizer(zs_test::trainer_adamw_options());
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { t.engine->step_during_backward(*device_opt); }),
                  "cannot step shards during backward; an optimizer with its state in host memory does "
                  "(offload.optimizer = CPU)");
  zs::test::RankDir dir("overlap_step_nvme");
  zs::OffloadedOptimizer nvme(zs_test::trainer_adamw_options(),
                              zs_test::offload_optimizer_options(zs::OffloadTarget::kNvme, zs::OffloadTarget::kDevice,
                                                                 dir.path),
                              zs::test::rank());
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { t.engine->step_during_backward(nvme); }),
                  "cannot step shards during backward");
  // Stepped with another optimizer than the one armed.
  zs::OffloadedOptimizer opt(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  zs::OffloadedOptimizer other(zs_test::trainer_adamw_options(), host_state(), zs::test::rank());
  t.engine->step_during_backward(opt);
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { t.engine->step_during_backward(opt); }),
                  "a step begun during an earlier backward is still open");
  t.forward_backward(0);
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { t.engine->step(other); }),
                  "the step begun during backward (step_during_backward) is of another optimizer");
  t.engine->zero_grad();
  // Parameters offloaded: the shards are not in memory (the optimizer made for them says so first).
  zs::test::RankDir pdir("overlap_step_params");
  Trainer off(zs_test::offload_placement(zs::OffloadTarget::kCpu, zs::OffloadTarget::kDevice, pdir.path));
  zs::OffloadedOptimizer paged(zs_test::trainer_adamw_options(),
                               zs_test::offload_optimizer_options(zs::OffloadTarget::kCpu, zs::OffloadTarget::kCpu,
                                                                  pdir.path),
                               zs::test::rank());
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { paged.begin_shard_step(off.engine->param_shards()); }),
                  "cannot step shards during backward: its state or its parameter shards are not in host memory");
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { off.engine->step_during_backward(opt); }),
                  "step_during_backward needs the parameter and gradient shards in memory, but this engine offloads "
                  "the parameters (offload.params)");
  zs::test::RankDir gdir("overlap_step_grads");
  Trainer grads_off(zs_test::offload_placement(zs::OffloadTarget::kDevice, zs::OffloadTarget::kCpu, gdir.path));
  EXPECT_CONTAINS(message_of<zs::UsageError>([&] { grads_off.engine->step_during_backward(opt); }),
                  "but this engine offloads the gradients (offload.grads)");
}
