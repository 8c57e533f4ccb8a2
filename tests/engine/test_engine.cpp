// SPDX-License-Identifier: Apache-2.0
// ShardingEngine behaviour beyond numerical equivalence (test_equivalence.cpp covers that):
//  - memory accounting: the ZeRO formula for persistent state, bounded gathered parameters,
//    transient categories back at zero after a step, frozen parameters without gradient memory;
//  - communication counters: exact element counts per strategy;
//  - bad input: each a clear UsageError (different models on different ranks, double wrapping,
//    mixed devices in a unit, a unit or the model called outside engine.forward, step() inside
//    no_sync, non-fp32), a refused wrap leaves the model intact, a forward that throws leaves the
//    engine usable;
//  - unit declarations end with their module (no stale registry entries);
//  - auto-wrap policies (MODULE_TYPE, SIZE_BASED) train like plain LibTorch;
//  - zero_grad frees the gradient shards;
//  - full_state_dict: tied names, buffers, identical on all ranks; rank 0 only and CPU copies,
//    gathered unit by unit (host allocator window);
//  - the parameters' .grad: torch::optim over model->parameters() fails loudly;
//  - backward holds about two gathered units: with a tower of frozen units, and with units whose
//    parameters get no gradient this pass (unused layers, an output the loss does not use).
// Run at 1, 2 and 4 ranks; checks that need several ranks skip (visibly) or shrink at 1.


#include <torch/nn/utils/clip_grad.h>

#include "engine/engine_test_util.h"
#include "common/host_cache_guard.h"
#include "zeroshard/core/host_memory.h"
#include "zeroshard/engine/activation_checkpoint.h"


// ---------------------------------------------------------------------------------------------
// 1. Memory accounting

// After one AdamW step (before zero_grad): persistent = 16 x padded trainable / N + 4 x padded
// frozen / N, category by category; transient categories back at zero; frozen parameters get no
// gradient memory; FULL_SHARD keeps at most the root and two other units gathered.
TEST(MemoryAccounting, PersistentStateIsTheZeroFormula) {
  for (auto strategy : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard}) {
    SCOPED_TRACE(zs::to_string(strategy));
    torch::manual_seed(3);
    zs_test::Mlp model = keep_alive(zs_test::Mlp());
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(strategy));
    const int n = engine.shard_group_size();
    const auto sizes = expected_unit_sizes(*model, engine.unit_names(), n);
    const int64_t pt = engine.num_padded_trainable_params();
    const int64_t pf = total(sizes, &UnitSize::padded_frozen);
    EXPECT_EQ(pt, total(sizes, &UnitSize::padded_trainable)) << "padding differs from ceil(numel/N)*N per flat";
    EXPECT_EQ(engine.num_trainable_params(), total(sizes, &UnitSize::trainable));
    EXPECT_EQ(engine.num_params(), total(sizes, &UnitSize::trainable) + total(sizes, &UnitSize::frozen));
    EXPECT_EQ(sizes.at("b2").frozen, 13) << "the MLP's block b2 has a frozen bias";
    EXPECT_GT(pf, 0);

    auto opt = zs::make_adamw(zs::AdamOptions{});
    mlp_forward_backward(engine, model, 0);
    engine.step(*opt);

    const auto& mem = engine.memory();
    EXPECT_EQ(mem.current(MemCategory::kShardedParams), 4 * (pt + pf) / n);
    EXPECT_EQ(mem.current(MemCategory::kGradShards), 4 * pt / n) << "frozen parameters must get no gradient memory";
    EXPECT_EQ(mem.current(MemCategory::kOptimizerState), 8 * pt / n);
    EXPECT_EQ(mem.persistent(), 16 * pt / n + 4 * pf / n);
    EXPECT_EQ(mem.current(MemCategory::kGradBuffers), 0) << "unsharded gradients must be gone after backward";
    EXPECT_FALSE(model->layers[2]->fc->bias.grad().defined()) << "the frozen bias got a gradient";
    if (strategy == Strategy::kFullShard && n > 1) {
      EXPECT_EQ(mem.current(MemCategory::kGatheredParams), 0) << "FULL_SHARD must reshard every unit after a step";
    }

    // Second step: prefetching is active now (the forward order is recorded).
    mlp_forward_backward(engine, model, 1);
    engine.step(*opt);
    EXPECT_EQ(mem.persistent(), 16 * pt / n + 4 * pf / n);
    if (strategy == Strategy::kFullShard && n > 1) {
      EXPECT_EQ(mem.current(MemCategory::kGatheredParams), 0);
      const auto bytes = [](const UnitSize& s) { return s.bytes(); };
      const int64_t upper = root_plus_largest(sizes, 2, bytes);
      const int64_t lower = root_plus_largest(sizes, 1, bytes);  // the root and one unit compute together
      EXPECT_LE(mem.peak(MemCategory::kGatheredParams), upper)
          << "more than the root and two other units were gathered at once";
      EXPECT_GE(mem.peak(MemCategory::kGatheredParams), lower);
    }
    if (zs::test::rank() == 0) {
      std::printf("%s  [%s, padded trainable %lld, padded frozen %lld, N=%d]\n", engine.memory_report().c_str(),
                  zs::to_string(strategy), static_cast<long long>(pt), static_cast<long long>(pf),
                  n);
    }
  }
}

