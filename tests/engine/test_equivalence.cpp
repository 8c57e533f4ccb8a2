// SPDX-License-Identifier: Apache-2.0
// Sharded training must equal plain LibTorch training on the same global batch, element by
// element: every strategy, both gradient-accumulation modes, an MLP (padding, a one-parameter
// unit, a frozen parameter), a root whose only trainable layer comes after a frozen norm, a small GPT (tied embedding/output weights) and a BatchNorm net,
// whose buffers (running statistics) are compared with a reference that holds every rank's copy,
// under each sharding.buffer_sync mode. Every comparison fails on a NaN.
// Run at 1, 2 and 4 ranks. Tolerance: max |sharded - reference| <= 1e-5 after 20 steps of AdamW
// with clipping, 2 micro-batches per step and parameter groups (no decay on biases, norms and
// embeddings; one layer with its own decay and lr scale).

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cstdio>
#include <functional>
#include <limits>
#include <unordered_set>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/engine/engine.h"

namespace zs = zeroshard;
using Strategy = zs::ShardingStrategy;

namespace {

constexpr int kSteps = 20;
constexpr int kAccum = 2;
constexpr int kLocalBatch = 4;
constexpr double kLr = 3e-3, kWd = 0.1, kClip = 0.5;
constexpr double kTolerance = 1e-5;

struct Batch {
  torch::Tensor x, y;
};

// Everything a run needs: how to build the model, make the global batch of a micro-step, and
// compute the loss of a slice.
struct Task {
  std::function<std::shared_ptr<torch::nn::Module>()> build;
  std::function<torch::Tensor(torch::nn::Module&, const torch::Tensor&)> forward;
  std::function<Batch(int64_t micro_step, int64_t global_batch)> data;
  std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&)> loss;
};

Batch slice(const Batch& b, int r, int n) {
  const int64_t per = b.x.size(0) / n;
  return {b.x.narrow(0, r * per, per), b.y.narrow(0, r * per, per)};
}

std::vector<torch::Tensor> unique_params(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  std::unordered_set<const void*> seen;
  for (auto& p : m.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) out.push_back(p);
  }
  return out;
}

// The buffers every rank holds in the sharded run, simulated on one process: rank r's copy is in
// the model while its slice runs forward, and the copies are synchronised as `sync` says.
struct RankBuffers {
  std::vector<std::vector<torch::Tensor>> of;  // [rank][buffer], in named_buffers() order

  RankBuffers(torch::nn::Module& m, int world) {
    for (int r = 0; r < world; ++r) {
      of.emplace_back();
      for (const auto& b : m.buffers()) of.back().push_back(b.detach().clone());
    }
  }
  void load(torch::nn::Module& m, int r) {
    torch::NoGradGuard no_grad;
    auto bs = m.buffers();
    for (size_t i = 0; i < bs.size(); ++i) bs[i].copy_(of[r][i]);
  }
  void save(torch::nn::Module& m, int r) {
    auto bs = m.buffers();
    for (size_t i = 0; i < bs.size(); ++i) of[r][i] = bs[i].detach().clone();
  }
  void broadcast_rank0() {
    for (size_t r = 1; r < of.size(); ++r) {
      for (size_t i = 0; i < of[r].size(); ++i) of[r][i] = of[0][i].clone();
    }
  }
  void average_floating() {
    for (size_t i = 0; !of.empty() && i < of[0].size(); ++i) {
      if (!of[0][i].is_floating_point()) continue;
      torch::Tensor sum = of[0][i].clone();
      for (size_t r = 1; r < of.size(); ++r) sum += of[r][i];
      sum /= static_cast<double>(of.size());
      for (auto& rank : of) rank[i] = sum.clone();
    }
  }
};

// Parameter groups, as a recipe would write them for torch::optim: no decay on 1-D parameters and
// Embedding tables; the second block's fc layer with its own decay and half the lr; the rest
// decayed with the defaults. The sharded run gets the same from set_param_groups (its defaults
// plus one rule), so each side classifies the parameters its own way.
constexpr double kRuleWd = 0.02, kRuleLrScale = 0.5;
const char* const kRuleMatch = "*1.fc.*";

