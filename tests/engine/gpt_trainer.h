// SPDX-License-Identifier: Apache-2.0
#pragma once
// A small GPT under a ShardingEngine with deterministic, rank-dependent data per step: shared by
// the offload and training-checkpoint tests, which compare runs that must agree bit for bit. The
// model and the data live on the session's device (the CPU, or cuda:<local rank> in GPU tests).

#include <torch/nn/functional/loss.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "engine/models.h"
#include "zeroshard/optim/optimizer.h"
#include "zeroshard/optim/param_groups.h"
#include "zeroshard/engine/engine.h"

namespace zs_test {

inline GptConfig trainer_gpt_config() {
  GptConfig c;
  c.vocab = 37, c.dim = 24, c.heads = 2, c.layers = 2, c.seq = 8;
  return c;
}

inline zeroshard::OptimizerOptions trainer_adamw_options() {
  zeroshard::OptimizerOptions o;
  o.type = zeroshard::OptimizerOptions::Type::kAdamW;
  o.lr = 3e-3;
  o.beta2 = 0.95;
  o.weight_decay = 0.1;
  return o;
}

// SGD with Nesterov momentum over the same groups: the other optimizer the offload tests compare.
inline zeroshard::OptimizerOptions trainer_sgd_options() {
  zeroshard::OptimizerOptions o = trainer_adamw_options();
  o.type = zeroshard::OptimizerOptions::Type::kSgd;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.nesterov = true;
  return o;
}

// The Trainer's groups for trainer_adamw_options() (its weight decay; no decay on 1-D parameters
// and the tied embedding) plus a rule, so that every comparison built on GptTrainer covers
// parameter groups.
inline zeroshard::ParamGroupOptions trainer_param_groups() {
  zeroshard::ParamGroupOptions g;
  g.weight_decay = trainer_adamw_options().weight_decay;
  g.rules.push_back({"h1.fc.*", 0.3, 0.5});
  return g;
}

struct GptTrainer {
  explicit GptTrainer(zeroshard::ShardingOptions o = {}, uint64_t init_seed = 11, GptConfig cfg = trainer_gpt_config())
      : config(cfg) {
    torch::manual_seed(init_seed);
    model = Gpt(config);
    model->to(zeroshard::test::session().device());
    engine = std::make_unique<zeroshard::ShardingEngine>(zeroshard::test::session(), model.ptr(), o);
    engine->set_param_groups(trainer_param_groups());
  }
  // Gradients of step `step` (data depends on step and rank only), clipped.
  double forward_backward(int step) {
    torch::manual_seed(1000 + 31 * step + zeroshard::test::rank());
    torch::Tensor x = torch::randint(config.vocab, {3, config.seq}, torch::kLong);
    torch::Tensor y = torch::randint(config.vocab, {3, config.seq}, torch::kLong);
    x = x.to(zeroshard::test::session().device());
    y = y.to(zeroshard::test::session().device());
    torch::Tensor loss = engine->forward(
        [&] { return torch::cross_entropy_loss(model->forward(x).view({-1, config.vocab}), y.view({-1})); });
    loss.backward();
    engine->clip_grad_norm(1.0);
    return loss.item<double>();
  }
  // Steps [from, to); returns the last loss.
  double train(zeroshard::ShardedOptimizer& opt, int from, int to) {
    double loss = 0;
    for (int s = from; s < to; ++s) {
      loss = forward_backward(s);
      engine->step(opt);
      engine->zero_grad();
    }
    return loss;
  }
  std::map<std::string, at::Tensor> params() { return engine->full_state_dict(); }

  GptConfig config;
  Gpt model{nullptr};
  std::unique_ptr<zeroshard::ShardingEngine> engine;
};

inline double max_diff(const std::map<std::string, at::Tensor>& a, const std::map<std::string, at::Tensor>& b) {
  double worst = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    worst = std::max(worst, it == b.end() ? HUGE_VAL : zeroshard::test::max_abs_diff(t, it->second));
  }
  return worst;
}

}  // namespace zs_test
