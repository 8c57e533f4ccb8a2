// SPDX-License-Identifier: Apache-2.0
// LoRA: adapters over a frozen base, trained sharded, equal element by element to a plain
// LibTorch LoRA written here (the base weights and the adapters' initial values copied, the
// forward x W^T + b + (x A^T) B^T alpha/r spelled out, torch::optim::AdamW over A and B only), at
// 1, 2 and 4 ranks, for every strategy and with activation checkpointing; then the merge into
// plain weights (a model without adapters computes what the adapted one does) and the errors.
// With the base's Linear weights stored in NF4 (precision.frozen_linear), the same comparison
// against the plain LoRA over the reference quantiser's round trip of those weights, and resume.

#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "common/nf4_reference.h"
#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_file.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/activation_checkpoint.h"
#include "zeroshard/checkpoint/checkpoint.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/adapt/nf4.h"
#include "zeroshard/checkpoint/pretrained.h"
#include "zeroshard/engine/sharded_init.h"

namespace zs = zeroshard;
using Strategy = zs::ShardingStrategy;

namespace {

constexpr int64_t kIn = 6, kDim = 16, kOut = 5;
constexpr int kSteps = 12, kLocalBatch = 3;
constexpr double kLr = 2e-2, kWd = 0.01, kClip = 1.0;

struct BlockImpl : torch::nn::Module {
  BlockImpl()
      : fc1(register_module("fc1", zs::lora::Linear(kDim, 2 * kDim))),
        fc2(register_module("fc2", zs::lora::Linear(2 * kDim, kDim))) {}
  torch::Tensor forward(torch::Tensor x) { return x + fc2(torch::tanh(fc1(x))); }
  zs::lora::Linear fc1, fc2;
};

struct NetImpl : torch::nn::Module {
  NetImpl() : input(register_module("input", zs::lora::Linear(kIn, kDim))) {
    for (int i = 0; i < 2; ++i) blocks.push_back(register_module("b" + std::to_string(i), zs::Unit<BlockImpl>()));
    head = register_module("head", zs::lora::Linear(kDim, kOut));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = input(x);
    for (auto& b : blocks) x = checkpoint ? zs::checkpoint([&b](const at::Tensor& t) { return b(t); }, x) : b(x);
    return head(x);
  }
  zs::lora::Linear input{nullptr}, head{nullptr};
  std::vector<zs::Unit<BlockImpl>> blocks;
  bool checkpoint = false;
};
TORCH_MODULE(Net);

zs::lora::Options lora_options() {
  zs::lora::Options o;
  o.rank = 3;
  o.alpha = 6;
  o.targets = {"input", "b*.fc?"};  // head stays frozen, without an adapter
  return o;
}

// The global batch of a step.
std::pair<torch::Tensor, torch::Tensor> batch(int step, int world) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(300 + step);
  return {torch::randn({kLocalBatch * world, kIn}, g), torch::randn({kLocalBatch * world, kOut}, g)};
}

Net adapted_net() {
  torch::manual_seed(17);
  Net net;
  zs::lora::apply(*net, lora_options());
  // B starts at zero; give it a nudge so the first step's gradients of A are not zero either.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : net->named_parameters()) {
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.05);
    }
  }
  return net;
}

// Plain LibTorch LoRA: each layer's tensors by name, the forward written out.
struct PlainLora {
  std::map<std::string, torch::Tensor> t;  // copies of the adapted net's initial state
  double scale = 0;

  torch::Tensor layer(const std::string& name, const torch::Tensor& x) {
    torch::Tensor y = torch::linear(x, t.at(name + ".weight"), t.at(name + ".bias"));
    if (t.count(name + ".lora_A")) y = y + torch::linear(torch::linear(x, t.at(name + ".lora_A")), t.at(name + ".lora_B")) * scale;
    return y;
  }
  torch::Tensor forward(torch::Tensor x) {
    x = layer("input", x);
    for (const std::string b : {"b0", "b1"}) x = x + layer(b + ".fc2", torch::tanh(layer(b + ".fc1", x)));
    return layer("head", x);
  }
};

