// SPDX-License-Identifier: Apache-2.0
// The two searches over trial jobs (--find-batch-size, --auto-micro-batches) and what they print.
// Pure: trials run through the RunTrial callback (trial.h), so tests drive them with a fake.

#include <cstdio>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/launcher/trial.h"

namespace zeroshard::launch {
namespace {

std::string peak_text(const TrialRecord& t) {
  std::string s = "peak " + format_mib(t.peak_bytes);
  if (t.limit_bytes > 0) s += " of limit " + format_mib(t.limit_bytes);
  return s;
}

// "a", "a and b", "a, b and c".
std::string join_and(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == v.size() ? " and " : ", ") + std::to_string(v[i]);
  }
  return s;
}

std::string args_text(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "" : " ") + a;
  return s;
}

[[noreturn]] void throw_does_not_fit(int world_size) {
  ZS_THROW(Error, "even a micro-batch of 1 per rank runs out of memory on ", world_size,
           " rank(s): what the job holds besides its batch does not fit (the model state: parameters, "
           "gradients, optimizer state, gathered units; and whatever it keeps in memory, e.g. a dataset). "
           "The last trial's out-of-memory report above shows the memory by phase. "
           "See what each setup needs per rank with zeroshard-estimate, and shrink it: "
           "--set sharding.strategy=FULL_SHARD (shards parameters, gradients and optimizer state over the ranks), "
           "--set offload.optimizer=CPU (optimizer state and fp32 master weights in host memory), "
           "--set activation_checkpointing.enabled=true (keeps only each block's input), or more ranks");
}

// The plan of the first trial (the job as configured), which the searches need.
TrialPlanLine first_plan(const TrialResult& r, int world_size, const char* start_hint) {
  if (!r.plan) {
    ZS_REQUIRE(!r.fits, Error, "the trial of the job as configured fitted but printed no '", kTrialPrefix,
               " plan ...' line, which says its per-rank batch and micro-batch; the program must support "
               "--memory-trial (docs/tools.md)");
    ZS_THROW(Error, "the job as configured ran out of memory before printing its '", kTrialPrefix,
             " plan ...' line (while building the model?), so its micro-batch is unknown. The model state alone "
             "may not fit (see zeroshard-estimate; --set sharding.strategy=FULL_SHARD, --set offload.optimizer=CPU)",
             start_hint);
  }
  ZS_REQUIRE(r.plan->world_size == world_size, Error, "the trial of the job as configured printed world_size=",
             r.plan->world_size, " but the launcher started ", world_size, " rank(s)");
  return *r.plan;
}

// A trial of a size the search asked for must have run that size on the job's ranks.
void check_size(const TrialResult& r, int world_size, int64_t size, const std::vector<std::string>& args) {
  const int64_t ran = r.fits ? r.fits_line.micro_batch_size : r.plan ? r.plan->micro_batch_size : size;
  ZS_REQUIRE(ran == size, Error, "the trial with ", args_text(args), " (micro-batch ", size,
             " per rank) ran micro_batch_size=", ran, "; the program must apply --set options given after its "
             "own arguments (later ones win)");
  ZS_REQUIRE(!r.plan || r.plan->world_size == world_size, Error, "the trial with ", args_text(args),
             " printed world_size=", r.plan ? r.plan->world_size : 0, " but the launcher started ", world_size,
             " rank(s)");
}

TrialRecord record(const TrialResult& r, int64_t size, int64_t micro_batches, bool as_configured) {
  TrialRecord t;
  t.micro_batch_size = size;
  t.fits = r.fits;
  t.as_configured = as_configured;
  t.micro_batches = micro_batches;
  t.peak_bytes = r.fits_line.peak_bytes;
  t.limit_bytes = r.fits_line.limit_bytes;
  return t;
}

}  // namespace

BatchSizeSearch find_batch_size(const RunTrial& run, int world_size, int64_t start) {
  ZS_CHECK(world_size >= 1 && start >= 0, "find_batch_size(world ", world_size, ", start ", start, ")");
  BatchSizeSearch s;
  s.world_size = world_size;
  s.start = start;
  int64_t size = start;
  if (start == 0) {
    const TrialResult r = run(configured_trial_args());
    s.configured = first_plan(r, world_size, "; or give a size to start from: --find-batch-size=START");
    size = s.configured->micro_batch_size;
    s.trials.push_back(record(r, size, s.configured->micro_batches, true));
    if (r.fits) {
      s.found = size;
      return s;
    }
    size = halve_micro_batch(size);
  }
  for (; size >= 1; size = halve_micro_batch(size)) {
    const std::vector<std::string> args = batch_trial_args(size, world_size);
    const TrialResult r = run(args);
    check_size(r, world_size, size, args);
    s.trials.push_back(record(r, size, 1, false));
    if (r.fits) {
      s.found = size;
      return s;
    }
  }
  throw_does_not_fit(world_size);
}

