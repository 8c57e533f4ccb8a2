// SPDX-License-Identifier: Apache-2.0
// A model written in Python and scripted (tests/python/make_script_models.py) trained sharded by
// zeroshard::TorchScriptModel must equal the same file trained unsharded by plain LibTorch over
// module.parameters(), element by element: every strategy, an MLP (scripted and traced), a GPT
// with a tied output layer (units picked by class), a unit returning a tuple, a unit taking two
// Tensors, and activation-checkpointed units. Run at 1, 2 and 4 ranks. Tolerance: max |sharded -
// reference| <= 1e-5 after 20 steps of AdamW with clipping and 2 micro-batches per step. Also:
// bf16 mixed precision learns; the export loads without zeroshard; the models zeroshard cannot
// handle are refused naming the submodule; FULL_SHARD never holds the whole model (allocator).

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/module.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <unordered_set>

#include "common/nf4_reference.h"
#include "common/test_util.h"
#include "zeroshard/adapt/lora.h"
#include "zeroshard/base/error.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/engine/engine.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)
#include "zeroshard/models/torchscript.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;
using Strategy = zs::ShardingStrategy;

namespace {

constexpr int kSteps = 20;
constexpr int kAccum = 2;
constexpr int kLocalBatch = 4;
constexpr double kLr = 3e-3, kWd = 0.1, kClip = 0.5;
constexpr double kTolerance = 1e-5;

std::string model_file(const std::string& name) {
  const char* dir = std::getenv("ZS_SCRIPT_MODELS_DIR");
  if (dir == nullptr) throw std::runtime_error("ZS_SCRIPT_MODELS_DIR is not set (CTest sets it)");
  return std::string(dir) + "/" + name;
}

std::string tmp_dir(const std::string& name) {
  const std::string dir = std::string(ZS_TEST_TMPDIR) + "/torchscript-" + name;
  if (zs::test::rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  zs::test::barrier();
  return dir;
}

struct Batch {
  at::Tensor x, y;
};

struct Task {
  std::string file;
  zs::TorchScriptOptions units;
  std::function<Batch(int64_t micro_step, int64_t global_batch)> data;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&)> loss;
};

Batch slice(const Batch& b, int r, int n) {
  const int64_t per = b.x.size(0) / n;
  return {b.x.narrow(0, r * per, per), b.y.narrow(0, r * per, per)};
}

Batch regression_data(int64_t i, int64_t n, int64_t d_in, int64_t d_out) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(1000 + i);
  return Batch{torch::randn({n, d_in}, g), torch::randn({n, d_out}, g)};
}

at::Tensor mse(const at::Tensor& out, const at::Tensor& y) { return torch::mse_loss(out, y); }

at::Tensor token_loss(const at::Tensor& logits, const at::Tensor& y) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), y.reshape({-1}));
}

Task mlp_task(const std::string& file = "mlp.pt") {
  return {file, {.units = {"layers.*"}}, [](int64_t i, int64_t n) { return regression_data(i, n, 7, 5); }, mse};
}

Task gpt_task() {
  Task t;
  t.file = "gpt.pt";
  t.units.unit_types = {"Block"};
  t.data = [](int64_t i, int64_t n) {
    auto g = at::make_generator<at::CPUGeneratorImpl>(2000 + i);
    return Batch{torch::randint(64, {n, 16}, g), torch::randint(64, {n, 16}, g)};
  };
  t.loss = token_loss;
  return t;
}

// AdamW over `params` on the whole global batch in one process: each rank's slice forwarded on its
// own and the losses averaged, as the sharded runs split it.
void train_plainly(const Task& task, int world, const std::function<at::Tensor(const at::Tensor&)>& forward,
                   std::vector<at::Tensor> params) {
  torch::optim::AdamW opt(params, torch::optim::AdamWOptions(kLr).betas({0.9, 0.95}).weight_decay(kWd));
  for (int step = 0; step < kSteps; ++step) {
    opt.zero_grad();
    for (int micro = 0; micro < kAccum; ++micro) {
      Batch b = task.data(step * kAccum + micro, kLocalBatch * world);
      for (int r = 0; r < world; ++r) {
        Batch s = slice(b, r, world);
        at::Tensor loss = task.loss(forward(s.x), s.y) / (world * kAccum);
        loss.backward();
      }
    }
    torch::nn::utils::clip_grad_norm_(params, kClip);
    opt.step();
  }
}

