// SPDX-License-Identifier: Apache-2.0
#pragma once
// Activation checkpointing: run a block without keeping its intermediate activations and run it
// again during backward to get them back (the reentrant variant of torch.utils.checkpoint).
//
//   for (auto& b : blocks) x = zeroshard::checkpoint([&b](const at::Tensor& t) { return b(t); }, x);
//
// Contract:
// - Forward runs `fn` once without gradient recording; only the inputs are kept (as
//   save_for_backward does: modifying one in place before backward is an autograd error).
// - Backward runs `fn` a second time with gradient recording, on detached copies of the inputs
//   that require grad where the originals do, then back-propagates the incoming gradients through
//   that recomputation (a nested, "reentrant" autograd backward). Parameters used inside `fn`
//   receive their gradients by ordinary accumulation during that nested backward; the inputs'
//   gradients are returned to the outer graph (undefined for inputs that do not require grad).
// - RNG: the CPU default generator's state (and, when LibTorch has CUDA, the default generator
//   state of every CUDA device an input lives on) is saved before the forward run and restored
//   for the recomputation, so dropout draws the same masks. The generators' states from before
//   the recomputation are put back afterwards: checkpointing does not shift the training RNG
//   stream (PyTorch's preserve_rng_state=True).
// - `fn` must be deterministic given its inputs, parameters and the RNG state, and must not
//   depend on state it changes itself (e.g. BatchNorm running statistics are updated twice).
//   The autocast state in force at the forward run (CPU and CUDA) is re-applied to the
//   recomputation; double backward is not supported.
// - `fn` is kept (copied) in the autograd graph until backward: whatever it captures by reference
//   must outlive the graph.
// - Under grad mode, at least one input must require grad: otherwise the output would carry no
//   gradient and the parameters inside `fn` would silently get none (UsageError). With grad mode
//   off `fn` simply runs.
// Thread-safety: as autograd; the generators' mutexes are held while their states are read or
// written.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace torch {
namespace nn {
class Sequential;
}  // namespace nn
}  // namespace torch

namespace zeroshard {

using CheckpointFnMulti = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;
using CheckpointFn = std::function<at::Tensor(const std::vector<at::Tensor>&)>;
using CheckpointFnUnary = std::function<at::Tensor(const at::Tensor&)>;

// Checkpointed call of `fn(inputs)` returning several tensors. Every output is differentiable
// (floating point outputs that fn produced without gradient count as constants in backward).
std::vector<at::Tensor> checkpoint_multi(const CheckpointFnMulti& fn, const std::vector<at::Tensor>& inputs);

// Checkpointed call of `fn(inputs)`.
at::Tensor checkpoint(const CheckpointFn& fn, const std::vector<at::Tensor>& inputs);

// Checkpointed call of `fn(input)`.
at::Tensor checkpoint(const CheckpointFnUnary& fn, const at::Tensor& input);

// Runs `seq` on `input` in `segments` contiguous segments (size() / segments modules each, the
// last one taking the remainder) and checkpoints every segment but the last, whose activations
// backward needs at once (as torch.utils.checkpoint_sequential). Each module is called with
// AnyModule::forward(tensor) and must return a tensor. UsageError unless 1 <= segments <= size(),
// and (see checkpoint) when segments > 1 under grad mode with an input that does not require grad.
at::Tensor checkpoint_sequential(torch::nn::Sequential& seq, int segments, const at::Tensor& input);

namespace detail {
// How many checkpointed forward runs this thread has started. The engine compares it across a
// unit's forward: a checkpoint inside a unit hides part of the unit's backward in a nested
// autograd pass, which the graph the unit's backward starts in does not show.
uint64_t checkpoint_forwards_on_this_thread();
// Whether this thread is inside a checkpointed forward run (gradient recording off there, and a
// recomputation in backward to follow).
bool in_checkpoint_forward();
}  // namespace detail

}  // namespace zeroshard
