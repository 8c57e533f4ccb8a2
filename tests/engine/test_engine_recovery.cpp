// SPDX-License-Identifier: Apache-2.0
// The engine after a forward or backward that threw (it must be usable again, and the step after
// it equal a clean run's), and ranks that run different units (a clear error on every rank).

#include <stdexcept>

#include "engine/engine_test_util.h"
#include "flat_param.h"  // the engine's private FlatParam (engine/src)

namespace {

// Where the trap fires: which block (-1: none), and in which pass.
struct Trap {
  int block = -1;
  bool in_backward = false;
  int skip_block = -1;  // this block is not run at all (a data-dependent branch)
  bool swap_last_two = false;  // the last two blocks run in the other order
};

// A block that can throw from inside its forward, or from inside its backward (a gradient hook
// on a tensor computed in the unit, as a user hook or a custom op would).
struct TrapBlockImpl : torch::nn::Module {
  TrapBlockImpl(int64_t dim, int index, std::shared_ptr<Trap> trap)
      : fc(register_module("fc", torch::nn::Linear(dim, dim))), index_(index), trap_(std::move(trap)) {}
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor h = fc(x);
    if (trap_->block == index_ && !trap_->in_backward) throw std::runtime_error("injected forward failure");
    if (trap_->block == index_ && trap_->in_backward) {
      h.register_hook([](torch::Tensor) -> torch::Tensor { throw std::runtime_error("injected backward failure"); });
    }
    return torch::relu(h) + x;
  }
  torch::nn::Linear fc;
  int index_;
  std::shared_ptr<Trap> trap_;
};

// input -> three equal blocks (units) -> output.
struct TrapNetImpl : torch::nn::Module {
  explicit TrapNetImpl(std::shared_ptr<Trap> trap) : trap_(trap) {
    input = register_module("input", torch::nn::Linear(7, 16));
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(register_module("b" + std::to_string(i), zeroshard::Unit<TrapBlockImpl>(16, i, trap)));
    }
    output = register_module("output", torch::nn::Linear(16, 5));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = input(x);
    std::vector<size_t> order = {0, 1, 2};
    if (trap_->swap_last_two) std::swap(order[1], order[2]);
    for (size_t i : order) {
      if (static_cast<int>(i) != trap_->skip_block) x = blocks[i](x);
    }
    return output(x);
  }
  std::shared_ptr<Trap> trap_;
  torch::nn::Linear input{nullptr}, output{nullptr};
  std::vector<zeroshard::Unit<TrapBlockImpl>> blocks;
};
TORCH_MODULE(TrapNet);

void forward_backward(zs::ShardingEngine& engine, TrapNet& model, int64_t step) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(900 + 31 * step + zs::test::rank());
  torch::Tensor x = torch::randn({4, 7}, g), y = torch::randn({4, 5}, g);
  engine.forward([&] { return torch::mse_loss(model->forward(x), y); }).backward();
}

struct Failure {
  int step = -1;              // the step whose forward or backward throws (skipped); -1: none
  int block = 0;              // where
  bool in_backward = true;
  bool explicit_reset = false;  // call reset_after_error() instead of letting the next forward do it
};

struct RunResult {
  std::map<std::string, at::Tensor> state;
  std::string failure;     // what the failing pass threw
  std::string step_error;  // what step() said right after it
  std::map<std::string, int64_t> left_after_reset;  // explicit reset: engine bytes still accounted
};

