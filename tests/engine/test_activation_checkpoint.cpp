// SPDX-License-Identifier: Apache-2.0
// Activation checkpointing must not change training: gradients of parameters and inputs are
// bitwise those of the plain run (dropout included: the recomputation draws the same masks), and
// the RNG stream after backward is where the plain run leaves it.

#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/engine/autocast.h"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/models/gpt.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;

namespace {

// Linear -> GELU -> Dropout(0.3) -> Linear, residual.
struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t dim)
      : fc1(register_module("fc1", torch::nn::Linear(dim, 2 * dim))),
        drop(register_module("drop", torch::nn::Dropout(0.3))),
        fc2(register_module("fc2", torch::nn::Linear(2 * dim, dim))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + fc2(drop(torch::gelu(fc1(x)))); }
  torch::nn::Linear fc1;
  torch::nn::Dropout drop;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Block);

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t dim, int blocks) {
    for (int i = 0; i < blocks; ++i) layers.push_back(register_module("b" + std::to_string(i), Block(dim)));
    head = register_module("head", torch::nn::Linear(dim, 1));
  }
  torch::Tensor forward(torch::Tensor x, bool ckpt) {
    for (auto& b : layers) {
      x = ckpt ? zs::checkpoint([b](const at::Tensor& t) mutable { return b(t); }, x) : b(x);
    }
    return head(x);
  }
  std::vector<Block> layers;
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(Mlp);

// Parameters' and input's gradients of one loss+backward, and a draw from the RNG afterwards.
struct Grads {
  std::vector<torch::Tensor> param_grads;
  torch::Tensor input_grad;
  torch::Tensor next_random;
};

template <typename Model, typename Fwd>
Grads run_once(Model& model, const torch::Tensor& input, Fwd&& fwd) {
  for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  torch::Tensor x = input.clone().requires_grad_(true);
  torch::manual_seed(1234);  // same dropout masks for both runs
  torch::Tensor loss = fwd(x).pow(2).mean();
  loss.backward();
  Grads r;
  for (auto& p : model->parameters()) r.param_grads.push_back(p.grad().clone());
  r.input_grad = x.grad().clone();
  r.next_random = torch::rand({8});
  return r;
}

void expect_bitwise(const Grads& plain, const Grads& ckpt) {
  ASSERT_EQ(plain.param_grads.size(), ckpt.param_grads.size());
  for (size_t i = 0; i < plain.param_grads.size(); ++i) {
    ASSERT_TRUE(plain.param_grads[i].defined() && ckpt.param_grads[i].defined()) << "parameter " << i;
    EXPECT_TRUE(at::equal(plain.param_grads[i], ckpt.param_grads[i]))
        << "parameter " << i << " max|diff| = " << (plain.param_grads[i] - ckpt.param_grads[i]).abs().max().item<double>();
  }
  EXPECT_TRUE(at::equal(plain.input_grad, ckpt.input_grad))
      << "input grad max|diff| = " << (plain.input_grad - ckpt.input_grad).abs().max().item<double>();
  EXPECT_TRUE(at::equal(plain.next_random, ckpt.next_random)) << "checkpointing shifted the RNG stream";
}

}  // namespace

TEST(ActivationCheckpoint, DropoutMlpGradientsAreBitwiseEqual) {
  torch::manual_seed(0);
  Mlp model(16, 3);
  model->train();
  torch::Tensor input = torch::randn({32, 16});
  Grads plain = run_once(model, input, [&](const torch::Tensor& x) { return model->forward(x, false); });
  Grads ckpt = run_once(model, input, [&](const torch::Tensor& x) { return model->forward(x, true); });
  expect_bitwise(plain, ckpt);
  // Dropout really was active (otherwise the RNG part proves nothing): another seed differs.
  torch::manual_seed(99);
  torch::Tensor other = model->forward(input, false);
  torch::manual_seed(1234);
  EXPECT_FALSE(at::equal(other, model->forward(input, false)));
}

TEST(ActivationCheckpoint, RecomputeUnderTheForwardsAutocast) {
  // Under CPU bf16 autocast the recomputation must run in bf16 too, or its graph would not match
  // the forward's (and the gradients would differ from the plain autocast run).
  torch::manual_seed(0);
  Mlp model(16, 3);
  model->train();
  torch::Tensor input = torch::randn({32, 16});
  auto under_autocast = [&](bool ckpt) {
    return [&model, ckpt](const torch::Tensor& x) {
      zs::AutocastGuard guard(c10::DeviceType::CPU, torch::kBFloat16);
      torch::Tensor out = model->forward(x, ckpt);
      EXPECT_EQ(out.scalar_type(), torch::kBFloat16);
      return out.to(torch::kFloat);
    };
  };
  Grads plain = run_once(model, input, under_autocast(false));
  Grads ckpt = run_once(model, input, under_autocast(true));
  expect_bitwise(plain, ckpt);
  EXPECT_FALSE(zs::autocast_dtype(c10::DeviceType::CPU).has_value()) << "the guard must restore autocast off";
}

TEST(ActivationCheckpoint, RecomputationRunsInBackward) {
  int calls = 0;
  torch::Tensor w = torch::randn({4, 4}, torch::requires_grad());
  torch::Tensor x = torch::randn({2, 4}, torch::requires_grad());
  torch::Tensor y = zs::checkpoint(
      [&](const at::Tensor& t) {
        ++calls;
        EXPECT_EQ(calls == 2, c10::GradMode::is_enabled()) << "call " << calls;
        return torch::tanh(t.matmul(w));
      },
      x);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  EXPECT_EQ(calls, 2);
  torch::Tensor x2 = x.detach().clone().requires_grad_(true), w2 = w.detach().clone().requires_grad_(true);
  torch::tanh(x2.matmul(w2)).sum().backward();
  EXPECT_TRUE(at::equal(x.grad(), x2.grad()));
  EXPECT_TRUE(at::equal(w.grad(), w2.grad()));
}

