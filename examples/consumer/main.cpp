// Smallest program built against an installed zeroshard (find_package(zeroshard)).
#include <ATen/ops/full.h>

#include <cstdio>

#include "zeroshard/core/main.h"
#include "zeroshard/core/session.h"

int main(int argc, char** argv) {
  return zeroshard::run_main(argc, argv, [](zeroshard::Session& s) {
    at::Tensor t = at::full({4}, static_cast<float>(s.rank() + 1));
    s.world()->all_reduce(t, zeroshard::ReduceOp::kSum, "consumer")->wait();
    const float expected = s.world_size() * (s.world_size() + 1) / 2.0f;
    if (s.rank() == 0) std::printf("consumer: rank 0 of %d, all_reduce sum = %g (expected %g)\n", s.world_size(), t[0].item<float>(), expected);
    return t[0].item<float>() == expected ? 0 : 1;
  });
}
