// SPDX-License-Identifier: Apache-2.0
// The trial protocol's pure parts: parsing the program's protocol lines, classifying how a trial
// ended, inserting arguments, and the arithmetic of the next size to try (trial.h).

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/launcher/trial.h"

namespace zeroshard::launch {
namespace {

constexpr const char* kSupportHint =
    "a program used with --find-batch-size or --auto-micro-batches must support --memory-trial (build the "
    "model, run 2 steps, print the 'zeroshard-memory-trial:' plan and fits lines, exit 3 on out of memory; "
    "see docs/tools.md)";

bool parse_count(const std::string& text, int64_t* out) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  errno = 0;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  if (errno != 0) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

// The key=value fields of the first line holding "<prefix> <kind>"; nullopt when there is none.
// Every name in `keys` must be there exactly once with a whole number >= 0.
std::optional<std::map<std::string, int64_t>> parse_line(const std::string& output, const std::string& kind,
                                                         const std::vector<std::string>& keys) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t at = line.find(kTrialPrefix);
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at + std::strlen(kTrialPrefix)));
    std::string word;
    if (!(words >> word) || word != kind) continue;
    std::map<std::string, int64_t> fields;
    while (words >> word) {
      const size_t eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) continue;  // a newer program's extra key
      int64_t v = 0;
      ZS_REQUIRE(eq != std::string::npos && parse_count(word.substr(eq + 1), &v), Error, "malformed trial line '",
                 line, "': '", word, "' is not ", key, "=<whole number>; ", kSupportHint);
      ZS_REQUIRE(fields.emplace(key, v).second, Error, "malformed trial line '", line, "': ", key, " is given twice");
    }
    for (const std::string& key : keys) {
      ZS_REQUIRE(fields.count(key) != 0, Error, "malformed trial line '", line, "': no ", key, "=; ", kSupportHint);
    }
    return fields;
  }
  return std::nullopt;
}

void require_positive(const std::map<std::string, int64_t>& fields, const std::vector<std::string>& keys,
                      const std::string& kind) {
  for (const std::string& key : keys) {
    ZS_REQUIRE(fields.at(key) >= 1, Error, "malformed trial ", kind, " line: ", key, "=", fields.at(key),
               " must be at least 1");
  }
}

std::string status_text(const TrialProcess& p) {
  if (p.exited) return detail::concat("exit status ", p.status);
  const char* name = ::strsignal(p.signal);
  return detail::concat("signal ", p.signal, " (", name != nullptr ? name : "unknown", ")",
                        p.signal == 9 ? "; SIGKILL is also how the kernel's OOM killer ends a process that runs "
                                        "the node out of host memory"
                                      : "");
}

}  // namespace

std::optional<TrialPlanLine> parse_trial_plan(const std::string& output) {
  const std::vector<std::string> keys = {"world_size", "per_rank_batch", "micro_batches", "micro_batch_size"};
  const auto fields = parse_line(output, "plan", keys);
  if (!fields) return std::nullopt;
  require_positive(*fields, keys, "plan");
  TrialPlanLine p;
  p.world_size = fields->at("world_size");
  p.per_rank_batch = fields->at("per_rank_batch");
  p.micro_batches = fields->at("micro_batches");
  p.micro_batch_size = fields->at("micro_batch_size");
  ZS_REQUIRE(p.micro_batches * p.micro_batch_size == p.per_rank_batch, Error,
             "malformed trial plan line: per_rank_batch=", p.per_rank_batch, " is not micro_batches=", p.micro_batches,
             " x micro_batch_size=", p.micro_batch_size);
  return p;
}

std::optional<TrialFitsLine> parse_trial_fits(const std::string& output) {
  const auto fields = parse_line(output, "fits", {"micro_batch_size", "peak_bytes", "limit_bytes"});
  if (!fields) return std::nullopt;
  require_positive(*fields, {"micro_batch_size"}, "fits");
  TrialFitsLine f;
  f.micro_batch_size = fields->at("micro_batch_size");
  f.peak_bytes = fields->at("peak_bytes");
  f.limit_bytes = fields->at("limit_bytes");
  return f;
}

