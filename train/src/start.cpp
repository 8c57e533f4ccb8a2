// SPDX-License-Identifier: Apache-2.0
// The start of every training program: its flags, threads, batch plan and the memory trial's
// plan line (trainer.h).

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/main.h"
#include "zeroshard/core/session.h"
#include "zeroshard/train/trainer.h"

namespace zeroshard {

namespace {

std::string program_name(const std::string& argv0) {
  const size_t slash = argv0.rfind('/');
  return slash == std::string::npos ? argv0 : argv0.substr(slash + 1);
}

// The common flags and the program's on `app`, read into `f`.
void add_train_flags(cli::App& app, TrainFlags& f, const std::vector<ProgramFlag>& program_flags) {
  app.usage("mpirun -n N " + app.program() + " [OPTIONS]");
  app.add_text("--metrics-out", &f.metrics_out, "JSON lines: every step, evaluation and a summary (rank 0)", "FILE");
  app.add_text("--tensorboard", &f.tensorboard,
               "TensorBoard event files of the run in DIR (created); wins over logging.tensorboard_dir", "DIR");
  app.add_optional("--resume", "auto",
                   "continue from the latest checkpoint in checkpoint.dir; --resume=auto: the same when there is one, "
                   "else start at step 0 (a job that restarts itself)",
                   [&f, &app](const std::string* value) {
                     if (value == nullptr) {
                       f.resume = true;
                     } else if (*value == "auto") {
                       f.resume_auto = true;
                     } else {
                       app.fail("--resume takes no value, or =auto; got '" + *value + "'");
                     }
                   });
  app.add_flag("--memory-summary", &f.memory_summary, "rank 0 prints its memory summary at the end");
  app.add_flag("--memory-trial", &f.memory_trial,
               "build the model, run 2 steps and print the memory peak (zeroshard-launch --find-batch-size)");
  app.add_flag("--check-loss-decreases", &f.check_loss_decreases,
               "exit 1 unless the held-out loss ends below 90% of its value before training");
  for (const ProgramFlag& p : program_flags) {
    if (!p.takes_value) {
      auto given = std::make_shared<bool>(false);  // kept by the step below
      app.add_flag(p.name, given.get(), p.help);
      app.then([&f, given, name = p.name] {
        if (*given) f.program[name] = "";
      });
      continue;
    }
    const std::string value_name = p.value_name.empty() ? "VALUE" : p.value_name;
    app.add_custom(p.name, value_name, p.help, [&f, p](const std::string& text) {
      if (p.type == ProgramFlag::Type::kNumber) cli::parse_number(p.name, text, p.min, p.max);
      if (p.type == ProgramFlag::Type::kInteger) {
        const auto bound = [](double v, int64_t inf) { return std::isfinite(v) ? static_cast<int64_t>(v) : inf; };
        cli::parse_int(p.name, text, bound(p.min, std::numeric_limits<int64_t>::min()),
                       bound(p.max, std::numeric_limits<int64_t>::max()));
      }
      f.program[p.name] = text;
    });
  }
  app.add_config_options();
}

}  // namespace

TrainFlags parse_train_flags(const std::vector<std::string>& args, const std::string& usage,
                             const std::vector<ProgramFlag>& program_flags, const char* caller_file, int caller_line) {
  TrainFlags f;
  cli::App app(program_name(args.empty() ? "train" : args[0]), usage);
  add_train_flags(app, f, program_flags);
  if (!app.parse(args, /*print=*/false, caller_file, caller_line)) {
    f.help = app.given("--help");
    f.version = !f.help;
  }
  return f;
}

std::string train_flags_help(const std::string& program, const std::string& usage,
                             const std::vector<ProgramFlag>& program_flags) {
  TrainFlags f;
  cli::App app(program, usage);
  add_train_flags(app, f, program_flags);
  return app.help();
}

std::optional<TrainStart> start_training(Session& s, const Run& run, const std::string& usage,
                                         const std::vector<ProgramFlag>& program_flags, const char* caller_file,
                                         int caller_line) {
  TrainStart start{parse_train_flags(run.args, usage, program_flags, caller_file, caller_line), run.options,
                   run.config_text(), {}};
  if (start.flags.help || start.flags.version) {
    const std::string program = program_name(run.args.empty() ? "train" : run.args[0]);
    if (s.rank() == 0) {
      std::fputs(start.flags.help ? train_flags_help(program, usage, program_flags).c_str()
                                  : (cli::version_line(program) + "\n").c_str(),
                 stdout);
    }
    return std::nullopt;
  }
  // Intra-op threads: this host's cores shared by its ranks.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  at::set_num_threads(std::max(1, static_cast<int>(cores) / std::max(1, s.local_world_size())));
  start.plan = plan_batches(start.run.train, s.world_size());
  if (start.flags.memory_trial && s.rank() == 0) {
    std::printf("zeroshard-memory-trial: plan world_size=%d per_rank_batch=%lld micro_batches=%d micro_batch_size=%lld\n",
                s.world_size(), static_cast<long long>(start.plan.micro_batch_size * start.plan.micro_batches),
                start.plan.micro_batches, static_cast<long long>(start.plan.micro_batch_size));
    std::fflush(stdout);
  }
  return start;
}

}  // namespace zeroshard