TEST(ActivationCheckpoint, MultipleInputsSomeWithoutGrad) {
  torch::manual_seed(3);
  torch::nn::Linear lin(6, 6);
  torch::nn::Dropout drop(0.5);
  auto fn = [&](const std::vector<at::Tensor>& in) { return drop(lin(in[0]) * in[1] + in[2].sum()); };
  torch::Tensor a0 = torch::randn({5, 6}), b0 = torch::randn({5, 6}), c0 = torch::randn({3});
  auto run = [&](bool ckpt) {
    lin->zero_grad();
    torch::Tensor a = a0.clone().requires_grad_(true);
    torch::Tensor b = b0.clone();  // no grad
    torch::Tensor c = c0.clone().requires_grad_(true);
    torch::manual_seed(5);
    torch::Tensor out = ckpt ? zs::checkpoint(fn, {a, b, c}) : fn({a, b, c});
    (out * out).sum().backward();
    EXPECT_FALSE(b.grad().defined());
    return std::vector<torch::Tensor>{a.grad(), c.grad(), lin->weight.grad().clone(), lin->bias.grad().clone(),
                                      torch::rand({4})};
  };
  auto plain = run(false), ckpt = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(ckpt[i].defined()) << i;
    EXPECT_TRUE(at::equal(plain[i], ckpt[i])) << "tensor " << i;
  }
}

TEST(ActivationCheckpoint, MultipleOutputs) {
  torch::Tensor x0 = torch::randn({3, 4});
  auto fn = [](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{in[0].sin(), in[0].exp().sum(1), in[0].argmax(1)};
  };
  torch::Tensor x1 = x0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
  auto plain = fn({x1});
  auto ckpt = zs::checkpoint_multi(fn, {x2});
  ASSERT_EQ(ckpt.size(), 3u);
  EXPECT_FALSE(ckpt[2].requires_grad());  // integer output: not differentiable
  EXPECT_TRUE(at::equal(plain[2], ckpt[2]));
  // Only the first output is used: the second gets a zero gradient.
  plain[0].sum().backward();
  ckpt[0].sum().backward();
  EXPECT_TRUE(at::equal(x1.grad(), x2.grad()));
}

TEST(ActivationCheckpoint, NoInputRequiringGradIsAnError) {
  torch::nn::Linear lin(3, 3);
  torch::Tensor x = torch::randn({2, 3});
  EXPECT_THROW(zs::checkpoint([&](const at::Tensor& t) { return lin(t); }, x), zs::UsageError);
  // Without grad mode the function just runs.
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(at::equal(zs::checkpoint([&](const at::Tensor& t) { return lin(t); }, x), lin(x)));
}

TEST(ActivationCheckpoint, SequentialSegmentsEqualPlain) {
  torch::manual_seed(11);
  torch::nn::Sequential seq(torch::nn::Linear(8, 8), torch::nn::GELU(), torch::nn::Dropout(0.3), torch::nn::Linear(8, 8),
                            torch::nn::Tanh(), torch::nn::Dropout(0.2), torch::nn::Linear(8, 2));
  seq->train();
  torch::Tensor input = torch::randn({10, 8});
  Grads plain = run_once(seq, input, [&](const torch::Tensor& x) { return seq->forward(x); });
  for (int segments : {1, 2, 3, static_cast<int>(seq->size())}) {
    SCOPED_TRACE("segments = " + std::to_string(segments));
    Grads ckpt = run_once(seq, input, [&](const torch::Tensor& x) { return zs::checkpoint_sequential(seq, segments, x); });
    expect_bitwise(plain, ckpt);
  }
}

TEST(ActivationCheckpoint, SequentialBadSegments) {
  torch::nn::Sequential seq(torch::nn::Linear(2, 2), torch::nn::ReLU());
  torch::Tensor x = torch::randn({1, 2}, torch::requires_grad());
  for (int bad : {0, -1, 3}) {
    try {
      zs::checkpoint_sequential(seq, bad, x);
      ADD_FAILURE() << "segments = " << bad << " accepted";
    } catch (const zs::UsageError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("segments = " + std::to_string(bad)), std::string::npos) << msg;
      EXPECT_NE(msg.find("2 modules"), std::string::npos) << msg;
    }
  }
}

// Which blocks of the built-in GPT recompute (activation_checkpointing.*).
TEST(ActivationCheckpoint, BlocksThatCheckpoint) {
  zs::models::ActivationCheckpointing c;
  EXPECT_FALSE(c.applies_to(0));  // disabled by default
  c.enabled = true;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(c.applies_to(i)) << i;
  c.every_n_blocks = 3;
  std::vector<bool> got;
  for (int i = 0; i < 7; ++i) got.push_back(c.applies_to(i));
  EXPECT_EQ(got, (std::vector<bool>{true, false, false, true, false, false, true}));
  EXPECT_THROW(c.applies_to(-1), zs::UsageError);
  c.every_n_blocks = 0;
  const std::string err = zs::test::error_text_of<zs::UsageError>([&] { c.applies_to(0); });
  EXPECT_TRUE(zs::test::contains(err, "ActivationCheckpointing.every_n_blocks = 0 is out of range; allowed: >= 1")) << err;
}