// FULL_SHARD frees each unit's unsharded gradient once it is reduce-scattered (only no_sync keeps
// unsharded gradients for every unit): during backward at most the root's (it waits for the input
// layer's gradient, the last one) and those of two other units (the one computing and the one
// whose reduce-scatter is in flight) exist at once.
TEST(MemoryAccounting, UnshardedGradientsAreFreedUnitByUnit) {
  ZS_REQUIRE_RANKS(2);
  torch::manual_seed(3);
  zs_test::Mlp model = keep_alive(zs_test::Mlp());
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  const auto sizes = expected_unit_sizes(*model, engine.unit_names(), engine.shard_group_size());
  const auto grad_bytes = [](const UnitSize& s) { return 4 * s.padded_trainable; };
  for (int step = 0; step < 2; ++step) {
    mlp_forward_backward(engine, model, step);
    engine.zero_grad();
  }
  const int64_t peak = engine.memory().peak(MemCategory::kGradBuffers);
  const int64_t all_units = 4 * total(sizes, &UnitSize::padded_trainable);
  EXPECT_LE(peak, root_plus_largest(sizes, 2, grad_bytes))
      << "peak unsharded gradients " << peak << " bytes; every unit's unsharded gradient is " << all_units
      << " bytes: gradient buffers are kept until the end of backward instead of being freed after each "
         "unit's reduce-scatter";
  EXPECT_GT(peak, 0);
  EXPECT_EQ(engine.memory().current(MemCategory::kGradBuffers), 0);
}

