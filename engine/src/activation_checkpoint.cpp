// SPDX-License-Identifier: Apache-2.0
// Activation checkpointing as a custom autograd function (torch.utils.checkpoint, reentrant
// variant): forward runs fn without grad and keeps only the inputs and the RNG states; backward
// runs fn again with grad on detached inputs, under the saved RNG states, and back-propagates
// through the recomputation with a nested autograd backward.
#include "zeroshard/engine/activation_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <optional>
#include <mutex>
#include <utility>

#include "zeroshard/engine/autocast.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

thread_local uint64_t t_checkpoint_forwards = 0;
thread_local int t_checkpoint_forward_depth = 0;  // checkpointed forward runs in progress

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The default generators' states: CPU, and the CUDA devices listed.
struct RngStates {
  at::Tensor cpu;
  std::vector<std::pair<c10::DeviceIndex, at::Tensor>> cuda;
};

at::Generator generator_of(c10::Device device) {
  if (device.is_cpu()) return at::detail::getDefaultCPUGenerator();
  return at::globalContext().defaultGenerator(device);
}

at::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

RngStates capture_rng(const std::vector<c10::DeviceIndex>& cuda_devices) {
  RngStates s;
  s.cpu = get_state(generator_of(c10::Device(c10::kCPU)));
  for (c10::DeviceIndex d : cuda_devices) s.cuda.emplace_back(d, get_state(generator_of(c10::Device(c10::kCUDA, d))));
  return s;
}

void restore_rng(const RngStates& s) {
  set_state(generator_of(c10::Device(c10::kCPU)), s.cpu);
  for (const auto& [d, state] : s.cuda) set_state(generator_of(c10::Device(c10::kCUDA, d)), state);
}

// Saves the generators' states on construction and puts them back on destruction (also when the
// recomputation throws), like torch.random.fork_rng.
class RngFork {
 public:
  explicit RngFork(const std::vector<c10::DeviceIndex>& cuda_devices) : saved_(capture_rng(cuda_devices)) {}
  ~RngFork() {
    try {
      restore_rng(saved_);
    } catch (...) {  // a destructor must not throw; the states were valid when read
    }
  }
  RngFork(const RngFork&) = delete;
  RngFork& operator=(const RngFork&) = delete;

 private:
  RngStates saved_;
};

// What backward needs besides the inputs, kept in the autograd context as a capsule.
struct CheckpointState : torch::CustomClassHolder {
  explicit CheckpointState(CheckpointFnMulti f) : fn(std::move(f)) {}
  CheckpointFnMulti fn;
  std::vector<bool> requires_grad;            // per input, at forward time
  std::vector<c10::DeviceIndex> cuda_devices;  // devices of the CUDA inputs
  RngStates rng;                               // before the forward run
  // Autocast in force during the forward run, re-applied to the recomputation.
  c10::optional<c10::ScalarType> autocast_cpu, autocast_cuda;
  size_t num_outputs = 0;
};

constexpr const char* kStateKey = "zeroshard.checkpoint";