std::vector<torch::optim::OptimizerParamGroup> reference_groups(torch::nn::Module& m) {
  std::unordered_set<const void*> embeddings, seen;
  for (const auto& mod : m.modules()) {
    if (auto* e = dynamic_cast<torch::nn::EmbeddingImpl*>(mod.get())) embeddings.insert(e->weight.unsafeGetTensorImpl());
  }
  std::vector<torch::Tensor> decay, no_decay, rule;
  for (const auto& item : m.named_parameters()) {
    const torch::Tensor& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    if (item.key().find("1.fc.") != std::string::npos) {
      rule.push_back(p);
    } else if (p.dim() < 2 || embeddings.count(p.unsafeGetTensorImpl())) {
      no_decay.push_back(p);
    } else {
      decay.push_back(p);
    }
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto add = [&](std::vector<torch::Tensor> params, double lr, double wd) {
    if (params.empty()) return;
    auto o = std::make_unique<torch::optim::AdamWOptions>(lr);
    o->betas({0.9, 0.95}).weight_decay(wd);
    groups.emplace_back(std::move(params), std::move(o));
  };
  add(decay, kLr, kWd);
  add(no_decay, kLr, 0);
  add(rule, kLr * kRuleLrScale, kRuleWd);
  EXPECT_FALSE(no_decay.empty() || rule.empty()) << "every task must exercise the groups";
  return groups;
}

struct Reference {
  std::shared_ptr<torch::nn::Module> model;
  std::map<std::string, torch::Tensor> buffers;  // this rank's, as the sharded run must hold them
};

// Plain LibTorch: the whole global batch on one process; each rank's slice is forwarded on its own
// (so BatchNorm sees the same per-rank statistics as in the sharded run, with that rank's
// buffers) and the losses averaged.
Reference train_reference(const Task& task, int world, zs::BufferSync sync) {
  torch::manual_seed(7);
  auto model = task.build();
  auto params = unique_params(*model);
  std::vector<torch::Tensor> trainable;
  for (auto& p : params) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  RankBuffers buffers(*model, world);
  torch::optim::AdamW opt(reference_groups(*model), torch::optim::AdamWOptions(kLr).betas({0.9, 0.95}).weight_decay(kWd));
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    for (int micro = 0; micro < kAccum; ++micro) {
      Batch b = task.data(step * kAccum + micro, kLocalBatch * world);
      if (sync == zs::BufferSync::kBroadcast) buffers.broadcast_rank0();  // every engine.forward
      for (int r = 0; r < world; ++r) {
        Batch s = slice(b, r, world);
        buffers.load(*model, r);
        torch::Tensor loss = task.loss(task.forward(*model, s.x), s.y) / (world * kAccum);
        buffers.save(*model, r);
        loss.backward();
      }
    }
    torch::nn::utils::clip_grad_norm_(trainable, kClip);
    opt.step();
    if (sync == zs::BufferSync::kAverage) buffers.average_floating();  // every engine.step
  }
  Reference ref{model, {}};
  buffers.load(*model, zs::test::rank());
  for (const auto& b : model->named_buffers()) ref.buffers[b.key()] = b.value().detach().clone();
  return ref;
}

std::map<std::string, torch::Tensor> train_sharded(const Task& task, Strategy strategy, bool no_sync,
                                                   zs::BufferSync sync, double* last_loss) {
  auto& s = zs::test::session();
  const int world = s.world_size(), rank = s.rank();
  torch::manual_seed(7);
  auto model = task.build();
  zs::ShardingOptions o;
  o.strategy = strategy;
  o.hybrid_group_size = world >= 2 ? 2 : 1;
  o.buffer_sync = sync;
  zs::ShardingEngine engine(s, model, o);
  zs::ParamGroupOptions groups;
  groups.weight_decay = kWd;
  groups.rules.push_back({kRuleMatch, kRuleWd, kRuleLrScale});
  engine.set_param_groups(groups);
  zs::AdamOptions ao;
  ao.lr = kLr;
  ao.beta2 = 0.95;
  ao.weight_decay = kWd;
  auto opt = zs::make_adamw(ao);
  for (int step = 0; step < kSteps; ++step) {
    for (int micro = 0; micro < kAccum; ++micro) {
      Batch mine = slice(task.data(step * kAccum + micro, kLocalBatch * world), rank, world);
      torch::Tensor loss = engine.forward([&] { return task.loss(task.forward(*model, mine.x), mine.y) / kAccum; });
      *last_loss = loss.item<double>();
      if (no_sync && micro < kAccum - 1) {
        auto guard = engine.no_sync();
        loss.backward();
      } else {
        loss.backward();
      }
    }
    engine.clip_grad_norm(kClip);
    engine.step(*opt);
    engine.zero_grad();
  }
  return engine.full_state_dict();
}