// Plain LibTorch on the unmodified file; AdamW over module.parameters() (ties once).
std::map<std::string, at::Tensor> train_reference(const Task& task, int world) {
  torch::jit::Module m = torch::jit::load(model_file(task.file));
  std::vector<at::Tensor> params;
  std::unordered_set<const void*> seen;
  for (const auto& p : m.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  }
  train_plainly(task, world, [&](const at::Tensor& x) { return m.forward({x}).toTensor(); }, params);
  std::map<std::string, at::Tensor> out;
  for (const auto& p : m.named_parameters()) out[p.name] = p.value.detach();
  return out;
}

struct Sharded {
  std::unique_ptr<zs::TorchScriptModel> model;
  std::unique_ptr<zs::ShardingEngine> engine;
};

// `prepare` runs on the loaded model before the engine wraps it (e.g. adds LoRA adapters).
using Prepare = std::function<void(zs::TorchScriptModel&)>;

Sharded make_sharded(const Task& task, const zs::ShardingOptions& o, const Prepare& prepare = {}) {
  Sharded s;
  s.model = std::make_unique<zs::TorchScriptModel>(model_file(task.file), task.units, c10::Device(c10::kCPU));
  if (prepare) prepare(*s.model);
  s.engine = std::make_unique<zs::ShardingEngine>(zs::test::session(), s.model->module(), o);
  return s;
}

std::map<std::string, at::Tensor> train_sharded(const Task& task, Strategy strategy, double* last_loss,
                                                const Prepare& prepare = {},
                                                std::vector<std::shared_ptr<const zs::UnitHook>> hooks = {}) {
  const int world = zs::test::world_size(), rank = zs::test::rank();
  zs::ShardingOptions o;
  o.strategy = strategy;
  o.hybrid_group_size = world >= 2 ? 2 : 1;
  o.unit_hooks = std::move(hooks);
  Sharded s = make_sharded(task, o, prepare);
  zs::AdamOptions ao;
  ao.lr = kLr;
  ao.beta2 = 0.95;
  ao.weight_decay = kWd;
  auto opt = zs::make_adamw(ao);
  for (int step = 0; step < kSteps; ++step) {
    for (int micro = 0; micro < kAccum; ++micro) {
      Batch mine = slice(task.data(step * kAccum + micro, kLocalBatch * world), rank, world);
      at::Tensor loss = s.engine->forward([&] { return task.loss(s.model->forward(mine.x), mine.y) / kAccum; });
      *last_loss = loss.item<double>();
      loss.backward();
    }
    s.engine->clip_grad_norm(kClip);
    s.engine->step(*opt);
    s.engine->zero_grad();
  }
  return s.engine->full_state_dict();
}

// The largest |a - b| over the reference's parameters; NaN (or a missing name) counts as infinite.
double worst_difference(const std::map<std::string, at::Tensor>& reference,
                        const std::map<std::string, at::Tensor>& sharded, std::string* worst_name) {
  double worst = 0;
  for (const auto& [name, value] : reference) {
    auto it = sharded.find(name);
    const double d = it == sharded.end() ? INFINITY : (it->second - value).abs().max().item<double>();
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d, *worst_name = name;
  }
  return worst;
}

void expect_equivalent(const Task& task, const std::string& what,
                       std::vector<Strategy> strategies = {Strategy::kFullShard, Strategy::kShardGradOp,
                                                           Strategy::kNoShard, Strategy::kHybridShard}) {
  const int world = zs::test::world_size();
  const auto reference = train_reference(task, world);
  for (Strategy strategy : strategies) {
    double loss = NAN;
    const auto sharded = train_sharded(task, strategy, &loss);
    std::string worst_name;
    const double worst = worst_difference(reference, sharded, &worst_name);
    if (zs::test::rank() == 0) {
      std::printf("  %-22s %-13s ranks=%d  max|diff|=%.3g (%s)\n", what.c_str(), zs::to_string(strategy), world,
                  worst, worst_name.c_str());
    }
    EXPECT_LE(worst, kTolerance) << what << " " << zs::to_string(strategy) << " at " << world
                                 << " ranks: worst parameter " << worst_name << " differs by " << worst;
    EXPECT_TRUE(std::isfinite(loss));
  }
}