// Plain LoRA from the values `start` (the adapters, lora_A and lora_B, train).
std::map<std::string, torch::Tensor> train_plain_from(const std::map<std::string, torch::Tensor>& start, int world) {
  PlainLora ref;
  ref.scale = lora_options().alpha / lora_options().rank;
  std::vector<torch::Tensor> trainable;
  for (const auto& [name, value] : start) {
    const bool adapter = zs::lora::has_leaf(name, "lora_A") || zs::lora::has_leaf(name, "lora_B");
    ref.t[name] = value.detach().clone().requires_grad_(adapter);
    if (adapter) trainable.push_back(ref.t[name]);
  }
  EXPECT_EQ(trainable.size(), 10u) << "lora_A and lora_B of input and the four block layers";
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(kLr).weight_decay(kWd));
  for (int step = 0; step < kSteps; ++step) {
    auto [x, y] = batch(step, world);
    opt.zero_grad();
    torch::mse_loss(ref.forward(x), y).backward();
    torch::nn::utils::clip_grad_norm_(trainable, kClip);
    opt.step();
  }
  return ref.t;
}

// From adapted_net(); `nf4`: every Linear weight (all frozen) replaced by its NF4 round trip, as
// the engine stores it.
std::map<std::string, torch::Tensor> train_plain(int world, bool nf4 = false) {
  std::map<std::string, torch::Tensor> start;
  for (auto& p : adapted_net()->named_parameters()) {
    const bool linear_weight = p.key().size() > 7 && p.key().substr(p.key().size() - 7) == ".weight";
    start[p.key()] = nf4 && linear_weight ? zs_test::nf4_reference_roundtrip(p.value()) : p.value().detach();
  }
  return train_plain_from(start, world);
}

struct ShardedRun {
  Strategy strategy = Strategy::kFullShard;
  bool checkpoint = false;
  bool nf4 = false;
  std::string save_dir;  // saves after kSteps / 2 steps when set
  std::string load_dir;  // resumes from there and runs the remaining steps when set
  // Built under a ShardedInit with the LoRA unit hook (each block adapted as it is sharded) instead of
  // adapted_net(); its state before training goes to `initial`.
  bool sharded_init = false;
  std::map<std::string, torch::Tensor>* initial = nullptr;
  // Parameter and gradient shards (base and adapters) on NVMe under this directory, the adapters'
  // optimizer state in host memory (OffloadedOptimizer).
  std::string offload_dir;
};

std::map<std::string, torch::Tensor> train_sharded(const ShardedRun& run) {
  const int world = zs::test::world_size(), rank = zs::test::rank();
  zs::ShardingOptions o;
  o.strategy = run.strategy;
  o.hybrid_group_size = world >= 2 ? 2 : 1;
  if (run.nf4) o.unit_hooks.push_back(zs::nf4::frozen_linear_hook());
  if (!run.offload_dir.empty()) {
    o.offload_params.target = zs::OffloadTarget::kNvme;
    o.offload_params.nvme_path = run.offload_dir;
    o.offload_params.block_size = 4096;
    o.offload_grads = o.offload_params;
  }
  std::unique_ptr<zs::ShardedInit> init;
  if (run.sharded_init) {
    zs::ShardingOptions with_lora = o;
    with_lora.unit_hooks.push_back(zs::lora::unit_hook(lora_options()));
    init = std::make_unique<zs::ShardedInit>(zs::test::session(), with_lora);
  }
  Net net = run.sharded_init ? Net() : adapted_net();
  net->checkpoint = run.checkpoint;
  std::unique_ptr<zs::ShardingEngine> owned = run.sharded_init
                                                  ? std::make_unique<zs::ShardingEngine>(*init, net.ptr())
                                                  : std::make_unique<zs::ShardingEngine>(zs::test::session(), net.ptr(), o);
  zs::ShardingEngine& engine = *owned;
  EXPECT_EQ(zs::lora::adapted_layers(*net), (std::vector<std::string>{"input", "b0.fc1", "b0.fc2", "b1.fc1", "b1.fc2"}));
  if (run.initial != nullptr) *run.initial = engine.full_state_dict();
  EXPECT_EQ(engine.num_trainable_params(), 3 * (kIn + kDim) + 4 * 3 * (kDim + 2 * kDim));
  zs::AdamOptions ao;
  ao.lr = kLr;
  ao.weight_decay = kWd;
  std::unique_ptr<zs::ShardedOptimizer> opt = zs::make_adamw(ao);
  if (!run.offload_dir.empty()) {
    zs::OptimizerOptions c;
    c.type = zs::OptimizerOptions::Type::kAdamW;
    c.lr = kLr;
    c.weight_decay = kWd;
    zs::OffloadOptions oo;
    oo.target = zs::OffloadTarget::kCpu;
    oo.params = zs::OffloadTarget::kNvme;
    oo.nvme_path = run.offload_dir;
    opt = std::make_unique<zs::OffloadedOptimizer>(c, oo, rank);
  }
  int first = 0;
  if (!run.load_dir.empty()) {
    zs::Checkpointer ckpt(engine, {run.load_dir});
    first = static_cast<int>(ckpt.load(*opt).step);
  }
  for (int step = first; step < kSteps; ++step) {
    if (!run.save_dir.empty() && step == kSteps / 2) {
      zs::Checkpointer ckpt(engine, {run.save_dir});
      ckpt.save(*opt, {.step = step});
      break;
    }
    auto [x, y] = batch(step, world);
    torch::Tensor loss = engine.forward([&] {
      return torch::mse_loss(net->forward(x.narrow(0, rank * kLocalBatch, kLocalBatch)),
                             y.narrow(0, rank * kLocalBatch, kLocalBatch));
    });
    loss.backward();
    engine.clip_grad_norm(kClip);
    engine.step(*opt);
    engine.zero_grad();
  }
  return engine.full_state_dict();
}