std::vector<c10::DeviceIndex> cuda_devices_of(const std::vector<at::Tensor>& inputs) {
  std::vector<c10::DeviceIndex> devices;
  if (!at::hasCUDA()) return devices;
  for (const at::Tensor& t : inputs) {
    if (!t.defined() || !t.is_cuda()) continue;
    const c10::DeviceIndex d = t.device().index();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  return devices;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  // `state` is not a tensor: autograd gives it an (undefined) gradient slot of its own.
  static variable_list forward(AutogradContext* ctx, c10::intrusive_ptr<CheckpointState> state,
                               at::TensorList input_list) {
    std::vector<at::Tensor> inputs(input_list.begin(), input_list.end());
    for (const at::Tensor& t : inputs) state->requires_grad.push_back(t.defined() && t.requires_grad());
    state->cuda_devices = cuda_devices_of(inputs);
    state->rng = capture_rng(state->cuda_devices);
    state->autocast_cpu = autocast_dtype(c10::DeviceType::CPU);
    state->autocast_cuda = autocast_dtype(c10::DeviceType::CUDA);
    ++t_checkpoint_forwards;
    std::vector<at::Tensor> outputs;
    {
      at::NoGradGuard no_grad;
      struct Depth {
        Depth() { ++t_checkpoint_forward_depth; }
        ~Depth() { --t_checkpoint_forward_depth; }
      } depth;
      outputs = state->fn(inputs);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      ZS_REQUIRE(outputs[i].defined(), UsageError, "checkpoint: output ", i,
                 " of the checkpointed function is an undefined tensor; return defined tensors only");
    }
    state->num_outputs = outputs.size();
    ctx->save_for_backward(inputs);
    ctx->saved_data[kStateKey] = at::IValue::make_capsule(state);
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    c10::intrusive_ptr<torch::CustomClassHolder> holder = ctx->saved_data.at(kStateKey).toCapsule();
    auto* state = static_cast<CheckpointState*>(holder.get());
    std::vector<at::Tensor> inputs = ctx->get_saved_variables();

    std::vector<at::Tensor> detached(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].defined()) continue;
      detached[i] = inputs[i].detach();
      detached[i].requires_grad_(state->requires_grad[i]);
    }

    std::vector<at::Tensor> outputs;
    {
      RngFork fork(state->cuda_devices);  // the training RNG stream continues where it was
      restore_rng(state->rng);
      at::AutoGradMode grad(true);
      std::optional<AutocastGuard> cpu_cast, cuda_cast;
      if (state->autocast_cpu) cpu_cast.emplace(c10::DeviceType::CPU, *state->autocast_cpu);
      if (state->autocast_cuda) cuda_cast.emplace(c10::DeviceType::CUDA, *state->autocast_cuda);
      outputs = state->fn(detached);
    }
    ZS_CHECK(outputs.size() == state->num_outputs, "checkpoint: the recomputation returned ", outputs.size(),
             " tensors but the forward run returned ", state->num_outputs, "; fn must be deterministic");

    variable_list roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    ZS_REQUIRE(!roots.empty(), UsageError,
               "checkpoint: none of the recomputed outputs requires grad, so no gradient can flow "
               "through this checkpoint; call the function without checkpoint()");
    torch::autograd::backward(roots, grads);

    variable_list result;
    result.reserve(detached.size() + 1);
    result.emplace_back();  // the state argument
    for (size_t i = 0; i < detached.size(); ++i) {
      result.push_back(state->requires_grad[i] ? detached[i].grad() : at::Tensor());
    }
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> checkpoint_multi(const CheckpointFnMulti& fn, const std::vector<at::Tensor>& inputs) {
  ZS_REQUIRE(static_cast<bool>(fn), UsageError, "checkpoint: the function to checkpoint is empty");
  if (!at::GradMode::is_enabled()) return fn(inputs);  // nothing to recompute for
  bool any_requires_grad = std::any_of(inputs.begin(), inputs.end(),
                                       [](const at::Tensor& t) { return t.defined() && t.requires_grad(); });
  ZS_REQUIRE(any_requires_grad, UsageError, "checkpoint: none of the ", inputs.size(),
             " inputs requires grad, so the parameters inside the checkpointed function would get no "
             "gradient; make an input require grad (x.requires_grad_()) or call the function directly");
  auto state = c10::make_intrusive<CheckpointState>(fn);
  return CheckpointFunction::apply(state, at::TensorList(inputs));
}

at::Tensor checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs) {
  ZS_REQUIRE(static_cast<bool>(fn), UsageError, "checkpoint: the function to checkpoint is empty");
  auto wrapped = [fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in)}; };
  return checkpoint_multi(wrapped, inputs).at(0);
}

at::Tensor checkpoint(const CheckpointFnUnary& fn, const at::Tensor& input) {
  ZS_REQUIRE(static_cast<bool>(fn), UsageError, "checkpoint: the function to checkpoint is empty");
  auto wrapped = [fn](const std::vector<at::Tensor>& in) { return std::vector<at::Tensor>{fn(in.at(0))}; };
  return checkpoint_multi(wrapped, {input}).at(0);
}

namespace {

// Runs modules [begin, end) of `seq` in order.
at::Tensor run_modules(torch::nn::SequentialImpl& seq, size_t begin, size_t end, at::Tensor x) {
  auto it = seq.begin() + static_cast<std::ptrdiff_t>(begin);
  for (size_t i = begin; i < end; ++i, ++it) x = it->forward(x);
  return x;
}

}  // namespace

at::Tensor checkpoint_sequential(torch::nn::Sequential& seq, int segments, const at::Tensor& input) {
  ZS_REQUIRE(!seq.is_empty(), UsageError, "checkpoint_sequential: the Sequential is empty (null holder)");
  const size_t n = seq->size();
  ZS_REQUIRE(segments >= 1 && static_cast<size_t>(segments) <= n, UsageError, "checkpoint_sequential: segments = ",
             segments, " is out of range; allowed: [1, ", n, "] for a Sequential of ", n, " modules");
  std::shared_ptr<torch::nn::SequentialImpl> impl = seq.ptr();  // kept alive by the graph
  const size_t per = n / static_cast<size_t>(segments);
  at::Tensor x = input;
  size_t begin = 0;
  for (int s = 0; s + 1 < segments; ++s, begin += per) {
    const size_t end = begin + per;
    x = checkpoint([impl, begin, end](const at::Tensor& t) { return run_modules(*impl, begin, end, t); }, x);
  }
  return run_modules(*impl, begin, n, x);  // the last segment: its activations are needed at once
}

uint64_t detail::checkpoint_forwards_on_this_thread() { return t_checkpoint_forwards; }
bool detail::in_checkpoint_forward() { return t_checkpoint_forward_depth > 0; }

}  // namespace zeroshard