std::string usage_error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const zs::UsageError& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<not a UsageError: ") + e.what() + ">";
  }
  return "<no error>";
}

}  // namespace

// ---- equivalence with plain LibTorch ----------------------------------------------------------

TEST(TorchScriptEquivalence, ScriptedMlp) { expect_equivalent(mlp_task(), "scripted MLP"); }

TEST(TorchScriptEquivalence, TracedMlp) { expect_equivalent(mlp_task("mlp_traced.pt"), "traced MLP"); }

TEST(TorchScriptEquivalence, GptWithTiedOutputUnitsByClass) {
  zs::TorchScriptModel probe(model_file("gpt.pt"), gpt_task().units, c10::Device(c10::kCPU));
  EXPECT_EQ(probe.unit_names(), (std::vector<std::string>{"h.0", "h.1"}));
  expect_equivalent(gpt_task(), "GPT (tied output)");
}

TEST(TorchScriptEquivalence, UnitReturningATuple) {
  Task t = mlp_task("tuple_unit.pt");
  t.units = {.units = {"pair"}};
  expect_equivalent(t, "tuple-returning unit", {Strategy::kFullShard, Strategy::kShardGradOp});
}

TEST(TorchScriptEquivalence, UnitTakingTwoTensors) {
  Task t = mlp_task("two_inputs.pt");
  t.units = {.units = {"block"}};
  expect_equivalent(t, "two-input unit", {Strategy::kFullShard});
}

// ---- activation checkpointing -----------------------------------------------------------------

TEST(TorchScriptCheckpointing, EqualsPlainTraining) {
  Task t = mlp_task();
  t.units.checkpoint = true;
  expect_equivalent(t, "MLP, checkpointed", {Strategy::kFullShard, Strategy::kNoShard});
  t.units.checkpoint_every = 2;
  expect_equivalent(t, "MLP, every 2nd ckpt", {Strategy::kFullShard});
  Task two = mlp_task("two_inputs.pt");
  two.units = {.units = {"block"}, .checkpoint = true};
  expect_equivalent(two, "two-input, checkpointed", {Strategy::kFullShard});
}

// A checkpointed unit keeps only its input during forward: the forward pass's live allocations
// (allocator-measured) fall to well under half of those without checkpointing.
TEST(TorchScriptCheckpointing, ForwardKeepsOnlyTheUnitsInputs) {
  zs::install_host_memory_tracking();
  auto forward_peak = [](bool checkpoint) {
    Task t = mlp_task();
    t.units.checkpoint = checkpoint;
    Sharded s = make_sharded(t, {});
    auto g = at::make_generator<at::CPUGeneratorImpl>(5);
    at::Tensor x = torch::randn({4096, 7}, g), y = torch::randn({4096, 5}, g);
    zs::begin_host_memory_window();
    at::Tensor loss = s.engine->forward([&] { return mse(s.model->forward(x), y); });
    const int64_t peak = zs::host_memory_window_peak();
    loss.backward();
    return peak;
  };
  const int64_t plain = forward_peak(false), checkpointed = forward_peak(true);
  std::printf("forward peak: plain %lld bytes, checkpointed %lld bytes\n", static_cast<long long>(plain),
              static_cast<long long>(checkpointed));
  EXPECT_GT(checkpointed, 0);
  EXPECT_LT(2 * checkpointed, plain);
}

// ---- mixed precision ----------------------------------------------------------------------------