// A fresh folder all ranks use (rank 0 makes it), one per world size: the np1/np2/np4 runs may
// overlap.
std::string shared_folder(const std::string& name) {
  const std::string path =
      (std::filesystem::current_path() / (name + "_np" + std::to_string(zs::test::world_size()))).string();
  if (zs::test::rank() == 0) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  zs::test::world()->barrier("test.shared_folder")->wait();
  return path;
}

// The largest |a - b| over the reference's tensors, and which one.
std::pair<double, std::string> worst_difference(const std::map<std::string, torch::Tensor>& got,
                                                const std::map<std::string, torch::Tensor>& want) {
  double worst = 0;
  std::string worst_name;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    const double d = it == got.end() ? HUGE_VAL : zs::test::max_abs_diff(it->second, w);
    if (d > worst || worst_name.empty()) worst = d, worst_name = name;
  }
  return {worst, worst_name};
}

TEST(Lora, ShardedTrainingEqualsPlainLibTorchLora) {
  const auto ref = train_plain(zs::test::world_size());
  const Net initial = adapted_net();
  for (Strategy s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard, Strategy::kHybridShard}) {
    for (bool checkpoint : {false, true}) {
      if (checkpoint && s != Strategy::kFullShard) continue;
      const auto got = train_sharded({s, checkpoint});
      const auto [worst, worst_name] = worst_difference(got, ref);
      EXPECT_LE(worst, 1e-5) << zs::to_string(s) << (checkpoint ? " + checkpointing" : "") << ": " << worst_name
                             << " differs by " << worst;
      // The base did not move; the adapters did.
      const auto start = initial->named_parameters();
      EXPECT_EQ(zs::test::max_abs_diff(got.at("b0.fc1.weight"), start["b0.fc1.weight"]), 0.0);
      EXPECT_EQ(zs::test::max_abs_diff(got.at("head.weight"), start["head.weight"]), 0.0);
      EXPECT_GT(zs::test::max_abs_diff(got.at("b1.fc2.lora_A"), start["b1.fc2.lora_A"]), 1e-3);
      if (zs::test::rank() == 0) {
        std::printf("  LoRA %s%s at %d rank(s): max |sharded - plain| = %.3g (%s)\n", zs::to_string(s),
                    checkpoint ? " + checkpointing" : "", zs::test::world_size(), worst, worst_name.c_str());
      }
    }
  }
}