// Four steps of SGD with momentum; the failing step (if any) is skipped after its exception, as a
// training loop that catches it would. A clean run skips the same step without running it.
RunResult train(Strategy strategy, const Failure& f, bool run_failing_step) {
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingOptions o = options_for(strategy);
  // HYBRID_SHARD: shard groups of two, so that at 4 ranks the shards are also all-reduced across
  // replicas (a failed backward then abandons replica all-reduces in flight too).
  if (zs::test::world_size() % 2 == 0) o.hybrid_group_size = 2;
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), o);
  zs::SgdOptions so;
  so.lr = 0.05;
  so.momentum = 0.9;
  auto opt = zs::make_sgd(so);
  RunResult r;
  for (int step = 0; step < 4; ++step) {
    if (step == f.step) {
      if (!run_failing_step) continue;
      trap->block = f.block;
      trap->in_backward = f.in_backward;
      try {
        forward_backward(engine, model, step);
        r.failure = "<no exception>";
      } catch (const std::exception& e) {
        r.failure = e.what();
      }
      trap->block = -1;
      r.step_error = usage_error_of([&] { engine.step(*opt); });
      if (f.explicit_reset) {
        engine.reset_after_error();
        for (MemCategory c : {MemCategory::kGatheredParams, MemCategory::kGradBuffers, MemCategory::kGradShards,
                              MemCategory::kCommBuffers}) {
          r.left_after_reset[zs::to_string(c)] = engine.memory().current(c);
        }
      }
      continue;
    }
    forward_backward(engine, model, step);
    engine.step(*opt);
    engine.zero_grad();
  }
  r.state = engine.full_state_dict();
  return r;
}

// Runs the failing training and the clean one; expects the failure to have happened, step() to
// have been refused after a failed backward, and the final parameters to equal the clean run's
// element by element (a partial gradient left behind would change them).
void expect_recovers(Strategy strategy, const Failure& f) {
  const std::string what = std::string(zs::to_string(strategy)) + ", block " + std::to_string(f.block) +
                           (f.in_backward ? " in backward" : " in forward") +
                           (f.explicit_reset ? ", reset_after_error()" : ", reset by the next forward");
  const RunResult failed = train(strategy, f, true);
  const RunResult clean = train(strategy, f, false);
  EXPECT_TRUE(contains(failed.failure, f.in_backward ? "injected backward failure" : "injected forward failure"))
      << what << ": " << failed.failure;
  if (f.in_backward) {
    EXPECT_TRUE(contains(failed.step_error, "the last backward did not finish")) << what << ": " << failed.step_error;
  } else {
    // A failed forward made no gradients: step() runs (on the gradients of earlier steps: none).
    EXPECT_EQ(failed.step_error, "<no exception>") << what;
  }
  for (const auto& [category, bytes] : failed.left_after_reset) {
    EXPECT_EQ(bytes, 0) << what << ": " << category << " still accounted after reset_after_error()";
  }
  ASSERT_EQ(failed.state.size(), clean.state.size()) << what;
  for (const auto& [name, t] : clean.state) {
    EXPECT_EQ(zs::test::max_abs_diff(failed.state.at(name), t), 0.0) << what << ": " << name;
  }
}

}  // namespace

// A backward that throws inside the first block (after the later blocks' gradients were reduced
// into their shards, and with reductions in flight) leaves the engine usable: the next forward
// resets it and the next step equals a clean run's.
TEST(Recovery, BackwardThrowsInAUnitUnderEveryStrategy) {
  for (Strategy s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard, Strategy::kHybridShard}) {
    expect_recovers(s, Failure{2, 0, true, false});
  }
}

TEST(Recovery, BackwardThrowsInTheMiddleUnitThenExplicitReset) {
  expect_recovers(Strategy::kFullShard, Failure{1, 1, true, true});
  expect_recovers(Strategy::kFullShard, Failure{2, 2, true, false});
}

// A forward that throws inside a unit, with the next unit's gather prefetched and in flight.
TEST(Recovery, ForwardThrowsInAUnit) {
  for (Strategy s : {Strategy::kFullShard, Strategy::kShardGradOp, Strategy::kNoShard}) {
    expect_recovers(s, Failure{2, 1, false, false});
  }
}