// bf16 parameters: the root's and the units' floating inputs are cast (the MLP's input is fp32),
// and training on a fixed batch lowers the loss.
TEST(TorchScriptMixedPrecision, Bf16Learns) {
  for (const Task& t : {mlp_task(), gpt_task()}) {
    SCOPED_TRACE(t.file);
    zs::ShardingOptions o;
    o.param_dtype = c10::kBFloat16;
    Sharded s = make_sharded(t, o);
    auto opt = zs::make_adamw(zs::AdamOptions{.lr = 1e-2});
    Batch b = slice(t.data(0, kLocalBatch * zs::test::world_size()), zs::test::rank(), zs::test::world_size());
    double first = NAN, last = NAN;
    for (int step = 0; step < 30; ++step) {
      at::Tensor out;
      at::Tensor loss = s.engine->forward([&] {
        out = s.model->forward(b.x);
        return t.loss(out.to(c10::kFloat), b.y);
      });
      EXPECT_EQ(out.scalar_type(), c10::kBFloat16) << "the model computed in " << out.scalar_type();
      loss.backward();
      s.engine->step(*opt);
      s.engine->zero_grad();
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, 0.8 * first) << "bf16 training did not learn: loss " << first << " -> " << last;
  }
}

// ---- LoRA and NF4 on torch.nn.Linear submodules ---------------------------------------------

zs::lora::Options lora_on(std::vector<std::string> targets, int64_t rank = 2) {
  zs::lora::Options o;
  o.rank = rank;
  o.alpha = 4;
  o.targets = std::move(targets);
  return o;
}

// The adapter's term is lora.h's formula: the adapted model computes what the plain file computes
// with the head's weight replaced by W + B A alpha / rank; with B = 0 it is the base model.
TEST(TorchScriptLora, AdaptedLinearComputesTheLoraFormula) {
  const at::Tensor x = regression_data(0, 6, 7, 5).x;
  zs::TorchScriptModel plain(model_file("mlp.pt"), {.units = {"layers.*"}}, c10::Device(c10::kCPU));
  const at::Tensor base = plain.forward(x).detach();
  torch::manual_seed(3);
  zs::TorchScriptModel adapted(model_file("mlp.pt"), {.units = {"layers.*"}}, c10::Device(c10::kCPU));
  EXPECT_EQ(adapted.add_lora(lora_on({"head", "layers.*.fc"})),
            (std::vector<std::string>{"layers.0.fc", "layers.1.fc", "layers.2.fc", "head"}));
  EXPECT_TRUE(torch::equal(adapted.forward(x).detach(), base)) << "lora_B starts at zero";
  std::map<std::string, at::Tensor> params;
  for (const auto& p : adapted.module()->named_parameters()) {
    params[p.key()] = p.value();
    EXPECT_EQ(p.value().requires_grad(), p.key().find("lora_") != std::string::npos) << p.key();
  }
  {
    at::NoGradGuard no_grad;
    for (auto& [name, t] : params) {
      if (name.find("lora_B") != std::string::npos) t.normal_(0, 0.5);
    }
  }
  const at::Tensor got = adapted.forward(x).detach();
  EXPECT_GT((got - base).abs().max().item<double>(), 1e-2);
  {
    at::NoGradGuard no_grad;
    for (const auto& p : plain.module()->named_parameters()) {
      const std::string layer = p.key().substr(0, p.key().rfind('.'));
      if (p.key().size() > 7 && p.key().compare(p.key().size() - 7, 7, ".weight") == 0 &&
          params.count(layer + ".lora_A")) {
        p.value().add_(params[layer + ".lora_B"].matmul(params[layer + ".lora_A"]) * (4.0 / 2));
      }
    }
  }
  EXPECT_LE((plain.forward(x).detach() - got).abs().max().item<double>(), 1e-5);
  // Errors name what is wrong.
  zs::TorchScriptModel other(model_file("mlp.pt"), {.units = {"layers.*"}}, c10::Device(c10::kCPU));
  EXPECT_NE(usage_error_of([&] { other.add_lora(lora_on({"*.nothing"})); })
                .find("no torch.nn.Linear submodule matches lora.targets (1 pattern(s)); its Linear submodules: inp, "
                      "layers.0.fc, layers.0.out, layers.1.fc, layers.1.out, layers.2.fc, layers.2.out, head"),
            std::string::npos);
  EXPECT_NE(usage_error_of([&] { other.add_lora(lora_on({"head"}, 6)); })
                .find("LoRA on 'head': lora.rank 6 exceeds the layer's smaller side (16 inputs, 5 outputs)"),
            std::string::npos);
}

