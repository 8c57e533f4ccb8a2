// SPDX-License-Identifier: Apache-2.0
#pragma once
// GradScaler: loss scaling for fp16 training on sharded fp32 gradients (torch.cuda.amp.GradScaler's
// semantics, plus DeepSpeed's hysteresis and min_scale).
//
//   zeroshard::GradScaler scaler(run.loss_scale, run.fp16, session.world());   // RunOptions (resolve.h)
//   for (...) {
//     auto loss = engine.forward([&] { return loss_fn(model->forward(x), y); });
//     scaler.scale(loss).backward();
//     if (scaler.unscale_and_check(engine.gradients())) {    // collective: all ranks agree
//       engine.clip_grad_norm(1.0);                         // on the unscaled gradients
//       engine.step(*opt);                                  // optimizer + buffer averaging
//     }
//     scaler.update();                                      // once per step, stepped or not
//     engine.zero_grad();
//   }
//
// Use that form with a ShardingEngine: engine.step() also averages the buffers. Without an engine
// (shards of your own), `scaler.step(opt, shards)` does unscale_and_check, opt.step and update in
// one call.
//
// Modes (LossScaleMode):
//   AUTO      DYNAMIC when the constructor is told fp16 is in use, DISABLED otherwise.
//   DYNAMIC   update() after a step whose gradients held an inf/nan on any rank (an "overflow
//             step") takes one from the hysteresis counter; when it reaches 0 the scale is
//             multiplied by backoff_factor (never below min_scale) and the counter starts again at
//             `hysteresis`. A finite step refills the counter (the overflow steps must be
//             consecutive; DeepSpeed's consecutive_hysteresis=true) and
//             counts towards growth: after growth_interval finite steps in a row the scale is
//             multiplied by growth_factor (growth that would leave the float range is skipped).
//             An overflow step resets the growth count. If a back-off is due while the scale is
//             already at min_scale, update() throws LossScaleError naming the step: training
//             would otherwise skip every step from then on.
//   STATIC    the scale is always initial_scale; overflow steps are skipped, never an error.
//   DISABLED  the scale is 1 (scale() returns the loss itself, gradients are not touched), but the
//             inf/nan check still runs: unscale_and_check returns false when any rank's gradients
//             are not finite, so a non-finite step is skipped on every rank instead of writing
//             inf/nan into the parameters. check_norm(global_norm) takes the same decision from the
//             global gradient norm the step computes anyway (engine.clip_grad_norm_tensor): no
//             second pass over the gradients, no second all-reduce (the Trainer does this).
// Every skipped step counts in skipped_steps(), in every mode.
//
// unscale_and_check is a collective over the communicator passed to the constructor (one small
// all-reduce), which must contain every rank holding shards of the model (session.world()): all
// ranks must call it in the same order, and all of them return the same decision.
// Not thread-safe: one training thread per scaler.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/comm/communicator.h"
#include "zeroshard/base/error.h"
#include "zeroshard/optim/optimizer.h"

namespace zeroshard {

// fp16 gradients keep overflowing at the minimum loss scale: the run cannot make progress.
ZS_DECLARE_ERROR(LossScaleError, Error, "loss scale error");

enum class LossScaleMode {
  kAuto,      // AUTO: DYNAMIC when fp16 is in use, DISABLED otherwise
  kDynamic,   // DYNAMIC: grow and back off the scale from the all-reduced inf/nan check
  kStatic,    // STATIC: always initial_scale
  kDisabled,  // DISABLED: no loss scaling
};
const char* to_string(LossScaleMode m);  // "AUTO", "DYNAMIC", "STATIC", "DISABLED"

// Loss scaling as plain values (the defaults are the config's precision.loss_scale).
struct LossScaleOptions {
  LossScaleMode mode = LossScaleMode::kAuto;
  double initial_scale = 65536;  // scale at the first step (STATIC: the fixed scale)
  double growth_factor = 2;      // after growth_interval steps without overflow
  double backoff_factor = 0.5;   // after an overflow
  int growth_interval = 2000;    // overflow-free steps before the scale grows
  int hysteresis = 2;            // consecutive overflow steps tolerated before backing off
  double min_scale = 1;          // the scale never backs off below this
};

// What a checkpoint saves to resume the scaler exactly.
struct GradScalerState {
  double scale = 1;             // current loss scale, > 0 and finite
  int64_t growth_tracker = 0;   // finite steps in a row since the last growth or overflow
  int hysteresis_left = 1;      // overflow steps still tolerated before the next back-off, >= 1
  int64_t steps = 0;            // update() calls so far
  int64_t skipped = 0;          // of which skipped (non-finite gradients), <= steps
};

class GradScaler {
 public:
  // `fp16_in_use`: whether fp16 is used for parameters or gradient reduction (resolves AUTO;
  // RunOptions::fp16). `comm`: the ranks over which the inf/nan check is all-reduced. Throws
  // UsageError naming LossScaleOptions.<field> for an out-of-range setting, including min_scale
  // above initial_scale for DYNAMIC, and for a null communicator.
  GradScaler(const LossScaleOptions& options, bool fp16_in_use, std::shared_ptr<Communicator> comm);