// A failed backward inside no_sync: the accumulated micro-batches' gradients are dropped with it,
// and the engine runs a normal step afterwards.
TEST(Recovery, BackwardThrowsInsideNoSync) {
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  auto opt = zs::make_sgd(zs::SgdOptions{});
  std::string failure = "<no exception>";
  {
    auto no_sync = engine.no_sync();
    forward_backward(engine, model, 0);
    trap->block = 1;
    trap->in_backward = true;
    try {
      forward_backward(engine, model, 1);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    trap->block = -1;
  }
  EXPECT_TRUE(contains(failure, "injected backward failure")) << failure;
  engine.reset_after_error();
  for (zs::FlatParam* f : zs::detail::flat_params(engine)) {
    EXPECT_FALSE(f->has_grad_buffer()) << f->name() << ": gradient buffer kept after reset_after_error()";
  }
  for (const zs::ParamShard& p : engine.param_shards()) {
    EXPECT_FALSE(p.grad.defined()) << p.name << ": gradient shard kept after reset_after_error()";
  }
  // The engine's accounting agrees: nothing gathered, no gradient or comm buffer left.
  for (MemCategory c : {MemCategory::kGatheredParams, MemCategory::kGradBuffers, MemCategory::kGradShards,
                        MemCategory::kCommBuffers}) {
    EXPECT_EQ(engine.memory().current(c), 0) << zs::to_string(c) << " after reset_after_error()";
  }
  EXPECT_EQ(usage_error_of([&] {
              forward_backward(engine, model, 2);
              engine.step(*opt);
            }),
            "<no exception>");
  EXPECT_EQ(opt->steps(), 1);
}

// Ranks that run different units (rank 1 skips block 1 in its second step, a data-dependent
// branch): every rank gets the same clear error at the start of backward, naming the unit and
// the ranks, nothing hangs, and the engine runs normally afterwards.
TEST(UnitOrder, RankSkippingAUnitIsAnErrorOnEveryRank) {
  ZS_REQUIRE_RANKS(2);
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  auto opt = zs::make_sgd(zs::SgdOptions{});
  forward_backward(engine, model, 0);  // records the order: <root>, b0, b1, b2
  engine.step(*opt);
  engine.zero_grad();
  if (zs::test::rank() == 1) trap->skip_block = 1;
  const std::string msg = usage_error_of([&] { forward_backward(engine, model, 1); });
  trap->skip_block = -1;
  EXPECT_TRUE(contains(msg, "ranks ran different units")) << msg;
  EXPECT_TRUE(contains(msg, "unit #3 of the forward")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 ran unit 'b1'")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 ran unit 'b2'")) << msg;
  // The failed backward is reset by the next forward; every rank is in step again.
  EXPECT_EQ(usage_error_of([&] {
              forward_backward(engine, model, 2);
              engine.step(*opt);
            }),
            "<no exception>");
  EXPECT_EQ(opt->steps(), 2);
}