// LoRA trained sharded equals the same adapted model trained plainly (no engine, torch::optim's
// AdamW over the adapters), at every rank count, for each strategy; with the base in NF4 (every
// weight of the MLP is a Linear's) the frozen weights are exactly NF4's round trip of the file's,
// and the run equals plain training over that round trip.
TEST(TorchScriptLora, ShardedEqualsPlainTraining) {
  const Task task = mlp_task();
  const int world = zs::test::world_size(), rank = zs::test::rank();
  const auto add_adapters = [](zs::TorchScriptModel& m) {
    torch::manual_seed(11);
    m.add_lora(lora_on({}, 3));
  };
  const auto is_weight = [](const std::string& name) {
    return name.find("lora_") == std::string::npos && name.size() > 7 &&
           name.compare(name.size() - 7, 7, ".weight") == 0;
  };
  const auto train_plain = [&](bool nf4_base) {
    zs::TorchScriptModel m(model_file(task.file), task.units, c10::Device(c10::kCPU));
    add_adapters(m);
    if (nf4_base) {
      at::NoGradGuard no_grad;
      for (auto& p : m.module()->named_parameters()) {
        if (is_weight(p.key())) p.value().copy_(zs_test::nf4_reference_roundtrip(p.value()));
      }
    }
    std::vector<at::Tensor> trainable;
    for (const auto& p : m.module()->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    train_plainly(task, world, [&](const at::Tensor& x) { return m.forward(x); }, trainable);
    std::map<std::string, at::Tensor> out;
    for (const auto& p : m.module()->named_parameters()) out[p.key()] = p.value().detach().clone();
    return out;
  };
  for (const bool nf4 : {false, true}) {
    const std::map<std::string, at::Tensor> reference = train_plain(nf4);
    for (Strategy strategy : {Strategy::kFullShard, Strategy::kNoShard}) {
      if (nf4 && strategy == Strategy::kNoShard) continue;
      std::map<std::string, at::Tensor> start;  // the file's values, before the engine shards them
      const auto prepare = [&](zs::TorchScriptModel& m) {
        add_adapters(m);
        for (const auto& p : m.module()->named_parameters()) start[p.key()] = p.value().detach().clone();
      };
      double loss = NAN;
      std::vector<std::shared_ptr<const zs::UnitHook>> hooks;
      if (nf4) hooks.push_back(zs::TorchScriptModel::frozen_linear_hook());
      const auto got = train_sharded(task, strategy, &loss, prepare, hooks);
      const std::string what = std::string(nf4 ? "NF4 base, " : "") + zs::to_string(strategy);
      std::string worst_name;
      const double worst = worst_difference(reference, got, &worst_name);
      if (rank == 0) {
        std::printf("  LoRA on every Linear  %-23s ranks=%d  max|diff|=%.3g (%s)\n", what.c_str(), world, worst,
                    worst_name.c_str());
      }
      EXPECT_LE(worst, kTolerance) << what << ": " << worst_name;
      EXPECT_TRUE(std::isfinite(loss)) << what;
      if (!nf4) continue;
      for (const auto& [name, value] : start) {
        if (is_weight(name)) {
          EXPECT_EQ(zs::test::max_abs_diff(got.at(name), zs_test::nf4_reference_roundtrip(value)), 0.0) << name;
        }
      }
    }
  }
}

// ---- export -------------------------------------------------------------------------------------

// The trained values go into an unmodified copy of the file: torch::jit::load (as Python's) reads
// it without zeroshard's operators, and it computes what the sharded model computes.
TEST(TorchScriptExport, LoadsWithoutZeroshardAndComputesTheSame) {
  const std::string dir = tmp_dir("export");
  Task t = gpt_task();
  Sharded s = make_sharded(t, {});
  auto opt = zs::make_adamw(zs::AdamOptions{.lr = 1e-2});
  Batch b = slice(t.data(0, kLocalBatch * zs::test::world_size()), zs::test::rank(), zs::test::world_size());
  for (int step = 0; step < 3; ++step) {
    at::Tensor loss = s.engine->forward([&] { return t.loss(s.model->forward(b.x), b.y); });
    loss.backward();
    s.engine->step(*opt);
    s.engine->zero_grad();
  }
  const auto state = s.engine->full_state_dict();
  s.model->module()->eval();
  at::Tensor expected;
  {
    at::NoGradGuard no_grad;
    expected = s.engine->forward([&] { return s.model->forward(b.x); });
  }
  if (zs::test::rank() == 0) s.model->save(state, dir + "/trained.pt");
  zs::test::barrier();

  torch::jit::Module loaded = torch::jit::load(dir + "/trained.pt");
  for (const auto& m : loaded.modules()) {
    for (const auto& method : m.get_methods()) {
      EXPECT_EQ(method.graph()->toString().find("zeroshard::"), std::string::npos)
          << "the export's " << method.name() << " calls zeroshard operators";
    }
  }
  for (const auto& p : loaded.named_parameters()) {
    ASSERT_TRUE(state.count(p.name)) << p.name;
    EXPECT_TRUE(torch::equal(p.value, state.at(p.name))) << p.name << " differs from the trained value";
  }
  EXPECT_TRUE(loaded.attr("lm_head_weight").toTensor().is_same(loaded.attr("wte").toModule().attr("weight").toTensor()))
      << "the export unties the output layer from the embedding";
  loaded.eval();
  at::NoGradGuard no_grad;
  const at::Tensor got = loaded.forward({b.x}).toTensor();
  const double d = (got - expected).abs().max().item<double>();
  EXPECT_LE(d, 1e-5) << "the exported model computes something else: max |diff| " << d;

  auto partial = state;
  partial.erase("h.1.fc.bias");
  EXPECT_EQ(usage_error_of([&] { s.model->save(partial, dir + "/partial.pt"); }),
            "TorchScriptModel::save: the state has no parameter 'h.1.fc.bias' of '" + model_file("gpt.pt") + "'");
  EXPECT_FALSE(fs::exists(dir + "/partial.pt"));
  EXPECT_FALSE(fs::exists(dir + "/trained.pt.tmp"));

  // Written under a temporary name and renamed: when writing fails, the earlier file stays whole.
  // Here a directory takes the temporary name. Before, save wrote straight to the final name (this
  // replaced the earlier file; a crash in the middle left a truncated one).
  if (zs::test::rank() == 0) {
    const std::string kept = dir + "/kept.pt";
    std::ofstream(kept) << "the earlier export";
    fs::create_directories(kept + ".tmp");
    const std::string err = zs::test::error_text_of<zs::IoError>([&] { s.model->save(state, kept); });
    EXPECT_NE(err.find("cannot write the trained TorchScript module to '" + kept + ".tmp' (for '" + kept + "'): "),
              std::string::npos) << err;
    std::ifstream in(kept);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text, "the earlier export");
  }
}

