// The start of every training program: its flags, threads, batch plan and the memory trial's
// plan line (trainer.h).

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "zeroshard/base/error.h"
#include "zeroshard/core/config.h"
#include "zeroshard/core/session.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {

TrainFlags parse_train_flags(const std::vector<std::string>& args, const std::string& usage,
                             const std::vector<ProgramFlag>& program_flags) {
  TrainFlags f;
  for (size_t i = 1; i < args.size(); ++i) {
    std::string k = args[i], v;
    bool has_value = false;
    const size_t eq = k.find('=');
    if (k.rfind("--", 0) == 0 && eq != std::string::npos) {  // --flag=value
      v = k.substr(eq + 1);
      k = k.substr(0, eq);
      has_value = true;
    }
    auto value = [&]() -> std::string {
      if (has_value) return v;
      ZS_REQUIRE(i + 1 < args.size(), UsageError, k, " needs a value; ", usage);
      return args[++i];
    };
    auto no_value = [&]() {
      ZS_REQUIRE(!has_value, UsageError, k, " takes no value (got '", v, "'); ", usage);
      return true;
    };
    if (k == "--metrics-out") {
      f.metrics_out = value();
    } else if (k == "--resume") {
      f.resume = no_value();
    } else if (k == "--memory-summary") {
      f.memory_summary = no_value();
    } else if (k == "--memory-trial") {
      f.memory_trial = no_value();
    } else if (k == "--check-loss-decreases") {
      f.check_loss_decreases = no_value();
    } else if (k == "--help" || k == "-h") {
      f.help = no_value();
    } else {
      auto it = std::find_if(program_flags.begin(), program_flags.end(),
                             [&](const ProgramFlag& p) { return p.name == k; });
      ZS_REQUIRE(it != program_flags.end(), UsageError, "unknown argument '", args[i], "'; ", usage);
      f.program[k] = it->takes_value ? value() : (no_value(), std::string());
    }
  }
  return f;
}

std::optional<TrainStart> start_training(Session& s, const std::string& usage,
                                         const std::vector<ProgramFlag>& program_flags) {
  TrainStart start{parse_train_flags(s.args(), usage, program_flags), TrainOptions::from_config(s.config()), {}};
  if (start.flags.help) {
    if (s.rank() == 0) std::printf("%s\n", usage.c_str());
    return std::nullopt;
  }
  // Intra-op threads: this host's cores shared by its ranks.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, s.local_world_size())));
  start.plan = plan_batches(start.options, s.world_size());
  if (start.flags.memory_trial && s.rank() == 0) {
    std::printf("zeroshard-memory-trial: plan world_size=%d per_rank_batch=%lld micro_batches=%d micro_batch_size=%lld\n",
                s.world_size(), static_cast<long long>(start.plan.micro_batch_size * start.plan.micro_batches),
                start.plan.micro_batches, static_cast<long long>(start.plan.micro_batch_size));
    std::fflush(stdout);
  }
  return start;
}

}  // namespace zeroshard