// The check also runs after a forward without grad (evaluation), where no backward follows.
TEST(UnitOrder, CheckedAfterAForwardWithoutGrad) {
  ZS_REQUIRE_RANKS(2);
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  forward_backward(engine, model, 0);
  if (zs::test::rank() == 1) trap->skip_block = 0;
  const std::string msg = usage_error_of([&] {
    torch::NoGradGuard no_grad;
    engine.forward([&] { return model->forward(torch::randn({2, 7})); });
  });
  trap->skip_block = -1;
  EXPECT_TRUE(contains(msg, "rank 0 ran unit 'b0'")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 ran unit 'b1'")) << msg;
  EXPECT_EQ(usage_error_of([&] { forward_backward(engine, model, 1); }), "<no exception>");
}

// A forward with grad that no backward follows (an evaluation without NoGradGuard) is checked at
// the next forward, which then fails on every rank alike; the one after it runs normally.
TEST(UnitOrder, CheckedAtTheNextForwardWhenNoBackwardFollowed) {
  ZS_REQUIRE_RANKS(2);
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  forward_backward(engine, model, 0);
  if (zs::test::rank() == 1) trap->skip_block = 0;
  EXPECT_EQ(usage_error_of([&] { engine.forward([&] { return model->forward(torch::randn({2, 7})); }); }),
            "<no exception>")
      << "the forward itself is not checked: a backward may still follow";
  trap->skip_block = -1;
  const std::string msg = usage_error_of([&] { forward_backward(engine, model, 1); });
  EXPECT_TRUE(contains(msg, "at the forward after a forward with grad that no backward followed")) << msg;
  EXPECT_TRUE(contains(msg, "rank 0 ran unit 'b0'")) << msg;
  EXPECT_TRUE(contains(msg, "rank 1 ran unit 'b1'")) << msg;
  EXPECT_EQ(usage_error_of([&] { forward_backward(engine, model, 2); }), "<no exception>");
}

// When every rank changes its order alike (all skip block 1), the prefetch order is re-recorded:
// the skipped block is gathered (prefetched from the old order) in the step where the change
// happens, and not in the next one.
TEST(UnitOrder, ChangedOrderIsReRecordedForPrefetch) {
  ZS_REQUIRE_RANKS(2);  // at one rank fp32 gathers are views: nothing is counted
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kFullShard));
  forward_backward(engine, model, 0);  // records <root>, b0, b1, b2
  engine.zero_grad();
  trap->skip_block = 1;
  auto gathered_in_step = [&](int64_t step) {
    engine.reset_comm_counters();
    forward_backward(engine, model, step);
    engine.zero_grad();
    return engine.comm_counters().all_gather_elements;
  };
  const int64_t changed = gathered_in_step(1), next = gathered_in_step(2);
  trap->skip_block = -1;
  const auto sizes = expected_unit_sizes(*model, engine.unit_names(), engine.shard_group_size());
  EXPECT_EQ(changed - next, sizes.at("b1").padded_trainable)
      << "gathered " << changed << " elements in the step that skipped b1 first, " << next << " in the next";
  EXPECT_EQ(engine.memory().current(MemCategory::kGatheredParams), 0) << "a skipped unit left gathered";
}

// Replicas (NO_SHARD) that run units in different orders with the same count: their all-reduces
// pair up gradients of different (equal-sized) units without any error from the communicator.
// The replica check, issued at the start of backward and verified at its end, makes that an error
// on every rank, before the results become gradients; the engine then runs normally.
TEST(UnitOrder, ReplicasRunningUnitsInAnotherOrderAreAnError) {
  ZS_REQUIRE_RANKS(2);
  torch::manual_seed(11);
  auto trap = std::make_shared<Trap>();
  TrapNet model = keep_alive(TrapNet(trap));
  zs::ShardingEngine engine(zs::test::session(), model.ptr(), options_for(Strategy::kNoShard));
  auto opt = zs::make_sgd(zs::SgdOptions{});
  forward_backward(engine, model, 0);
  engine.step(*opt);
  engine.zero_grad();
  if (zs::test::rank() == 1) trap->swap_last_two = true;
  const std::string msg = usage_error_of([&] { forward_backward(engine, model, 1); });
  trap->swap_last_two = false;
  EXPECT_TRUE(contains(msg, "ranks ran different units")) << msg;
  EXPECT_TRUE(contains(msg, "across replicas")) << msg;
  EXPECT_TRUE(contains(msg, "ranks {1} ran one sequence of 4 unit(s)")) << msg;
  EXPECT_TRUE(contains(msg, zs::test::world_size() == 2 ? "ranks {0} ran one sequence of 4 unit(s)"
                                                         : "ranks {0, 2, 3} ran one sequence of 4 unit(s)"))
      << msg;
  EXPECT_TRUE(contains(msg, zs::test::rank() == 1 ? "'b0', 'b2', 'b1'" : "'b0', 'b1', 'b2'")) << msg;
  EXPECT_EQ(usage_error_of([&] {
              forward_backward(engine, model, 2);
              engine.step(*opt);
            }),
            "<no exception>");
  EXPECT_EQ(opt->steps(), 2);
}