// Largest difference over the parameters and buffers of `reference`; `worst_name` names it.
double worst_difference(const Reference& reference, const std::map<std::string, torch::Tensor>& sharded,
                        std::string* worst_name) {
  double worst = 0;
  auto compare = [&](const std::string& name, const torch::Tensor& want) {
    auto it = sharded.find(name);
    const double d = it == sharded.end() ? HUGE_VAL : zs::test::max_abs_diff(it->second, want);
    if (d > worst || (worst == 0 && worst_name->empty())) worst = d, *worst_name = name;
  };
  for (const auto& item : reference.model->named_parameters()) compare(item.key(), item.value());
  for (const auto& [name, b] : reference.buffers) compare(name, b);
  return worst;
}

void expect_equivalent(const Task& task, const std::string& what,
                       const std::vector<std::pair<zs::BufferSync, std::vector<Strategy>>>& runs) {
  const int world = zs::test::world_size();
  for (const auto& [sync, strategies] : runs) {
    const Reference reference = train_reference(task, world, sync);
    for (auto strategy : strategies) {
      for (bool no_sync : {false, true}) {
        double loss = 0;
        auto sharded = train_sharded(task, strategy, no_sync, sync, &loss);
        std::string worst_name;
        const double worst = worst_difference(reference, sharded, &worst_name);
        if (zs::test::rank() == 0) {
          std::printf("  %-14s %-13s %-8s buffers %-9s ranks=%d  max|diff|=%.3g (%s)\n", what.c_str(),
                      zs::to_string(strategy), no_sync ? "no_sync" : "rs/micro", zs::to_string(sync), world, worst,
                      worst_name.c_str());
        }
        EXPECT_LE(worst, kTolerance) << what << " " << zs::to_string(strategy) << (no_sync ? " no_sync" : "")
                                     << " buffers " << zs::to_string(sync) << " at " << world
                                     << " ranks: worst entry " << worst_name << " differs by " << worst;
        EXPECT_TRUE(std::isfinite(loss));
      }
    }
  }
}

const std::vector<Strategy> kAllStrategies = {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard,
                                              Strategy::kHybridShard};

void expect_equivalent(const Task& task, const std::string& what) {
  expect_equivalent(task, what, {{zs::BufferSync::kAverage, kAllStrategies}});
}

Task mlp_task() {
  Task t;
  t.build = [] { return zs_test::Mlp().ptr(); };
  t.forward = [](torch::nn::Module& m, const torch::Tensor& x) { return static_cast<zs_test::MlpImpl&>(m).forward(x); };
  t.data = [](int64_t i, int64_t n) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(1000 + i);
    return Batch{torch::randn({n, 7}, g), torch::randn({n, 5}, g)};
  };
  t.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  return t;
}

}  // namespace

TEST(ShardedEquivalence, Mlp) { expect_equivalent(mlp_task(), "MLP"); }

// The root's head gradient arrives before the frozen norm's backward, which reads the norm's
// weight: the root must stay gathered until the backward is done (resharding at its last gradient
// read freed storage).
TEST(ShardedEquivalence, FrozenNormBeforeTrainableHeadInTheRoot) {
  Task t = mlp_task();
  t.build = [] { return zs_test::FrozenRootNormNet().ptr(); };
  t.forward = [](torch::nn::Module& m, const torch::Tensor& x) {
    return static_cast<zs_test::FrozenRootNormNetImpl&>(m).forward(x);
  };
  expect_equivalent(t, "frozen root norm");
}