// A CPU run allocates its largest unit's buffers again every step (gathered parameters, unsharded
// gradients): the engine raises a host memory cache too small to keep such blocks to 4 x the
// unit's fp32 bytes, never lowers a larger one and never turns one on; the next steps' buffers then
// come from the cache.
TEST(MemoryAccounting, TheHostCacheGrowsToHoldTheLargestUnitsBuffers) {
  ASSERT_TRUE(zs::host_memory_tracking_installed()) << "the test main's Session installs the tracking allocator";
  const int64_t block_bytes = 4 * (512 * 512 + 512);  // a block unit: Linear(512, 512) and its bias
  for (int64_t before : {int64_t{0}, int64_t{1} << 20, int64_t{64} << 20}) {
    SCOPED_TRACE("cache limit before the engine: " + std::to_string(before));
    zs::test::CacheGuard cache(before);
    torch::manual_seed(3);
    zs_test::Mlp model = keep_alive(zs_test::Mlp(7, 512, 5, 3));
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
    const int64_t after = zs::host_memory_stats().cache_limit;
    if (before == 0) {
      EXPECT_EQ(after, 0) << "a cache turned off must stay off";
      continue;
    }
    if (before > 4 * block_bytes + (int64_t{1} << 20)) {
      EXPECT_EQ(after, before) << "a cache large enough must not be lowered";
      continue;
    }
    EXPECT_GE(after, 4 * block_bytes) << "a 1 MiB cache keeps none of the 1 MiB block buffers";
    auto opt = zs::make_adamw(zs::AdamOptions{});
    mlp_forward_backward(engine, model, 0);
    engine.step(*opt);
    engine.zero_grad();
    const int64_t hits = zs::host_memory_stats().cache_hits;
    mlp_forward_backward(engine, model, 1);
    engine.step(*opt);
    engine.zero_grad();
    EXPECT_GT(zs::host_memory_stats().cache_hits, hits);
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Communication counters

TEST(CommCounters, ElementsPerStrategy) {
  for (auto strategy : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard}) {
    SCOPED_TRACE(zs::to_string(strategy));
    torch::manual_seed(3);
    zs_test::Mlp model = keep_alive(zs_test::Mlp());
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(strategy));
    const int world = zs::test::world_size();
    const auto sizes = expected_unit_sizes(*model, engine.unit_names(), engine.shard_group_size());
    const int64_t pt = engine.num_padded_trainable_params();
    int64_t gather_full = 0, gather_once = 0;  // FULL_SHARD: root once, others twice
    for (const auto& [name, s] : sizes) {
      gather_full += (name == kRoot ? 1 : 2) * s.padded();
      gather_once += s.padded();
    }
    int64_t want_gather = 0, want_reduce = 0;
    if (world > 1) {
      switch (strategy) {
        case Strategy::kFullShard:
          want_gather = gather_full;
          want_reduce = pt;  // one reduce-scatter of each trainable flat
          break;
        case Strategy::kShardGradOp:
          want_gather = gather_once;  // gathered once per step, kept through backward
          want_reduce = pt;
          break;
        default:  // NO_SHARD: replicas, gradients all-reduced (counted twice)
          EXPECT_EQ(engine.shard_group_size(), 1);
          want_gather = 0;
          want_reduce = 2 * pt;
          break;
      }
    }
    engine.reset_comm_counters();
    auto opt = zs::make_sgd(zs::SgdOptions{});
    for (int step = 0; step < 2; ++step) {  // step 0 records the order, step 1 prefetches
      mlp_forward_backward(engine, model, step);
      const zs::CommCounters c = engine.comm_counters();
      EXPECT_EQ(c.all_gather_elements, want_gather) << "step " << step;
      EXPECT_EQ(c.reduce_elements, want_reduce) << "step " << step;
      engine.step(*opt);
      engine.zero_grad();
      EXPECT_EQ(engine.comm_counters().all_gather_elements, want_gather) << "step/zero_grad must not gather";
      engine.reset_comm_counters();
    }
    if (zs::test::rank() == 0) {
      std::printf("  %-13s ranks=%d: all_gather %lld, reduce %lld elements per step (padded trainable %lld)\n",
                  zs::to_string(strategy), world, static_cast<long long>(want_gather),
                  static_cast<long long>(want_reduce), static_cast<long long>(pt));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Bad input: each a clear UsageError

TEST(ZeroGrad, FreesTheGradientShards) {
  for (auto strategy : {Strategy::kFullShard, Strategy::kNoShard}) {
    SCOPED_TRACE(zs::to_string(strategy));
    zs_test::Mlp model = keep_alive(zs_test::Mlp());
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(strategy));
    auto opt = zs::make_sgd(zs::SgdOptions{});
    mlp_forward_backward(engine, model, 0);
    const auto before = engine.param_shards();
    EXPECT_EQ(before.size(), 4u);  // the root and three blocks have trainable parameters
    for (const auto& s : before) EXPECT_TRUE(s.grad.defined()) << s.name;
    EXPECT_GT(engine.memory().current(MemCategory::kGradShards), 0);
    engine.step(*opt);
    engine.zero_grad();
    EXPECT_EQ(engine.memory().current(MemCategory::kGradShards), 0);
    for (const auto& s : engine.param_shards()) EXPECT_FALSE(s.grad.defined()) << s.name;
    // The next backward allocates fresh shards again.
    mlp_forward_backward(engine, model, 1);
    for (const auto& s : engine.param_shards()) EXPECT_TRUE(s.grad.defined()) << s.name;
  }
}

// ---------------------------------------------------------------------------------------------
// 6. full_state_dict

TEST(FullStateDict, TiedNamesAndEqualOnAllRanks) {
  torch::manual_seed(5);
  zs_test::Gpt model = keep_alive(zs_test::Gpt());
  std::vector<std::string> names;
  for (const auto& p : model->named_parameters()) names.push_back(p.key());
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  auto opt = zs::make_adamw(zs::AdamOptions{});
  zs_test::GptConfig c;
  auto g = torch::make_generator<at::CPUGeneratorImpl>(40 + zs::test::rank());
  torch::Tensor idx = torch::randint(c.vocab, {2, c.seq}, g), y = torch::randint(c.vocab, {2, c.seq}, g);
  torch::Tensor loss = engine.forward([&] {
    torch::Tensor logits = model->forward(idx);
    return torch::nn::functional::cross_entropy(logits.reshape({-1, c.vocab}), y.reshape({-1}));
  });
  loss.backward();
  engine.step(*opt);
  const auto sd = engine.full_state_dict();
  for (const auto& n : names) EXPECT_EQ(sd.count(n), 1u) << n << " missing from the full state dict";
  EXPECT_EQ(sd.count("wte.weight"), 1u);
  EXPECT_EQ(sd.count("lm_head_weight"), 1u);
  if (sd.count("wte.weight") && sd.count("lm_head_weight")) {
    EXPECT_TRUE(torch::equal(sd.at("wte.weight"), sd.at("lm_head_weight")));
    EXPECT_EQ(sd.at("wte.weight").sizes(), (std::vector<int64_t>{c.vocab, c.dim}));
  }
  EXPECT_EQ(max_difference_from_rank0(sd), 0.0);
}

TEST(FullStateDict, BuffersIncludedAndEqualOnAllRanks) {
  torch::manual_seed(5);
  zs_test::BnNet model = keep_alive(zs_test::BnNet());
  std::vector<std::string> buffers;
  for (const auto& b : model->named_buffers()) buffers.push_back(b.key());
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  auto opt = zs::make_sgd(zs::SgdOptions{});
  auto g = torch::make_generator<at::CPUGeneratorImpl>(60 + zs::test::rank());  // different data per rank
  torch::Tensor x = torch::randn({8, 7}, g), y = torch::randn({8, 5}, g);
  torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
  loss.backward();
  engine.step(*opt);
  const auto sd = engine.full_state_dict();
  EXPECT_EQ(sd.count("b0.bn.running_mean"), 1u);
  for (const auto& b : buffers) EXPECT_EQ(sd.count(b), 1u) << b << " missing from the full state dict";
  if (sd.count("b0.bn.running_mean")) {
    // One batch from zero: the running mean moved (momentum 0.1), so the check below compares data.
    EXPECT_GT(sd.at("b0.bn.running_mean").abs().max().item<double>(), 0.0);
  }
  EXPECT_EQ(max_difference_from_rank0(sd), 0.0);
}

// rank0_only: rank 0 gets what full_state_dict() gives, the others nothing, and (allocator truth)
// no other rank ever holds more than one unit's flat parameter while the collective runs, where
// rank 0 holds the whole model. offload_to_cpu: CPU tensors, equal values.
TEST(FullStateDict, RankZeroOnlyGathersUnitByUnit) {
  torch::manual_seed(5);
  zs_test::GptConfig c;
  c.layers = 6;  // the model is many units: one unit is a small part of it
  zs_test::Gpt model = keep_alive(zs_test::Gpt(c));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  const auto sizes = expected_unit_sizes(*model, engine.unit_names(), engine.shard_group_size());
  int64_t largest_unit = 0, whole = 0;
  for (const auto& [name, s] : sizes) {
    largest_unit = std::max({largest_unit, 4 * s.padded_trainable, 4 * s.padded_frozen});
    whole += 4 * (s.trainable + s.frozen);
  }
  const auto full = engine.full_state_dict();
  zs::StateDictOptions o;
  o.rank0_only = true;
  zs::begin_host_memory_window();
  const auto mine = engine.full_state_dict(o);
  const int64_t peak = zs::host_memory_window_peak();
  if (zs::test::rank() == 0) {
    EXPECT_EQ(mine.size(), full.size());
    for (const auto& [name, t] : full) {
      auto it = mine.find(name);
      EXPECT_TRUE(it != mine.end() && zs::test::max_abs_diff(t, it->second) == 0.0) << name;
    }
    EXPECT_GE(peak, whole) << "rank 0 holds the whole model";
  } else {
    EXPECT_TRUE(mine.empty());
    EXPECT_GT(peak, 0);
    EXPECT_LE(peak, largest_unit + 4096) << "a rank that returns nothing held more than one unit at once ("
                                          << largest_unit << " bytes) while gathering: " << peak << " bytes";
  }
  o = zs::StateDictOptions{};
  o.offload_to_cpu = true;
  const auto on_cpu = engine.full_state_dict(o);
  EXPECT_EQ(on_cpu.size(), full.size());
  for (const auto& [name, t] : on_cpu) {
    EXPECT_TRUE(t.device().is_cpu()) << name;
    EXPECT_EQ(zs::test::max_abs_diff(t, full.at(name)), 0.0) << name;
  }
}

// ---------------------------------------------------------------------------------------------
// 6b. Frozen units in backward

// A trainable adapter followed by a tower of frozen units (as when only early layers or adapters
// train): each frozen unit reshards once the gradient of its input is complete, so backward holds
// about two gathered units (the one running and the next, prefetched) besides the adapter's
// gradient buffer (the size of one unit here), not the whole tower until the end of backward.
// Allocator-measured (host allocator window over the backward). And the adapter trains as in
// plain LibTorch.
// Three SGD steps (lr 0.1) of `model` sharded with `strategy`, each on this rank's 4 rows of a
// global batch drawn from seed + step; `loss_of(rows)` is the forward, `run_backward(loss)` the
// backward (around which a test measures). Returns the trained full state dict.
template <typename LossOf, typename Backward>
std::map<std::string, at::Tensor> sgd_steps_sharded(const std::shared_ptr<torch::nn::Module>& model,
                                                    Strategy strategy, uint64_t seed, int64_t dim, LossOf loss_of,
                                                    Backward run_backward) {
  zs::ShardingEngine engine(zs::test::session(), model, options_for(strategy));
  auto opt = zs::make_sgd([] {
    zs::SgdOptions s;
    s.lr = 0.1;
    return s;
  }());
  for (int step = 0; step < 3; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(seed + step);
    torch::Tensor x = torch::randn({4 * zs::test::world_size(), dim}, g);  // the global batch
    torch::Tensor mine = x.narrow(0, 4 * zs::test::rank(), 4);              // this rank's part
    // Each rank's loss is the mean over its part: the engine averages the gradients over ranks.
    torch::Tensor loss = engine.forward([&] { return loss_of(mine); });
    run_backward(loss);
    engine.step(*opt);
    engine.zero_grad();
  }
  return engine.full_state_dict();
}

struct FrozenBlockImpl : torch::nn::Module {
  explicit FrozenBlockImpl(int64_t d) : fc(register_module("fc", torch::nn::Linear(d, d))) {
    for (auto& p : parameters()) p.set_requires_grad(false);
  }
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};

struct FrozenTowerImpl : torch::nn::Module {
  FrozenTowerImpl(int64_t d, int n) : adapter(register_module("adapter", torch::nn::Linear(d, d))) {
    for (int i = 0; i < n; ++i) tower.push_back(register_module("f" + std::to_string(i), zs::Unit<FrozenBlockImpl>(d)));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = adapter(x);
    for (auto& b : tower) x = checkpoint ? zs::checkpoint([&b](const at::Tensor& t) { return b(t); }, x) : b(x);
    return x;
  }
  torch::nn::Linear adapter;
  std::vector<zs::Unit<FrozenBlockImpl>> tower;
  bool checkpoint = false;
};
TORCH_MODULE(FrozenTower);

TEST(FrozenUnits, ReshardAsSoonAsTheirBackwardIsDone) {
  ZS_REQUIRE_RANKS(2);
  zs::install_host_memory_tracking();
  constexpr int64_t kDim = 192;
  constexpr int kFrozen = 6;
  const int64_t unit_bytes = 4 * (kDim * kDim + kDim);  // one frozen unit gathered, fp32
  auto run = [&](Strategy strategy, bool checkpoint, int64_t* backward_peak) {
    torch::manual_seed(21);
    FrozenTower model = keep_alive(FrozenTower(kDim, kFrozen));
    model->checkpoint = checkpoint;
    *backward_peak = 0;
    return sgd_steps_sharded(
        model.ptr(), strategy, 40, kDim, [&](const torch::Tensor& x) { return model->forward(x).square().mean(); },
        [&](torch::Tensor& loss) {
          zs::begin_host_memory_window();
          loss.backward();
          *backward_peak = std::max(*backward_peak, zs::host_memory_window_peak());
        });
  };
  // Plain LibTorch on the whole batch.
  torch::manual_seed(21);
  FrozenTower ref(kDim, kFrozen);
  torch::optim::SGD ref_opt(ref->adapter->parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(40 + step);
    torch::Tensor x = torch::randn({4 * zs::test::world_size(), kDim}, g);
    ref_opt.zero_grad();
    (ref->forward(x).square().mean()).backward();
    ref_opt.step();
  }
  for (bool checkpoint : {false, true}) {
    for (Strategy strategy : {Strategy::kFullShard, Strategy::kShardGradOp}) {
      int64_t peak = 0;
      const auto sd = run(strategy, checkpoint, &peak);
      const double diff = zs::test::max_abs_diff(sd.at("adapter.weight"), ref->adapter->weight);
      EXPECT_LE(diff, 1e-6) << zs::to_string(strategy) << (checkpoint ? " + checkpointing" : "");
      EXPECT_LE(peak, 7 * unit_bytes / 2)
          << zs::to_string(strategy) << (checkpoint ? " + checkpointing" : "") << ": backward held " << peak
          << " bytes at its peak; one gathered frozen unit is " << unit_bytes << " bytes, the tower " << kFrozen
          << " of them: frozen units stay gathered until the end of backward";
      EXPECT_GE(peak, unit_bytes) << "backward gathers at least one unit";
      if (zs::test::rank() == 0) {
        std::printf("  frozen tower, %s%s: backward peak %lld bytes = %.2f gathered units (of %d)\n",
                    zs::to_string(strategy), checkpoint ? " + checkpointing" : "", static_cast<long long>(peak),
                    static_cast<double>(peak) / unit_bytes, kFrozen);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 6c. Units whose trainable parameters get no gradient this pass

// Each unit of a tower has a layer its forward does not use this step (`spare`): the unit reshards
// once the gradients the backward's graph will produce are in (fc's), not at the end of backward
// waiting for spare's. And a large unit (`aux`) whose output the loss does not use: backward
// neither prefetches it (FULL_SHARD) nor keeps it gathered (SHARD_GRAD_OP). Allocator-measured;
// the used layers train as in plain LibTorch, the unused ones stay as they were.
struct SpareBlockImpl : torch::nn::Module {
  explicit SpareBlockImpl(int64_t d)
      : fc(register_module("fc", torch::nn::Linear(d, d))), spare(register_module("spare", torch::nn::Linear(d, d))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::tanh(fc(x)); }
  torch::nn::Linear fc, spare;
};

struct AuxHeadImpl : torch::nn::Module {
  AuxHeadImpl(int64_t d, int64_t wide) : fc(register_module("fc", torch::nn::Linear(d, wide))) {}
  torch::Tensor forward(torch::Tensor x) { return fc(x); }
  torch::nn::Linear fc;
};

struct SpareTowerImpl : torch::nn::Module {
  SpareTowerImpl(int64_t d, int n) : aux(register_module("aux", zs::Unit<AuxHeadImpl>(d, 20 * d))) {
    for (int i = 0; i < n; ++i) tower.push_back(register_module("b" + std::to_string(i), zs::Unit<SpareBlockImpl>(d)));
  }
  // `probe`: a tensor hook at the gradient of the last block's output (backward's start).
  torch::Tensor forward(torch::Tensor x, const std::function<void()>& probe = nullptr) {
    for (size_t i = 0; i < tower.size(); ++i) {
      auto& b = tower[i];
      x = checkpoint && i > 0 ? zs::checkpoint([&b](const at::Tensor& t) { return b(t); }, x) : b(x);
      if (i == 0) aux_out = aux(x);  // computed and kept, but not part of the loss
      if (i + 1 == tower.size() && probe) x.register_hook([probe](const torch::Tensor&) { probe(); });
    }
    return x;
  }
  zs::Unit<AuxHeadImpl> aux;
  std::vector<zs::Unit<SpareBlockImpl>> tower;
  torch::Tensor aux_out;
  bool checkpoint = false;
};
TORCH_MODULE(SpareTower);

TEST(UnusedParameters, UnitsReshardOnceTheGradientsTheyGetAreIn) {
  ZS_REQUIRE_RANKS(2);
  zs::install_host_memory_tracking();
  constexpr int64_t kDim = 128;
  constexpr int kBlocks = 8;
  const int64_t unit_bytes = 4 * 2 * (kDim * kDim + kDim);  // one block gathered (fc + spare), fp32
  const int64_t aux_bytes = 4 * 20 * kDim * (kDim + 1);
  struct Peaks {
    int64_t backward = 0;        // window over the backward
    int64_t drop_at_probe = 0;   // bytes freed from before backward to its first unit's hook
  };
  auto run = [&](Strategy strategy, bool checkpoint, Peaks* peaks) {
    torch::manual_seed(23);
    SpareTower model = keep_alive(SpareTower(kDim, kBlocks));
    model->checkpoint = checkpoint;
    int64_t before = 0;  // tracked bytes when backward starts
    auto probe = [&] { peaks->drop_at_probe = std::max(peaks->drop_at_probe, before - zs::host_memory_stats().current); };
    return sgd_steps_sharded(
        model.ptr(), strategy, 60, kDim, [&](const torch::Tensor& x) { return model->forward(x, probe).square().mean(); },
        [&](torch::Tensor& loss) {
          before = zs::host_memory_stats().current;
          zs::begin_host_memory_window();
          loss.backward();
          peaks->backward = std::max(peaks->backward, zs::host_memory_window_peak());
        });
  };
  torch::manual_seed(23);
  SpareTower ref(kDim, kBlocks);
  const auto initial = ref->named_parameters().pairs();
  std::map<std::string, torch::Tensor> start;
  for (const auto& [name, p] : initial) start[name] = p.detach().clone();
  std::vector<torch::Tensor> used;
  for (auto& b : ref->tower) {
    for (auto& p : b->fc->parameters()) used.push_back(p);
  }
  torch::optim::SGD ref_opt(used, torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    auto g = torch::make_generator<at::CPUGeneratorImpl>(60 + step);
    torch::Tensor x = torch::randn({4 * zs::test::world_size(), kDim}, g);
    ref_opt.zero_grad();
    ref->forward(x).square().mean().backward();
    ref_opt.step();
  }
  for (bool checkpoint : {false, true}) {
    for (Strategy strategy : {Strategy::kFullShard, Strategy::kShardGradOp}) {
      const std::string what = std::string(zs::to_string(strategy)) + (checkpoint ? " + checkpointing" : "");
      Peaks peaks;
      const auto sd = run(strategy, checkpoint, &peaks);
      for (const auto& [name, p] : ref->named_parameters().pairs()) {
        const torch::Tensor& expected = name.find("spare") != std::string::npos || name.rfind("aux.", 0) == 0 ? start.at(name) : p;
        EXPECT_LE(zs::test::max_abs_diff(sd.at(name), expected), 1e-6) << what << ": " << name;
      }
      // Besides the gradient shards (unit_bytes / N per block, kept to the step): under FULL_SHARD
      // the block running (parameters and gradient buffer), the next one prefetched and gradient
      // buffers in reduction; SHARD_GRAD_OP gathers nothing new. Waiting for spare's gradient held
      // every block's buffers to the end of backward (measured: 16.5 and 9 blocks at 2 ranks).
      const int64_t shards = kBlocks * unit_bytes / zs::test::world_size();
      const int64_t working = (strategy == Strategy::kFullShard ? 10 : 7) * unit_bytes / 2;
      EXPECT_LE(peaks.backward, shards + working)
          << what << ": backward held " << peaks.backward << " bytes at its peak; one gathered block is " << unit_bytes
          << " bytes, the aux head " << aux_bytes << ", the tower " << kBlocks << " blocks, their gradient shards " << shards;
      EXPECT_GE(peaks.backward, unit_bytes) << what << ": backward gathers at least one block";
      if (strategy == Strategy::kShardGradOp && !checkpoint) {
        // SHARD_GRAD_OP kept aux gathered after forward; backward drops it at its start (the last
        // block's gradient buffer is allocated by then).
        EXPECT_GE(peaks.drop_at_probe, aux_bytes / 2) << what << ": the aux head stayed gathered during backward";
      }
      if (zs::test::rank() == 0) {
        std::printf("  spare layers + unused aux head, %s: backward peak %.2f blocks (of %d; aux %.1f), "
                    "freed at its start %.2f blocks\n",
                    what.c_str(), static_cast<double>(peaks.backward) / unit_bytes, kBlocks,
                    static_cast<double>(aux_bytes) / unit_bytes, static_cast<double>(peaks.drop_at_probe) / unit_bytes);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 7. The parameters' .grad

// The engine keeps gradients in its shards. A torch::optim optimizer or clip_grad_norm_ over
// model->parameters() must fail loudly, not silently do nothing (the parameters' .grad used to
// be left undefined, which both skip); frozen parameters keep no .grad at all.
TEST(ParamGrad, TorchOptimizersOverModelParametersFailLoudly) {
  for (auto strategy : {Strategy::kFullShard, Strategy::kNoShard}) {
    SCOPED_TRACE(zs::to_string(strategy));
    torch::manual_seed(3);
    zs_test::Mlp model = keep_alive(zs_test::Mlp());
    zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(strategy));
    mlp_forward_backward(engine, model, 0);
    const auto before = engine.full_state_dict();
    std::vector<torch::Tensor> params = model->parameters();
    torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.1));
    EXPECT_THROW(sgd.step(), c10::Error) << "torch::optim over model->parameters() ran as if nothing were wrong";
    EXPECT_THROW(torch::nn::utils::clip_grad_norm_(params, 1.0), c10::Error);
    for (const auto& p : model->named_parameters()) {
      if (p.value().requires_grad()) {
        EXPECT_TRUE(p.value().grad().defined() && p.value().grad().is_meta()) << p.key();
      } else {
        EXPECT_FALSE(p.value().grad().defined()) << p.key() << " is frozen";
      }
    }
    // Nothing was changed, and the engine's own calls work.
    const auto after = engine.full_state_dict();
    for (const auto& [name, t] : before) EXPECT_EQ(zs::test::max_abs_diff(t, after.at(name)), 0.0) << name;
    EXPECT_GT(engine.clip_grad_norm(1.0), 0.0);
    auto opt = zs::make_sgd(zs::SgdOptions{});
    engine.step(*opt);
    engine.zero_grad();
    mlp_forward_backward(engine, model, 1);  // a placeholder never reaches autograd
    EXPECT_GT(engine.memory().current(MemCategory::kGradShards), 0);
  }
}