// ---- models zeroshard cannot handle -------------------------------------------------------------

TEST(TorchScriptErrors, ClearErrorsNamingTheSubmodule) {
  const c10::Device cpu(c10::kCPU);
  auto load = [&](const std::string& file, zs::TorchScriptOptions o) {
    return usage_error_of([&] { zs::TorchScriptModel m(model_file(file), o, cpu); });
  };
  EXPECT_EQ(load("other_method.pt", {.units = {"block"}}),
            "the model calls method 'scaled' of unit(s) block (class MlpBlock); zeroshard gathers a unit's "
            "parameters around its forward only: call forward, or make a module that calls that method from its "
            "forward the unit");
  EXPECT_EQ(load("dict_unit.pt", {.units = {"block"}}),
            "unit 'block': its forward returns Dict[str, Tensor]; zeroshard handles units returning a Tensor or a "
            "tuple of Tensors");
  EXPECT_EQ(load("mlp.pt", {.units = {"blocks.*"}}),
            "unit pattern 'blocks.*' matches no submodule of the TorchScript model; its submodules: inp, layers, "
            "layers.0, layers.0.ln, layers.0.fc, layers.0.out, layers.1, layers.1.ln, layers.1.fc, layers.1.out, "
            "layers.2, layers.2.ln, ...");
  EXPECT_EQ(load("mlp.pt", {.unit_types = {"Block"}}),
            "unit type 'Block' matches no submodule's class in the TorchScript model; its submodules: inp, layers, "
            "layers.0, layers.0.ln, layers.0.fc, layers.0.out, layers.1, layers.1.ln, layers.1.fc, layers.1.out, "
            "layers.2, layers.2.ln, ...");
  try {
    zs::TorchScriptModel m(model_file("absent.pt"), {.units = {"x"}}, cpu);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const zs::IoError& e) {
    EXPECT_EQ(e.message().rfind("cannot load TorchScript module '" + model_file("absent.pt") + "': ", 0), 0u)
        << e.message();
  }

  // A unit called twice in one forward pass: refused when it runs, the type of the error kept.
  Task t = mlp_task("twice.pt");
  t.units = {.units = {"block"}};
  Sharded s = make_sharded(t, {});
  Batch b = t.data(0, 4);
  b.y = torch::zeros({4, 5});
  EXPECT_EQ(usage_error_of([&] { s.engine->forward([&] { return mse(s.model->forward(b.x), b.y); }); }),
            "unit 'block' was called twice in one forward pass; zeroshard gathers a unit once per pass (a "
            "weight-shared block cannot be a unit: make its parent the unit)");
}

