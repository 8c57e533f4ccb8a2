// SPDX-License-Identifier: Apache-2.0
#pragma once
// Learning-rate schedules, as pure functions of the optimizer step. Step numbers count completed
// optimizer steps, starting at 0 (the lr used by the first step is lr_at(0)).

#include <cstdint>
#include <string>


namespace zeroshard {

// A schedule as plain values (the defaults are the config's `scheduler` section).
struct LrScheduleOptions {
  enum class Type {
    kConstant,      // CONSTANT: lr throughout (after warmup)
    kLinearWarmup,  // LINEAR_WARMUP: warmup, then linear decay to min_lr_ratio * lr at total_steps (if set)
    kCosine,        // COSINE: warmup, then cosine decay to min_lr_ratio * lr at total_steps
    kStep,          // STEP: warmup, then lr times gamma every step_size steps
  };
  Type type = Type::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // 0: unset
  double min_lr_ratio = 0;
  int64_t step_size = 1000;
  double gamma = 0.1;
};
const char* to_string(LrScheduleOptions::Type t);  // "CONSTANT", "LINEAR_WARMUP", "COSINE", "STEP"

class LrScheduler {
 public:
  // `base_lr` is the peak learning rate. Throws UsageError naming LrScheduleOptions.<field> for an
  // out-of-range or inconsistent setting (e.g. COSINE without total_steps).
  LrScheduler(const LrScheduleOptions& options, double base_lr);

  // Learning rate for optimizer step `step` (0-based).
  double lr_at(int64_t step) const;
  std::string describe() const;

 private:
  LrScheduleOptions cfg_;
  double base_lr_;
};

}  // namespace zeroshard
