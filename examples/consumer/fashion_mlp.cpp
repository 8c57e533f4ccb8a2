// SPDX-License-Identifier: Apache-2.0
// A complete training program built against an installed zeroshard (find_package(zeroshard)):
// a two-layer classifier of Fashion-MNIST images, sharded as the config says (FULL_SHARD by
// default; precision, offload and parameter groups as well), trained, evaluated and checkpointed
// by zeroshard::Trainer. A key it does not act on (lora.rank) is refused before anything starts.
//   mpirun -n 2 fashion_mlp --set train.steps=100 --check-loss-decreases
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include "zeroshard/config/main.h"
#include "zeroshard/engine/sharded_init.h"
#include "zeroshard/train/images.h"
#include "zeroshard/train/trainer.h"

namespace zs = zeroshard;
namespace F = torch::nn::functional;

struct HiddenImpl : torch::nn::Module {  // a sharded unit: gathered only while it computes
  HiddenImpl() : fc(register_module("fc", torch::nn::Linear(784, 256))) {}
  torch::Tensor forward(torch::Tensor x) { return torch::relu(fc(x.flatten(1))); }
  torch::nn::Linear fc;
};

struct NetImpl : torch::nn::Module {
  NetImpl()
      : hidden(register_module("hidden", zs::Unit<HiddenImpl>())),
        head(register_module("head", torch::nn::Linear(256, 10))) {}
  torch::Tensor forward(torch::Tensor x) { return head(hidden(x)); }
  zs::Unit<HiddenImpl> hidden;
  torch::nn::Linear head;
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  const zs::Program program{"fashion_mlp", {zs::keys::engine(), zs::keys::trainer()}};
  return zs::run_main(argc, argv, program, [](zs::Session& s, const zs::Run& run) {
    auto start = zs::start_training(s, run, "An MLP on Fashion-MNIST, trained with zeroshard.");
    if (!start) return 0;
    auto images = [](bool train) {
      return std::make_shared<zs::ImageClassificationDataset>(
          zs::load_fashion_mnist(zs::kFashionMnistDir, train), zs::kFashionMnistMean, zs::kFashionMnistStd);
    };
    zs::ShardedInit init(s, run.options.sharding);  // strategy, precision, offloaded shards
    Net net;
    zs::ShardingEngine engine(init, net.ptr());
    zs::Trainer trainer(s, engine, *start);  // optimizer, groups, schedule, scaler, checkpoints
    zs::TrainTask task;
    task.train = images(true);
    task.loss = [&](const zs::Batch& b) { return F::cross_entropy(net->forward(b.data), b.target); };
    task.eval.data = images(false);
    task.eval.metrics = {{"test_loss", "test loss"}};
    task.eval.per_sample = [&](const zs::Batch& b) {
      auto none = F::CrossEntropyFuncOptions().reduction(torch::kNone);
      return std::vector<at::Tensor>{F::cross_entropy(net->forward(b.data), b.target, none)};
    };
    return trainer.fit(task).exit_status;
  });
}