// ---- memory ---------------------------------------------------------------------------------------

// FULL_SHARD never materialises the whole model: during a training step's forward and backward,
// the allocations made (allocator-measured) stay within what the engine may hold at once (as for
// a C++ model): the root and two other units gathered, their unsharded gradients, two retired
// gradient buffers awaiting their reduce-scatter, two reduce-scatter outputs, and the
// activations. That is below the model's size at >= 2 ranks.
TEST(TorchScriptMemory, FullShardHoldsUnitsNotTheModel) {
  ZS_REQUIRE_RANKS(2);
  zs::install_host_memory_tracking();
  Task t{"wide.pt", {.units = {"layers.*"}}, [](int64_t i, int64_t n) { return regression_data(i, n, 64, 8); }, mse};
  Sharded s = make_sharded(t, {});
  int64_t model_bytes = 0;
  for (const auto& p : torch::jit::load(model_file(t.file)).parameters()) model_bytes += p.nbytes();
  int64_t root = 0;
  std::vector<int64_t> units;
  const std::vector<zs::FlatParam*> flats = zs::detail::flat_params(*s.engine);  // the root's first
  for (size_t i = 0; i < flats.size(); ++i) (i == 0 ? root : units.emplace_back()) = flats[i]->padded_numel() * 4;
  std::sort(units.rbegin(), units.rend());
  const int64_t gathered = root + units.at(0) + units.at(1);
  const int64_t bound = 2 * gathered + 2 * units[0] + 2 * units[0] / s.engine->shard_group_size() + (64 << 10);
  auto opt = zs::make_adamw(zs::AdamOptions{});
  int64_t peak = 0;
  for (int step = 0; step < 3; ++step) {
    Batch b = slice(t.data(step, kLocalBatch * zs::test::world_size()), zs::test::rank(), zs::test::world_size());
    // The first step allocates the gradient shards and optimizer state, which persist.
    if (step > 0) zs::begin_host_memory_window();
    at::Tensor loss = s.engine->forward([&] { return mse(s.model->forward(b.x), b.y); });
    loss.backward();
    if (step > 0) peak = std::max(peak, zs::host_memory_window_peak());
    s.engine->step(*opt);
  }
  std::printf("rank %d of %d: model %lld bytes, root %lld, largest units %lld + %lld, step peak %lld, bound %lld\n",
              zs::test::rank(), zs::test::world_size(), static_cast<long long>(model_bytes),
              static_cast<long long>(root), static_cast<long long>(units[0]), static_cast<long long>(units[1]),
              static_cast<long long>(peak), static_cast<long long>(bound));
  EXPECT_GT(peak, 0);
  EXPECT_LE(peak, bound);
  EXPECT_LT(peak, model_bytes) << "a rank held the whole model during a training step";
}

