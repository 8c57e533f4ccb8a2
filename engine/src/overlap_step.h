// SPDX-License-Identifier: Apache-2.0
#pragma once
// The optimizer step run during backward (ShardingEngine::step_during_backward): a thread that
// updates each shard as its gradient becomes final, and what the engine needs to know at step()
// to keep the result exact (the gradients' factors applied after the shards were stepped).

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zeroshard/comm/streams.h"
#include "zeroshard/optim/optimizer.h"

namespace zeroshard {
class FlatParam;
}  // namespace zeroshard

namespace zeroshard::detail {

// One thread running tasks in the order posted. A task that throws stops the ones after it (they
// are dropped) until drain() hands the failure over. Destroying it drops the tasks not started.
class ShardStepWorker {
 public:
  ShardStepWorker() = default;
  ~ShardStepWorker();
  ShardStepWorker(const ShardStepWorker&) = delete;
  ShardStepWorker& operator=(const ShardStepWorker&) = delete;

  void post(std::function<void()> task);
  // Waits until every task posted has run (or been dropped) and returns the first failure since
  // the last drain (null if none).
  std::exception_ptr drain();

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::exception_ptr failure_;
  std::thread thread_;  // started at the first post
};

// An armed step: the optimizer, which flats it steps at which position of param_shards(), and
// what happened to the gradients since the shards were stepped.
struct OverlappedStep {
  ShardedOptimizer* optimizer = nullptr;  // armed when set
  std::unordered_map<const FlatParam*, size_t> position;  // trainable flat -> param_shards() index
  std::vector<bool> posted;
  size_t stepped = 0;  // shards posted to the worker
  // Each posted shard's gradient as the worker read it (tensor, version): a gradient changed in
  // place since, other than by the factors below, makes step() redo the step.
  std::vector<std::pair<const void*, int64_t>> read_as;
  // Factors applied to the gradients after shards were posted (clip coefficients, on the device
  // where clipping ran); the step stands only if every one is exactly 1.
  std::vector<at::Tensor> factors;
  bool changed = false;  // a factor known to differ from 1 (gradients().scale)
  std::exception_ptr failure;  // an update that failed on the worker, taken when it was drained
  ShardStepWorker worker;

  bool armed() const { return optimizer != nullptr; }
  // The gradients the shards were stepped with are still the step's: every factor since is 1.
  bool gradients_unchanged() const;
  void disarm() {
    optimizer = nullptr;
    position.clear();
    posted.clear();
    read_as.clear();
    stepped = 0;
    factors.clear();
    changed = false;
    failure = nullptr;
  }
};

}  // namespace zeroshard::detail
