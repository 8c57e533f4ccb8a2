#pragma once
// Learning-rate schedules, as pure functions of the optimizer step, from the config's
// `scheduler` section. Step numbers count completed optimizer steps, starting at 0 (the lr used by
// the first step is lr_at(0)).

#include <cstdint>
#include <string>

#include "zeroshard/core/config.h"

namespace zeroshard {

class LrScheduler {
 public:
  // `base_lr` is the peak learning rate (optimizer.lr). Throws ConfigError for inconsistent
  // settings (e.g. COSINE without total_steps), naming the field.
  LrScheduler(const config::SchedulerConfig& cfg, double base_lr);

  // Learning rate for optimizer step `step` (0-based).
  double lr_at(int64_t step) const;
  std::string describe() const;

 private:
  config::SchedulerConfig cfg_;
  double base_lr_;
};

}  // namespace zeroshard
