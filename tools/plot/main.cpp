// SPDX-License-Identifier: Apache-2.0
// zeroshard-plot: PNG charts of a training run's metrics (zeroshard/train/metrics.h).
//
//   zeroshard-plot run.jsonl [--out DIR] [--prefix NAME] [--size WIDTHxHEIGHT]
//
// Writes DIR/NAME_loss.png (training loss with the evaluations), and NAME_lr.png,
// NAME_throughput.png, NAME_memory.png, NAME_comm.png for what the run logged (default DIR: the
// metrics file's folder; NAME: its name without the extension). Prints each file written with the
// series drawn in it, and a note on stderr for lines of a kind it does not know (skipped). Errors:
// one line naming FILE:LINE, exit 1 (2 for usage).

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "plot.h"
#include "zeroshard/base/error.h"

namespace zp = zeroshard::plot;

namespace {

const char* kUsage =
    "usage: zeroshard-plot METRICS.jsonl [--out DIR] [--prefix NAME] [--size WIDTHxHEIGHT]\n"
    "Writes NAME_loss.png (training loss and evaluations; and _lr, _throughput, _memory, _comm when\n"
    "logged) into DIR (default: the file's folder; NAME: its name without the extension).\n";

struct Args {
  std::string metrics, out, prefix;
  int width = 960, height = 540;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      ZS_REQUIRE(i + 1 < argc, zeroshard::UsageError, arg, " needs a value\n", kUsage);
      return argv[++i];
    };
    if (arg == "--out") {
      a.out = value();
    } else if (arg == "--prefix") {
      a.prefix = value();
    } else if (arg == "--size") {
      const std::string v = value();
      char* end = nullptr;
      const long w = std::strtol(v.c_str(), &end, 10);
      const long h = (end != nullptr && *end == 'x') ? std::strtol(end + 1, &end, 10) : 0;
      ZS_REQUIRE(end != nullptr && *end == '\0' && w >= 200 && h >= 150 && w <= 8192 && h <= 8192,
                 zeroshard::UsageError, "--size '", v, "': expected WIDTHxHEIGHT between 200x150 and 8192x8192");
      a.width = static_cast<int>(w);
      a.height = static_cast<int>(h);
    } else if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (!arg.empty() && arg[0] == '-') {
      ZS_THROW(zeroshard::UsageError, "unknown option '", arg, "'\n", kUsage);
    } else {
      ZS_REQUIRE(a.metrics.empty(), zeroshard::UsageError, "one metrics file at a time; got '", a.metrics, "' and '",
                 arg, "'");
      a.metrics = arg;
    }
  }
  ZS_REQUIRE(!a.metrics.empty(), zeroshard::UsageError, "no metrics file given\n", kUsage);
  const size_t slash = a.metrics.rfind('/');
  if (a.out.empty()) a.out = slash == std::string::npos ? "." : a.metrics.substr(0, slash);
  if (a.prefix.empty()) {
    std::string base = slash == std::string::npos ? a.metrics : a.metrics.substr(slash + 1);
    const size_t dot = base.rfind('.');
    a.prefix = dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const zp::MetricsLog log = zp::read_metrics(a.metrics);
    for (const std::string& note : log.notes) std::fprintf(stderr, "zeroshard-plot: note: %s\n", note.c_str());
    if (log.skipped_lines > static_cast<int64_t>(log.notes.size())) {
      std::fprintf(stderr, "zeroshard-plot: note: %lld line(s) of unknown kinds skipped in all\n",
                   static_cast<long long>(log.skipped_lines));
    }
    const auto files = zp::plot_metrics(log, a.out, a.prefix, a.width, a.height);
    std::printf("%s: %zu steps (%g to %g), %zu evaluation series%s\n", a.metrics.c_str(), log.steps(),
                log.step.front(), log.step.back(), log.evals.size(),
                log.has_summary ? ", with summary" : ", no summary line (run unfinished?)");
    for (const auto& f : files) {
      std::printf("wrote %s\n", f.path.c_str());
      for (const auto& s : f.series) std::printf("  %s\n", s.c_str());
    }
    return 0;
  } catch (const zeroshard::UsageError& e) {
    std::fprintf(stderr, "zeroshard-plot: error: %s\n", e.message().c_str());
    return 2;
  } catch (const zeroshard::Error& e) {
    std::fprintf(stderr, "zeroshard-plot: error: %s\n", e.message().c_str());
    return 1;
  }
}