TrialResult classify_trial(const TrialProcess& p, const std::string& command) {
  TrialResult r;
  const bool ok = p.exited && p.status == 0;
  const bool oom = p.exited && p.status == kTrialOutOfMemoryStatus;
  if (!ok && !oom) {
    std::string hint;
    if (p.exited && p.output.find(kTrialPrefix) == std::string::npos) {
      hint = detail::concat("; it printed no '", kTrialPrefix, "' line, so it stopped before its first step (a "
                            "config error?) or does not support --memory-trial: ", kSupportHint);
    }
    ZS_THROW(Error, "the trial '", command, "' failed with ", status_text(p), " (see the trial output above)", hint);
  }
  try {
    r.plan = parse_trial_plan(p.output);
    if (ok) {
      const std::optional<TrialFitsLine> fits = parse_trial_fits(p.output);
      ZS_REQUIRE(fits.has_value(), Error, "exited 0 without a '", kTrialPrefix, " fits ...' line; ", kSupportHint);
      r.fits = true;
      r.fits_line = *fits;
      ZS_REQUIRE(!r.plan || r.plan->micro_batch_size == fits->micro_batch_size, Error, "its plan line says micro_batch_size=",
                 r.plan ? r.plan->micro_batch_size : 0, " but its fits line says micro_batch_size=",
                 fits->micro_batch_size);
    }
  } catch (const Error& e) {
    ZS_THROW(Error, "the trial '", command, "': ", e.message());
  }
  return r;
}

std::vector<std::string> insert_program_args(const std::vector<std::string>& argv, size_t program_index,
                                             const std::vector<std::string>& extra) {
  ZS_CHECK(program_index < argv.size(), "program_index ", program_index, " is past the command (", argv.size(),
           " words)");
  auto at = std::find(argv.begin() + static_cast<std::ptrdiff_t>(program_index) + 1, argv.end(), std::string("--"));
  std::vector<std::string> out(argv.begin(), at);
  out.insert(out.end(), extra.begin(), extra.end());
  out.insert(out.end(), at, argv.end());
  return out;
}

Plan with_program_args(const Plan& plan, const std::vector<std::string>& extra) {
  Plan p = plan;
  p.argv = insert_program_args(plan.argv, plan.program_index, extra);
  return p;
}

std::vector<std::string> configured_trial_args() { return {kTrialFlag}; }

std::vector<std::string> batch_trial_args(int64_t micro_batch_size, int world_size) {
  return {kTrialFlag, "--set", detail::concat("train.batch_size=", micro_batch_size * world_size), "--set",
          "train.micro_batches=1"};
}

std::vector<std::string> micro_batches_trial_args(int64_t micro_batches) {
  std::vector<std::string> a = micro_batches_override(micro_batches);
  a.insert(a.begin(), kTrialFlag);
  return a;
}

std::vector<std::string> micro_batches_override(int64_t micro_batches) {
  return {"--set", detail::concat("train.micro_batches=", micro_batches)};
}

int64_t halve_micro_batch(int64_t size) { return size / 2; }

int64_t next_micro_batch_size(int64_t per_rank_batch, int64_t size) {
  for (int64_t d = std::min(size / 2, per_rank_batch); d >= 1; --d) {
    if (per_rank_batch % d == 0) return d;
  }
  return 0;
}

int64_t refine_micro_batch_size(int64_t per_rank_batch, int64_t fits, int64_t oom) {
  std::vector<int64_t> between;
  for (int64_t d = fits + 1; d < oom && d <= per_rank_batch; ++d) {
    if (per_rank_batch % d == 0) between.push_back(d);
  }
  return between.empty() ? 0 : between[between.size() / 2];
}

int64_t micro_batches_for(int64_t per_rank_batch, int64_t max_size) {
  ZS_CHECK(per_rank_batch >= 1 && max_size >= 1, "micro_batches_for(", per_rank_batch, ", ", max_size, ")");
  for (int64_t m = 1;; ++m) {
    if (per_rank_batch % m == 0 && per_rank_batch / m <= max_size) return m;
  }
}

}  // namespace zeroshard::launch
