// SPDX-License-Identifier: Apache-2.0
// offload_demo: trains a model whose fp32 Adam state does not fit a memory budget, with the
// optimizer state (master copy, exp_avg, exp_avg_sq) streamed through files on NVMe, and prints
// the memory report showing where every byte lives.
//
//   mpirun -n 2 build/bin/offload_demo [--budget-mb 40] [--dim 1024] [--blocks 8] [--steps 20]
//                                      [--nvme-path DIR] [--set key=value ...]
//
// The model is a stack of residual Linear blocks (each a zeroshard::Unit) learning a fixed random
// teacher network; loss must fall. Exit code 0 only if the loss fell and the rank's memory for
// model state stayed within the budget while the state on NVMe exceeded it.

#include <ATen/ops/randn.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/utils.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/config/resolve.h"
#include "zeroshard/core/session.h"
#include "zeroshard/offload/offload_optimizer.h"
#include "zeroshard/engine/engine.h"
#include "zeroshard/engine/unit.h"

namespace zs = zeroshard;

namespace {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(int64_t d) : fc(register_module("fc", torch::nn::Linear(d, d))) {}
  torch::Tensor forward(torch::Tensor x) { return x + torch::tanh(fc(x)); }
  torch::nn::Linear fc;
};

struct NetImpl : torch::nn::Module {
  NetImpl(int64_t d, int blocks) {
    for (int i = 0; i < blocks; ++i) layers.push_back(register_module("b" + std::to_string(i), zs::Unit<BlockImpl>(d)));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& b : layers) x = b(x);
    return x;
  }
  std::vector<zs::Unit<BlockImpl>> layers;
};
TORCH_MODULE(Net);

}  // namespace

int main(int argc, char** argv) {
  const zs::Program program{"offload_demo",
                            {zs::keys::engine(),
                             {"offload", "optimizer.type", "optimizer.lr", "optimizer.beta1", "optimizer.beta2",
                              "optimizer.eps", "optimizer.weight_decay", "optimizer.momentum", "optimizer.nesterov"}}};
  return zs::run_main(argc, argv, program, [](zs::Session& session, const zs::Run& run) {
    double budget_mb = 40;
    int64_t dim = 1024;
    int blocks = 8, steps = 20;
    std::string nvme_path = (std::filesystem::current_path() / "offload_demo_nvme").string();
    zs::cli::App app("offload_demo",
                     "Trains a model whose fp32 Adam state does not fit --budget-mb, with the optimizer state "
                     "streamed through files on NVMe (offload.optimizer, default NVME here), and prints where every "
                     "byte lives.");
    app.usage("mpirun -n N offload_demo [OPTIONS]");
    app.add_number("--budget-mb", &budget_mb, "memory budget for model state per rank, MiB (default 40)", 0)
        ->type_name("MB");
    app.add_int("--dim", &dim, "width of each residual Linear block (default 1024)", 1);
    app.add_int("--blocks", &blocks, "blocks, each a zeroshard::Unit (default 8)", 1);
    app.add_int("--steps", &steps, "optimizer steps (default 20)", 1);
    app.add_text("--nvme-path", &nvme_path, "folder for the state files (default ./offload_demo_nvme)", "DIR");
    app.add_config_options();
    if (!app.parse(run.args, session.rank() == 0)) return 0;
    // The demo's defaults where the config leaves them: the optimizer state on NVMe, in --nvme-path.
    zs::Config cfg = run.config;
    if (!cfg.offload().has_optimizer()) cfg.mutable_offload()->set_optimizer(zs::config::OffloadConfig::NVME);
    if (cfg.offload().nvme_path().empty()) {
      if (session.world()->rank() == 0) std::filesystem::create_directories(nvme_path);
      session.world()->barrier("demo.dir")->wait();
      cfg.mutable_offload()->set_nvme_path(nvme_path);
    }
    zs::validate_config(cfg);
    const zs::RunOptions o = zs::resolve(cfg);
    const int rank = session.world()->rank(), world = session.world()->size();
    torch::manual_seed(1);
    Net model(dim, blocks);
    Net teacher(dim, blocks);
    zs::ShardingEngine engine(session, model.ptr(), o.sharding);
    auto opt = zs::make_engine_optimizer(o.optimizer, o.offload, rank, &engine.memory());
    const double budget = budget_mb * 1048576.0;
    const double adam_state = 12.0 * engine.num_padded_trainable_params() / engine.shard_group_size();
    if (rank == 0) {
      std::printf("offload_demo: %lld parameters over %d rank(s); fp32 Adam state per rank (master + 2 moments) "
                  "%.1f MiB vs budget %.1f MiB: %s\n",
                  static_cast<long long>(engine.num_params()), world, adam_state / 1048576.0, budget_mb,
                  adam_state > budget ? "does not fit" : "fits (raise --dim/--blocks for a real demo)");
      std::printf("optimizer: %s\n", opt->describe().c_str());
    }
    double first = 0, last = 0;
    for (int step = 0; step < steps; ++step) {
      torch::manual_seed(100 + step * world + rank);
      torch::Tensor x = torch::randn({16, dim});
      torch::Tensor y;
      {
        torch::NoGradGuard ng;
        y = teacher->forward(x);
      }
      torch::Tensor loss = engine.forward([&] { return torch::mse_loss(model->forward(x), y); });
      loss.backward();
      engine.step(*opt);
      engine.zero_grad();
      last = loss.item<double>();
      if (step == 0) first = last;
      if (rank == 0 && (step % 5 == 0 || step == steps - 1)) std::printf("step %3d  loss %.6f\n", step, last);
    }
    const zs::MemoryStats& mem = engine.memory();
    const double in_memory = static_cast<double>(mem.persistent());
    const double on_nvme = static_cast<double>(mem.current(zs::MemCategory::kNvme));
    if (rank == 0) {
      std::printf("%s", engine.memory_report().c_str());
      std::printf("model state in memory %.1f MiB (budget %.1f MiB); optimizer state on NVMe %.1f MiB "
                  "(two generations: the step writes the new state beside the previous one)\n",
                  in_memory / 1048576.0, budget_mb, on_nvme / 1048576.0);
    }
    const bool ok = last < first && in_memory <= budget && (o.offload.target != zs::OffloadTarget::kNvme || on_nvme > budget);
    if (rank == 0) std::printf("%s: loss %.6f -> %.6f\n", ok ? "OK" : "FAILED", first, last);
    return ok ? 0 : 1;
  });
}