// A unit holding a torch::nn::Linear (which cannot carry an adapter) beside a lora::Linear.
struct TorchLinearBlockImpl : torch::nn::Module {
  TorchLinearBlockImpl() : fc(register_module("fc", torch::nn::Linear(4, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};
struct WithTorchLinearUnitImpl : torch::nn::Module {
  WithTorchLinearUnitImpl()
      : head(register_module("head", zs::lora::Linear(4, 4))),
        block(register_module("block", zs::Unit<TorchLinearBlockImpl>())) {}
  zs::lora::Linear head;
  zs::Unit<TorchLinearBlockImpl> block;
};
TORCH_MODULE(WithTorchLinearUnit);

// LoRA with a ShardedInit: each block gets its adapters as it is built and sharded (no rank ever
// holds the whole base), lora::apply then adapts the layers outside units; training equals the
// plain LoRA from the same initial values, with the base whole and in NF4.
TEST(Lora, ShardedInitAdaptsEachUnitAsItIsBuilt) {
  for (bool nf4 : {false, true}) {
    std::map<std::string, torch::Tensor> initial;
    ShardedRun run{Strategy::kFullShard, /*checkpoint=*/true, nf4};
    run.sharded_init = true;
    run.initial = &initial;
    const auto got = train_sharded(run);
    const auto ref = train_plain_from(initial, zs::test::world_size());
    const auto [worst, worst_name] = worst_difference(got, ref);
    EXPECT_LE(worst, 1e-5) << (nf4 ? "NF4: " : "") << worst_name << " differs by " << worst;
    EXPECT_GT(zs::test::max_abs_diff(got.at("b1.fc2.lora_B"), initial.at("b1.fc2.lora_B")), 1e-3) << "did not train";
    EXPECT_EQ(zs::test::max_abs_diff(got.at("b1.fc2.weight"), initial.at("b1.fc2.weight")), 0.0);
    if (zs::test::rank() == 0) {
      std::printf("  LoRA under a ShardedInit%s at %d rank(s): max |sharded - plain| = %.3g (%s)\n",
                  nf4 ? ", NF4 base" : "", zs::test::world_size(), worst, worst_name.c_str());
    }
  }
  // Units sharded without the LoRA unit hook cannot get adapters afterwards; patterns that name one unit's
  // path cannot be told apart when a unit is sharded.
  {
    zs::ShardedInit init(zs::test::session(), zs::ShardingOptions{});
    Net net;
    const std::string err = zs::test::error_text_of<zs::UsageError>([&] { zs::lora::apply(*net, lora_options()); });
    EXPECT_TRUE(zs::test::contains(err, "'b0.fc1' was sharded as it was built (ShardedInit) before an adapter could be "
                                        "added: put lora::unit_hook(options) into the ShardingOptions' unit_hooks before building the model"))
        << err;
    zs::ShardingEngine engine(init, net.ptr());
  }
  {
    zs::lora::Options one = lora_options();
    one.targets = {"b0.fc1"};
    zs::ShardingOptions o;
    o.unit_hooks.push_back(zs::lora::unit_hook(one));
    zs::ShardedInit init(zs::test::session(), o);
    Net net;
    zs::lora::Options other = one;
    other.rank = 2;
    EXPECT_TRUE(zs::test::contains(zs::test::error_text_of<zs::UsageError>([&] { zs::lora::apply(*net, other); }),
                                   "lora::apply: the options differ from those of the ShardedInit's LoRA unit hook "
                                   "(rank 3, alpha 6); pass the same options to both"));
    // The engine runs the hook on the finished model: 'b0.fc1' names one unit's layer, but under
    // a ShardedInit every unit's fc1 got an adapter.
    const std::string err =
        zs::test::error_text_of<zs::UsageError>([&] { zs::ShardingEngine engine(init, net.ptr()); });
    EXPECT_TRUE(zs::test::contains(err, "lora::Options.targets: 'b1.fc1' got an adapter when its unit was sharded but matches no "
                                        "pattern by its full name"))
        << err;
  }
  {
    // A torch::nn::Linear inside a sharded unit that the patterns match: named, as without a ShardedInit.
    zs::lora::Options all;
    all.rank = 2;
    all.targets = {"*"};
    zs::ShardingOptions o;
    o.unit_hooks.push_back(zs::lora::unit_hook(all));
    zs::ShardedInit init(zs::test::session(), o);
    WithTorchLinearUnit m;
    const std::string err =
        zs::test::error_text_of<zs::UsageError>([&] { zs::ShardingEngine engine(init, m.ptr()); });
    EXPECT_TRUE(zs::test::contains(err, "lora::Options.targets match 'block.fc', a torch::nn::Linear")) << err;
  }
}

// Offload: the base's and the adapters' parameter shards and the adapters' gradient shards on
// NVMe, the adapters' AdamW state in host memory; the same training as plain LoRA.
TEST(Lora, OffloadedParametersAndGradientsTrainAsPlainLora) {
  const std::string dir = shared_folder("lora_offload");
  const auto ref = train_plain(zs::test::world_size());
  ShardedRun run{Strategy::kFullShard, /*checkpoint=*/true};
  run.offload_dir = dir;
  const auto got = train_sharded(run);
  const auto [worst, worst_name] = worst_difference(got, ref);
  EXPECT_LE(worst, 1e-5) << worst_name << " differs by " << worst;
  if (zs::test::rank() == 0) {
    std::printf("  LoRA, parameters and gradients on NVMe, optimizer on the host, at %d rank(s): max |sharded - "
                "plain| = %.3g (%s)\n", zs::test::world_size(), worst, worst_name.c_str());
  }
  zs::test::world()->barrier("test.dir_done")->wait();
  if (zs::test::rank() == 0) std::filesystem::remove_all(dir);
}

// QLoRA's base: every Linear weight (frozen) in NF4. The engine computes with the dequantised
// weights, so training equals the plain LoRA over the reference quantiser's round trip of them;
// the full state dict hands out those dequantised values; and a checkpoint resumes exactly.
TEST(Lora, Nf4BaseTrainsAsPlainLoraOverTheReferenceRoundTrip) {
  const auto ref = train_plain(zs::test::world_size(), /*nf4=*/true);
  const Net initial = adapted_net();
  const auto start = initial->named_parameters();
  for (Strategy s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard, Strategy::kHybridShard}) {
    for (bool checkpoint : {false, true}) {
      if (checkpoint && s != Strategy::kFullShard) continue;
      const auto got = train_sharded({s, checkpoint, /*nf4=*/true});
      const auto [worst, worst_name] = worst_difference(got, ref);
      EXPECT_LE(worst, 1e-5) << zs::to_string(s) << (checkpoint ? " + checkpointing" : "") << ": " << worst_name
                             << " differs by " << worst;
      // The base is the round trip (not the original), bit for bit; biases stay fp32.
      for (const std::string name : {"input.weight", "b0.fc1.weight", "b1.fc2.weight", "head.weight"}) {
        EXPECT_EQ(zs::test::max_abs_diff(got.at(name), zs_test::nf4_reference_roundtrip(start[name])), 0.0) << name;
        EXPECT_GT(zs::test::max_abs_diff(got.at(name), start[name]), 1e-4) << name << " was not quantised";
      }
      EXPECT_EQ(zs::test::max_abs_diff(got.at("b0.fc1.bias"), start["b0.fc1.bias"]), 0.0);
      if (zs::test::rank() == 0) {
        std::printf("  LoRA + NF4 base %s%s at %d rank(s): max |sharded - plain| = %.3g (%s)\n", zs::to_string(s),
                    checkpoint ? " + checkpointing" : "", zs::test::world_size(), worst, worst_name.c_str());
      }
    }
  }
  const std::string root = shared_folder("lora_nf4_ckpt");
  ShardedRun first{Strategy::kFullShard, false, true};
  first.save_dir = root;
  train_sharded(first);
  ShardedRun second{Strategy::kFullShard, false, true};
  second.load_dir = root;
  const auto resumed = train_sharded(second);
  const auto straight = train_sharded({Strategy::kFullShard, false, true});
  const auto [d, name] = worst_difference(resumed, straight);
  EXPECT_EQ(d, 0.0) << "resumed from step " << kSteps / 2 << ": " << name << " differs by " << d;
  // Resumed without NF4: the error names the unit whose frozen weights are stored otherwise.
  ShardedRun plain{Strategy::kFullShard, false, /*nf4=*/false};
  plain.load_dir = root;
  const std::string err = zs::test::error_text_of<zs::CheckpointError>([&] { train_sharded(plain); });
  EXPECT_CONTAINS(err, "stores frozen weights of unit '<root>' as nf4, the model stores that unit's as fp32: resume "
                       "with the storage the run was saved with (precision.frozen_linear; finetune_llama --nf4)");
  zs::test::world()->barrier("test.root_done")->wait();
  if (zs::test::rank() == 0) std::filesystem::remove_all(root);
}

// Pretrained weights (a base without adapters, safetensors) load into an NF4 base: each unit's
// shard is quantised as it is loaded, and the engine computes with the round trip of the file's
// weights, not of its own initial ones.
TEST(Lora, Nf4BaseLoadsPretrainedWeights) {
  const std::string path = (std::filesystem::current_path() /
                            ("lora_nf4_base_np" + std::to_string(zs::test::world_size()) + ".safetensors"))
                               .string();
  torch::manual_seed(99);
  Net base;  // other values than adapted_net()'s
  const auto file = base->named_parameters();
  if (zs::test::rank() == 0) {
    std::vector<zs::TensorInfo> infos;
    for (const auto& p : file) infos.push_back({p.key(), c10::kFloat, p.value().sizes().vec()});
    zs::SafetensorsWriter w(path, infos);
    for (const auto& p : file) w.write(p.key(), p.value().detach());
    w.finish();
  }
  zs::test::world()->barrier("test.written")->wait();
  Net net = adapted_net();
  zs::ShardingOptions o;
  o.unit_hooks.push_back(zs::nf4::frozen_linear_hook());
  zs::ShardingEngine engine(zs::test::session(), net.ptr(), o);
  zs::PretrainedOptions po;
  po.not_required = {"*lora_A", "*lora_B"};
  zs::load_pretrained(engine, path, po);
  const auto got = engine.full_state_dict();
  for (const std::string name : {"input.weight", "b0.fc2.weight", "b1.fc1.weight", "head.weight"}) {
    EXPECT_EQ(zs::test::max_abs_diff(got.at(name), zs_test::nf4_reference_roundtrip(file[name])), 0.0) << name;
  }
  EXPECT_EQ(zs::test::max_abs_diff(got.at("b1.fc1.bias"), file["b1.fc1.bias"]), 0.0);
  zs::test::world()->barrier("test.read")->wait();
  if (zs::test::rank() == 0) std::filesystem::remove(path);
}

TEST(Lora, Nf4BaseErrorsNameTheUnitAndTheField) {
  Net net = adapted_net();
  {
    torch::NoGradGuard no_grad;
    net->blocks[1]->fc2->weight[3][4] = std::nan("");
  }
  zs::ShardingOptions o;
  o.unit_hooks.push_back(zs::nf4::frozen_linear_hook());
  const std::string err = zs::test::error_text_of<zs::UsageError>(
      [&] { zs::ShardingEngine engine(zs::test::session(), net.ptr(), o); });
  EXPECT_TRUE(zs::test::contains(err, "nf4 encoding of parameter 'b1.fc2.weight' of unit 'b1 (nf4)': a value is "
                                      "not finite"))
      << err;
  Net other = adapted_net();
  o.offload_params.target = zs::OffloadTarget::kCpu;
  const std::string off = zs::test::error_text_of<zs::UsageError>(
      [&] { zs::ShardingEngine engine(zs::test::session(), other.ptr(), o); });
  EXPECT_TRUE(zs::test::contains(off, "frozen parameters stored as nf4 stay in memory and cannot go to a parameter "
                                      "store (offload_params.target = CPU); keep the parameters on the device"))
      << off;
}

TEST(Lora, AdaptersStartAsTheBaseAndMergeIntoPlainWeights) {
  torch::manual_seed(5);
  Net base;
  const auto base_state = base->named_parameters();
  torch::Tensor x = torch::randn({4, kIn});
  torch::Tensor before = base->forward(x).detach();
  zs::lora::apply(*base, lora_options());
  EXPECT_TRUE(torch::equal(base->forward(x).detach(), before)) << "B = 0: the adapted model starts as the base";
  EXPECT_EQ(base->input->lora_A.sizes(), (std::vector<int64_t>{3, kIn}));
  EXPECT_EQ(base->input->lora_B.sizes(), (std::vector<int64_t>{kDim, 3}));
  EXPECT_FALSE(base->head->has_adapter());
  for (const auto& p : base->named_parameters()) {
    EXPECT_EQ(p.value().requires_grad(), p.key().find("lora_") != std::string::npos) << p.key();
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& p : base->named_parameters()) {
      if (p.key().find("lora_B") != std::string::npos) p.value().normal_(0, 0.3);
    }
  }
  const torch::Tensor adapted = base->forward(x).detach();
  EXPECT_GT((adapted - before).abs().max().item<double>(), 1e-2);
  std::map<std::string, torch::Tensor> state;
  for (const auto& p : base->named_parameters()) state[p.key()] = p.value().detach();
  const auto plain = zs::lora::merged(state, base->input->scale());
  EXPECT_EQ(base->input->scale(), 2.0) << "alpha / rank";
  EXPECT_EQ(plain.count("input.lora_A"), 0u);
  EXPECT_EQ(plain.size(), base_state.size());
  Net fresh;  // no adapters: the parameters of a torch::nn::Linear model
  {
    torch::NoGradGuard no_grad;
    for (auto& p : fresh->named_parameters()) p.value().copy_(plain.at(p.key()));
  }
  EXPECT_LE(zs::test::max_abs_diff(fresh->forward(x).detach(), adapted), 1e-5);
  std::map<std::string, torch::Tensor> bad = state;
  bad["b0.fc1.lora_A"] = torch::zeros({3, kDim + 1});
  EXPECT_TRUE(zs::test::contains(zs::test::error_text_of<zs::UsageError>([&] { zs::lora::merged(bad, 2.0); }),
                                 "lora::merged: layer 'b0.fc1' has weight [32, 16], lora_A [3, 17], lora_B [32, 3]; "
                                 "expected [out, in], [r, in], [out, r]"));
  state.erase("b1.fc2.lora_B");
  const std::string err = zs::test::error_text_of<zs::UsageError>([&] { zs::lora::merged(state, 2.0); });
  EXPECT_TRUE(zs::test::contains(err, "layer 'b1.fc2' has 'b1.fc2.lora_A' but no 'b1.fc2.lora_B'")) << err;
}

struct WithTorchLinearImpl : torch::nn::Module {
  WithTorchLinearImpl()
      : a(register_module("a", zs::lora::Linear(4, 4))), b(register_module("b", torch::nn::Linear(4, 4))) {}
  zs::lora::Linear a;
  torch::nn::Linear b;
};
TORCH_MODULE(WithTorchLinear);

TEST(Lora, BadRequestsAreClearErrorsAndChangeNothing) {
  auto usage_error = [](const std::function<void()>& fn) { return zs::test::error_text_of<zs::UsageError>(fn); };
  WithTorchLinear m;
  zs::lora::Options o;
  o.rank = 2;
  o.targets = {"*"};
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }), "'b', a torch::nn::Linear"));
  EXPECT_FALSE(m->a->has_adapter()) << "a refused apply changes nothing";
  EXPECT_TRUE(m->b->weight.requires_grad());
  o.targets = {"a", "c*"};
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }), "lora::Options.targets[1] = 'c*' matches no module"));
  o.targets = {"a"};
  o.rank = 5;
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }), "exceeds the smaller side of 'a'"));
  o.rank = 0;
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }), "lora::Options.rank = 0"));
  o.rank = 2;
  o.dropout = 1;
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }), "lora::Options.dropout = 1"));
  o.dropout = 0;
  o.alpha = 0;
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }), "lora::Options.alpha = 0 must be finite and > 0"));
  o.alpha = 16;
  o.targets = {""};
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*m, o); }),
                                 "lora::Options.targets[0] is empty; give a glob over module names"));
  torch::nn::Linear plain(4, 4);
  o.targets = {};
  EXPECT_TRUE(zs::test::contains(usage_error([&] { zs::lora::apply(*plain, o); }),
                                 "the model has no zeroshard::lora::Linear layer; nothing would train"));
  o.targets = {"a"};
  EXPECT_EQ(zs::lora::apply(*m, o), std::vector<std::string>{"a"});
  EXPECT_FALSE(m->b->weight.requires_grad());
  EXPECT_TRUE(zs::test::contains(zs::test::error_text_of<zs::UsageError>([&] { zs::lora::apply(*m, o); }),
                                 "'a' already has an adapter"));
  // After wrapping: refused.
  Net net;
  zs::ShardingEngine engine(zs::test::session(), net.ptr(), zs::ShardingOptions{});
  EXPECT_TRUE(zs::test::contains(
      zs::test::error_text_of<zs::UsageError>([&] { zs::lora::apply(*net, lora_options()); }),
      "already sharded by a ShardingEngine"));
}

}  // namespace