  // loss * scale(); the loss itself when the mode is DISABLED. Differentiable.
  at::Tensor scale(const at::Tensor& loss) const;

  // Collective. Multiplies every defined gradient (fp32, as ParamShard promises) by 1/scale() in
  // place, checks the unscaled gradients for inf/nan, and all-reduces the result (max) over the
  // communicator. Returns true when every rank's gradients are finite: the step should be
  // applied. Call it exactly once per step, after backward and before clipping, then update().
  // Throws UsageError if called twice without update() in between, or for a non-fp32 gradient.
  // A gradient offloaded by a ShardingEngine (offload.grads; a placeholder on the meta device) is
  // a UsageError naming the shard: use the engine overload.
  bool unscale_and_check(const std::vector<ParamShard>& shards);
  // The same over every gradient shard of `engine`, offloaded ones included (each is brought in to
  // be checked, the next read ahead, and takes the factor at its next load: nothing is written).
  // What the Trainer calls.
  bool unscale_and_check(GradientShards& gradients);

  // DISABLED only, instead of unscale_and_check: the step's inf/nan decision from `global_norm`,
  // the all-reduced L2 norm of every rank's gradients (so every rank decides alike; not a
  // collective itself). Returns true when it is finite (a NaN or infinite gradient makes it
  // non-finite; so does a norm beyond the float range, counted as a skipped step too). Then
  // update(), as after unscale_and_check. UsageError in another mode (the gradients must be
  // unscaled: use unscale_and_check) or when called twice without update().
  bool check_norm(double global_norm);

  // unscale_and_check(shards), opt.step(shards) only if it returned true, then update(). Returns
  // whether the optimizer stepped. For shards without a ShardingEngine (see the header comment).
  bool step(ShardedOptimizer& opt, const std::vector<ParamShard>& shards);

  // Ends the step: adapts the scale from the last unscale_and_check's result (see Modes).
  // Throws UsageError if unscale_and_check did not run since the last update(), and
  // LossScaleError when DYNAMIC needs to back off below min_scale.
  void update();

  double scale() const { return state_.scale; }
  int64_t steps() const { return state_.steps; }
  int64_t skipped_steps() const { return state_.skipped; }
  // Whether the step ended by the last update() was skipped; false before the first update().
  bool last_step_skipped() const { return last_step_skipped_; }
  // The resolved mode: DYNAMIC, STATIC or DISABLED (never AUTO).
  LossScaleMode mode() const { return mode_; }

  GradScalerState state() const { return state_; }
  // Restores a state() taken from a scaler with the same mode (e.g. from a checkpoint). Throws
  // UsageError naming the field for a non-positive or non-finite scale, negative counters,
  // hysteresis_left < 1, skipped > steps, or (STATIC, DISABLED) a scale other than the fixed one.
  // Must not be called between unscale_and_check and update.
  void load_state(const GradScalerState& state);

  // e.g. "GradScaler(mode=DYNAMIC, scale=65536, growth_tracker=3/2000, hysteresis_left=2/2,
  //       steps=10, skipped=1, min_scale=1)"
  std::string to_string() const;

 private:
  void back_off();

  LossScaleOptions cfg_;
  LossScaleMode mode_;
  std::shared_ptr<Communicator> comm_;
  GradScalerState state_;
  bool checked_ = false;       // unscale_and_check ran since the last update()
  // The all-reduced decision from each rank's gradient extremes (after unscaling).
  bool decide(const std::vector<at::Tensor>& extremes);
  bool found_inf_ = false;     // its all-reduced result
  bool last_step_skipped_ = false;
};

}  // namespace zeroshard
