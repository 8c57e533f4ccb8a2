// SPDX-License-Identifier: Apache-2.0
// Smallest program built against an installed zeroshard (find_package(zeroshard)): a collective
// on the world communicator, then one sharded training step.
#include <ATen/ops/full.h>
#include <torch/nn/modules/linear.h>

#include <cstdio>

#include "zeroshard/core/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/engine/engine.h"

struct NetImpl : torch::nn::Module {
  NetImpl() : layer(register_module("layer", zeroshard::Unit<torch::nn::LinearImpl>(8, 8))) {}
  torch::Tensor forward(torch::Tensor x) { return layer(x); }
  zeroshard::Unit<torch::nn::LinearImpl> layer;
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  return zeroshard::run_main(argc, argv, [](zeroshard::Session& s) {
    at::Tensor t = at::full({4}, static_cast<float>(s.rank() + 1));
    s.world()->all_reduce(t, zeroshard::ReduceOp::kSum, "consumer")->wait();
    const float expected = s.world_size() * (s.world_size() + 1) / 2.0f;
    Net net;
    zeroshard::ShardingEngine engine(s, net.ptr(), zeroshard::ShardingOptions{});
    auto opt = zeroshard::make_sgd(zeroshard::SgdOptions{});
    at::Tensor loss = engine.forward([&] { return net->forward(at::full({2, 8}, 1.0f)).pow(2).mean(); });
    loss.backward();
    engine.step(*opt);
    if (s.rank() == 0) {
      std::printf("consumer: rank 0 of %d, all_reduce sum = %g (expected %g), sharded step loss %.4f\n",
                  s.world_size(), t[0].item<float>(), expected, loss.item<float>());
    }
    return t[0].item<float>() == expected ? 0 : 1;
  });
}