std::string batch_size_report(const BatchSizeSearch& s) {
  std::string out = detail::concat("zeroshard-launch: the largest micro-batch per rank that fits: ", s.found, " (on ",
                                   s.world_size, " rank(s))\ntrials:\n");
  int64_t smallest_oom = 0;
  for (size_t i = 0; i < s.trials.size(); ++i) {
    const TrialRecord& t = s.trials[i];
    out += detail::concat("  ", i + 1, ". ", t.micro_batch_size, " per rank");
    if (t.as_configured) out += detail::concat(" (the job as configured: ", t.micro_batches, " micro-batch(es))");
    out += t.fits ? " -> fits, " + peak_text(t) + "\n" : " -> out of memory\n";
    if (!t.fits) smallest_oom = t.micro_batch_size;
  }
  if (smallest_oom == 0) {
    out += s.start == 0 ? detail::concat("The job as configured fits (micro-batch ", s.found,
                                         "); a larger one may fit too: try --find-batch-size=", 2 * s.found, "\n")
                        : detail::concat("The first size tried, ", s.found, ", fits; a larger START may fit too: try "
                                         "--find-batch-size=", 2 * s.found, "\n");
  } else if (smallest_oom - s.found > 1) {
    out += detail::concat(s.found, " fits and ", smallest_oom, " does not; the sizes between were not tried ("
                          "--find-batch-size=", (s.found + smallest_oom) / 2, " tries one)\n");
  }
  if (!s.configured) {
    out += detail::concat("To use it: for a per-rank batch P (train.batch_size / ", s.world_size,
                          "), set train.micro_batches to the fewest M that divides P with P/M <= ", s.found,
                          ". (Without START the first trial runs the job as configured and this line names the exact "
                          "--set; --auto-micro-batches chooses it and runs the job.)\n");
    return out;
  }
  const TrialPlanLine& c = *s.configured;
  const int64_t m = micro_batches_for(c.per_rank_batch, s.found);
  out += detail::concat("To use it for the configured per-rank batch ", c.per_rank_batch, " (train.batch_size=",
                        c.per_rank_batch * c.world_size, " on ", c.world_size, " rank(s)):\n");
  if (m == c.micro_batches) {
    out += detail::concat("  the configured train.micro_batches=", m, " (", m, " micro-batch(es) of ",
                          c.per_rank_batch / m, ") already fits; nothing to change\n");
  } else {
    out += detail::concat("  --set train.micro_batches=", m, "    (", m, " micro-batch(es) of ", c.per_rank_batch / m,
                          " per rank per step; the global batch stays ", c.per_rank_batch * c.world_size,
                          ")\n  or let zeroshard-launch --auto-micro-batches choose it and run the job\n");
  }
  return out;
}

MicroBatchChoice choose_micro_batches(const RunTrial& run, int world_size) {
  ZS_CHECK(world_size >= 1, "choose_micro_batches(world ", world_size, ")");
  MicroBatchChoice c;
  c.world_size = world_size;
  const TrialResult first = run(configured_trial_args());
  c.configured = first_plan(first, world_size, "");
  const int64_t p = c.configured.per_rank_batch;
  c.trials.push_back(record(first, c.configured.micro_batch_size, c.configured.micro_batches, true));
  if (first.fits) {
    c.micro_batch_size = c.configured.micro_batch_size;
    c.micro_batches = c.configured.micro_batches;
    return c;
  }
  const auto trial = [&](int64_t size) {
    const std::vector<std::string> args = micro_batches_trial_args(p / size);
    const TrialResult r = run(args);
    check_size(r, world_size, size, args);
    c.trials.push_back(record(r, size, p / size, false));
    return r.fits;
  };
  // Halve through the divisors of P until one fits, then bisect the divisors between it and the
  // last size that did not.
  int64_t oom = c.configured.micro_batch_size, fits = 0;
  while (fits == 0) {
    const int64_t size = next_micro_batch_size(p, oom);
    if (size == 0) throw_does_not_fit(world_size);
    if (trial(size)) {
      fits = size;
    } else {
      oom = size;
    }
  }
  for (int64_t size = refine_micro_batch_size(p, fits, oom); size != 0; size = refine_micro_batch_size(p, fits, oom)) {
    if (trial(size)) {
      fits = size;
    } else {
      oom = size;
    }
  }
  c.micro_batch_size = fits;
  c.micro_batches = p / fits;
  return c;
}

std::string micro_batch_summary(const MicroBatchChoice& c) {
  const TrialPlanLine& k = c.configured;
  std::string s = detail::concat("per-rank batch ", k.per_rank_batch, " on ", c.world_size, " rank(s): ");
  const TrialRecord* chosen = nullptr;
  std::vector<int64_t> oom, other_fits;
  for (const TrialRecord& t : c.trials) {
    if (!t.fits) {
      oom.push_back(t.micro_batch_size);
    } else if (t.micro_batch_size == c.micro_batch_size) {
      chosen = &t;
    } else {
      other_fits.push_back(t.micro_batch_size);
    }
  }
  ZS_CHECK(chosen != nullptr, "no trial of the chosen micro-batch ", c.micro_batch_size);
  if (chosen->as_configured) {
    return s + detail::concat("the configured ", k.micro_batches, " micro-batch(es) of ", k.micro_batch_size, " fit (",
                              peak_text(*chosen), ") -> running as configured");
  }
  s += detail::concat(join_and(oom), " ran out of memory; ", c.micro_batch_size,
                      " fits (", peak_text(*chosen));
  if (!other_fits.empty()) s += detail::concat("; ", join_and(other_fits), other_fits.size() == 1 ? " fits" : " fit", " too");
  return s + detail::concat(") -> train.micro_batches=", c.micro_batches, " (", c.micro_batches,
                            " micro-batch(es) of ", c.micro_batch_size, "; the global batch ",
                            k.per_rank_batch * c.world_size, " is unchanged)");
}

std::vector<std::string> micro_batch_run_args(const MicroBatchChoice& c) {
  if (c.micro_batches == c.configured.micro_batches) return {};
  return micro_batches_override(c.micro_batches);
}

}  // namespace zeroshard::launch
