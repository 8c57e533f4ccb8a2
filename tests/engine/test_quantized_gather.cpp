// SPDX-License-Identifier: Apache-2.0
// Quantized parameter all-gathers (ShardingOptions::gather_quant_block; config
// sharding.gather_quantization = INT8), at 1, 2 and 4 ranks, FULL_SHARD and SHARD_GRAD_OP, fp32
// and bf16 compute: the parameters every unit computes with in forward and backward are, bit for
// bit, every rank's exact fp32 shard quantized on its own and decoded (computed here from the
// shards, gathered exactly, with comm/quantize.h), the same on every rank; the shards, the
// gradients and full_state_dict stay exact; one rank gathers nothing and computes with the exact
// values; and the bytes forward's gathers delivered are every unit's int8 encoding from every rank.
// Quantized gradient reduce-scatters likewise (QuantizedReduce, below).

#include <gtest/gtest.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>

#include <map>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/comm/quantize.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/unit.h"
#include "zeroshard/optim/optimizer.h"

namespace zs = zeroshard;
namespace F = torch::nn::functional;

namespace {

constexpr int64_t kBlock = 16;

// What the units computed with: every parameter's values, recorded inside its unit's forward and
// again when its gradient arrives (backward reads the gathered values then).
struct Seen {
  std::map<std::string, at::Tensor> forward, backward;
};

struct BlockImpl : torch::nn::Module {
  BlockImpl(Seen* seen, std::string name) : seen(seen), name(std::move(name)) {
    fc = register_module("fc", torch::nn::Linear(24, 24));
    // The weight as the unit's backward reads it, recorded when its gradient arrives (the unit is
    // gathered again for its backward then).
    fc->weight.register_hook([this](const at::Tensor& g) {
      this->seen->backward[this->name + ".fc.weight"] = fc->weight.detach().to(at::kFloat).clone();
      return g;
    });
  }
  torch::Tensor forward(torch::Tensor x) {
    for (const auto& p : named_parameters()) seen->forward[name + "." + p.key()] = p.value().detach().to(at::kFloat).clone();
    return torch::tanh(fc(x));
  }
  Seen* seen;
  std::string name;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(Block);

struct NetImpl : torch::nn::Module {
  explicit NetImpl(Seen* seen)
      : b0(register_module("b0", zs::Unit<BlockImpl>(seen, "b0"))),
        b1(register_module("b1", zs::Unit<BlockImpl>(seen, "b1"))),
        head(register_module("head", torch::nn::Linear(24, 3))) {}
  torch::Tensor forward(torch::Tensor x) { return head(b1(b0(x))); }
  zs::Unit<BlockImpl> b0, b1;
  torch::nn::Linear head;
};
TORCH_MODULE(Net);

// Every flat parameter's values as the quantized gather must deliver them: each rank's exact shard
// (gathered here exactly) quantized and decoded on its own, then cut into the parameters.
std::map<std::string, at::Tensor> expected_quantized(zs::ShardingEngine& engine, bool quantized) {
  std::map<std::string, at::Tensor> out;
  const int n = zs::test::world_size();
  for (zs::FlatShard* f : engine.flat_shards()) {
    const at::Tensor shard = f->shard_for_read().to(at::kFloat).contiguous();
    at::Tensor exact = at::empty({f->padded_numel()});
    zs::test::world()->all_gather_into(exact, shard, "test.exact")->wait();
    at::Tensor full = exact;
    if (quantized && n > 1) {
      std::vector<at::Tensor> parts;
      for (int r = 0; r < n; ++r) {
        const at::Tensor part = exact.narrow(0, r * f->shard_numel(), f->shard_numel()).contiguous();
        at::Tensor back = at::empty({f->shard_numel()});
        zs::quant::decode_int8(zs::quant::encode_int8(part, kBlock), kBlock, back);
        parts.push_back(back);
      }
      full = at::cat(parts);
    }
    for (const zs::ParamSlot& s : f->slots()) out[s.name] = full.narrow(0, s.offset, s.numel).view(s.shape);
    f->release_shard();
  }
  return out;
}

struct Case {
  zs::ShardingStrategy strategy;
  c10::ScalarType dtype;
};

void check_case(const Case& c) {
  SCOPED_TRACE(std::string(zs::to_string(c.strategy)) + " " + c10::toString(c.dtype));
  Seen seen;
  torch::manual_seed(3);
  Net net(&seen);
  zs::ShardingOptions o;
  o.strategy = c.strategy;
  o.param_dtype = c.dtype;
  o.gather_quant_block = kBlock;
  zs::ShardingEngine engine(zs::test::session(), net.ptr(), o);
  zs::SgdOptions so;
  so.lr = 0.1;
  const std::unique_ptr<zs::ShardedOptimizer> opt = zs::make_sgd(so);
  const at::Tensor x = torch::randn({6, 24}).add(zs::test::rank());
  const at::Tensor y = torch::randn({6, 3});
  for (int step = 0; step < 2; ++step) {
    const std::map<std::string, at::Tensor> want = expected_quantized(engine, /*quantized=*/true);
    const std::map<std::string, at::Tensor> exact = expected_quantized(engine, /*quantized=*/false);
    seen = Seen{};
    const zs::CommCounters before = engine.comm_counters();
    at::Tensor loss = engine.forward([&] { return F::mse_loss(net->forward(x.to(c.dtype)).to(at::kFloat), y); });
    const int64_t forward_bytes = engine.comm_counters().all_gather_bytes - before.all_gather_bytes;
    loss.backward();
    for (const auto& [name, got] : seen.forward) {
      // Compared after the cast into param_dtype the gather decodes into.
      EXPECT_TRUE(at::equal(got, want.at(name).to(c.dtype).to(at::kFloat))) << name << " in forward, step " << step;
    }
    for (const auto& [name, got] : seen.backward) {
      EXPECT_TRUE(at::equal(got, want.at(name).to(c.dtype).to(at::kFloat))) << name << " in backward, step " << step;
    }
    EXPECT_EQ(seen.forward.size(), 4u);
    EXPECT_EQ(seen.backward.size(), 2u);
    if (zs::test::world_size() > 1) {
      // Quantization changed something (else this test could not tell the paths apart).
      bool differs = false;
      for (const auto& [name, w] : want) differs = differs || !at::equal(w, exact.at(name));
      EXPECT_TRUE(differs);
      // What forward's gathers delivered: every unit's int8 encoding from every rank, once.
      int64_t encoded = 0;
      for (zs::FlatShard* f : engine.flat_shards()) {
        encoded += zs::quant::int8_encoded_bytes(f->shard_numel(), kBlock) * zs::test::world_size();
      }
      EXPECT_EQ(forward_bytes, encoded);
    }
    engine.step(*opt);
    engine.zero_grad();
  }
  // The state dict is the exact fp32 master.
  const std::map<std::string, at::Tensor> exact = expected_quantized(engine, /*quantized=*/false);
  for (const auto& [name, t] : engine.full_state_dict()) EXPECT_TRUE(at::equal(t, exact.at(name))) << name;
}

// Quantized gradient reduce-scatters (ShardingOptions::reduce_quant_block; config
// sharding.reduce_quantization = INT8): every gradient shard is, bit for bit, what
// reduce_scatter_int8_into makes of each rank's unreduced gradient (plain LibTorch's, on the
// rank's own batch, laid out as the flat parameter); the reduction counts its encoded bytes; one
// rank reduces nothing and keeps plain LibTorch's gradient.
void check_quantized_reduce(zs::ShardingStrategy strategy) {
  SCOPED_TRACE(zs::to_string(strategy));
  Seen seen, plain_seen;
  torch::manual_seed(3);
  Net net(&seen);
  torch::manual_seed(3);
  Net plain(&plain_seen);
  zs::ShardingOptions o;
  o.strategy = strategy;
  o.reduce_quant_block = kBlock;
  zs::ShardingEngine engine(zs::test::session(), net.ptr(), o);
  const at::Tensor x = torch::randn({6, 24}).add(zs::test::rank());
  const at::Tensor y = torch::randn({6, 3});
  const zs::CommCounters before = engine.comm_counters();
  engine.forward([&] { return F::mse_loss(net->forward(x), y); }).backward();
  F::mse_loss(plain->forward(x), y).backward();
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : plain->named_parameters()) grads[p.key()] = p.value().grad();
  const int n = zs::test::world_size();
  const std::vector<zs::ParamShard> shards = engine.param_shards();
  size_t k = 0;
  int64_t encoded = 0;
  bool differs = false;
  for (zs::FlatShard* f : engine.flat_shards()) {
    if (!f->trainable()) continue;
    ASSERT_LT(k, shards.size());
    const zs::ParamShard& got = shards[k++];
    ASSERT_EQ(got.name, f->name());
    at::Tensor local = at::zeros({f->padded_numel()});
    for (const zs::ParamSlot& s : f->slots()) local.narrow(0, s.offset, s.numel).copy_(grads.at(s.name).view({-1}));
    if (n == 1) {
      EXPECT_TRUE(at::equal(got.grad, local.narrow(0, 0, f->shard_numel()))) << f->name();
      continue;
    }
    at::Tensor want = at::empty({f->shard_numel()}), exact = at::empty({f->shard_numel()});
    zs::test::world()->reduce_scatter_int8_into(want, local, zs::ReduceOp::kAvg, kBlock, "test.q")->wait();
    zs::test::world()->reduce_scatter_into(exact, local, zs::ReduceOp::kAvg, "test.exact")->wait();
    EXPECT_TRUE(at::equal(got.grad, want)) << f->name() << ": max |diff| " << (got.grad - want).abs().max().item<float>();
    differs = differs || !at::equal(want, exact);
    encoded += n * zs::quant::int8_encoded_bytes(f->shard_numel(), kBlock);
  }
  EXPECT_EQ(k, shards.size());
  const int64_t reduced = engine.comm_counters().reduce_bytes - before.reduce_bytes;
  if (n > 1) {
    EXPECT_TRUE(differs) << "quantization changed no gradient: this test could not tell the paths apart";
    EXPECT_EQ(reduced, encoded);
  } else {
    EXPECT_EQ(reduced, 0);
  }
}

TEST(QuantizedReduce, GradientShardsAreTheInt8ReduceScatterOfEveryRanksGradient) {
  check_quantized_reduce(zs::ShardingStrategy::kFullShard);
  check_quantized_reduce(zs::ShardingStrategy::kShardGradOp);
}

TEST(QuantizedGather, UnitsComputeWithEveryRanksShardQuantizedOnItsOwn) {
  for (const Case& c : {Case{zs::ShardingStrategy::kFullShard, at::kFloat},
                        Case{zs::ShardingStrategy::kFullShard, at::kBFloat16},
                        Case{zs::ShardingStrategy::kShardGradOp, at::kFloat}}) {
    check_case(c);
  }
}

}  // namespace