// The same in bf16, where the gathered parameters are never views of the fp32 shards (at one rank
// too): one step of SGD with lr 1 moves every trainable parameter by its gradient, which must be
// plain LibTorch's in bf16 (each rank's slice backward in bf16, summed in fp32), to bf16's
// precision relative to the tensor's largest gradient.
TEST(ShardedEquivalence, FrozenNormBeforeTrainableHeadInTheRootInBf16) {
  auto& s = zs::test::session();
  const int world = s.world_size();
  const Batch global = mlp_task().data(0, kLocalBatch * world);
  torch::manual_seed(7);
  auto reference = zs_test::FrozenRootNormNet();
  std::map<std::string, torch::Tensor> initial, grad_sum;
  for (const auto& p : reference->named_parameters()) initial[p.key()] = p.value().detach().clone();
  reference->to(torch::kBFloat16);
  for (int r = 0; r < world; ++r) {
    const Batch b = slice(global, r, world);
    reference->zero_grad();
    torch::Tensor out = reference->forward(b.x.to(torch::kBFloat16)).to(torch::kFloat);
    (torch::mse_loss(out, b.y) / world).backward();
    for (const auto& p : reference->named_parameters()) {
      if (!p.value().requires_grad()) continue;
      torch::Tensor g = p.value().grad().to(torch::kFloat);
      grad_sum[p.key()] = grad_sum.count(p.key()) ? grad_sum[p.key()] + g : g;
    }
  }
  torch::manual_seed(7);
  auto model = zs_test::FrozenRootNormNet();
  zs::ShardingOptions o;
  o.param_dtype = torch::kBFloat16;
  zs::ShardingEngine engine(s, model.ptr(), o);
  zs::SgdOptions so;
  so.lr = 1;
  auto opt = zs::make_sgd(so);
  const Batch mine = slice(global, s.rank(), world);
  torch::Tensor loss = engine.forward([&] {
    return torch::mse_loss(model->forward(mine.x.to(torch::kBFloat16)).to(torch::kFloat), mine.y);
  });
  loss.backward();
  engine.step(*opt);
  const auto after = engine.full_state_dict();
  ASSERT_EQ(grad_sum.size(), 6u) << "two blocks' weights and biases, the head's weight and bias";
  for (const auto& [name, g] : grad_sum) {
    const double scale = g.abs().max().item<double>();
    const double d = zs::test::max_abs_diff(initial[name] - after.at(name), g);
    EXPECT_LE(d, 2e-2 * scale) << name << " at " << world << " ranks: the step moved it by its gradient +- " << d
                               << " (largest gradient " << scale << ")";
    EXPECT_GT(scale, 0) << name;
  }
  for (const char* frozen : {"input.weight", "norm.weight", "norm.bias"}) {
    EXPECT_EQ(zs::test::max_abs_diff(after.at(frozen), initial[frozen]), 0.0) << frozen << " is frozen";
  }
}

TEST(ShardedEquivalence, GptWithTiedEmbedding) {
  Task t;
  t.build = [] { return zs_test::Gpt().ptr(); };
  t.forward = [](torch::nn::Module& m, const torch::Tensor& x) { return static_cast<zs_test::GptImpl&>(m).forward(x); };
  t.data = [](int64_t i, int64_t n) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(2000 + i);
    zs_test::GptConfig c;
    return Batch{torch::randint(c.vocab, {n, c.seq}, g), torch::randint(c.vocab, {n, c.seq}, g)};
  };
  t.loss = [](const torch::Tensor& logits, const torch::Tensor& y) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
  };
  expect_equivalent(t, "GPT");
}

TEST(ShardedEquivalence, BatchNormNet) {
  Task t;
  t.build = [] { return zs_test::BnNet().ptr(); };
  t.forward = [](torch::nn::Module& m, const torch::Tensor& x) { return static_cast<zs_test::BnNetImpl&>(m).forward(x); };
  t.data = mlp_task().data;
  t.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  // Buffers (the running statistics) are compared too, under each way of keeping them in step.
  expect_equivalent(t, "BatchNorm net", {{zs::BufferSync::kAverage, kAllStrategies},
                                         {zs::BufferSync::kBroadcast, {Strategy::kFullShard, Strategy::kNoShard}},
                                         {zs::BufferSync::kNone, {Strategy::kFullShard}}});
}

// The comparison above cannot pass on a NaN (a `d > worst` scan skips one silently).
TEST(ShardedEquivalence, ComparisonFailsOnNaN) {
  const torch::Tensor a = torch::zeros({3});
  torch::Tensor b = a.clone();
  EXPECT_EQ(zs::test::max_abs_diff(a, b), 0.0);
  b[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_GT(zs::test::max_abs_diff(a, b), kTolerance);
  EXPECT_GT(zs::test::max_abs_diff(b, b), kTolerance) << "NaN equals nothing, itself included";
  EXPECT_GT(zs::test::max_abs_diff(a, torch::zeros({4})), kTolerance) << "shapes differ";
}
