// SPDX-License-Identifier: Apache-2.0
#pragma once
// The progress of zeroshard-data shards for a person watching: on a terminal one line redrawn in
// place (at most 10 times a second),
//   [#########>          ]  45% 1.23 GiB of 2.71 GiB | 412.5 MB/s | 98.1M tokens, 32.8M tok/s | ETA 4s
// elsewhere (a log) the same text without the bar every `log_seconds`. Not thread-safe: the
// writing thread calls it.

#include <cstdio>
#include <functional>
#include <string>

#include "zeroshard/data/corpus_builder.h"

namespace zeroshard::data_tool {

class ProgressLine {
 public:
  // tty: -1 detects isatty(out); clock: seconds, monotonic (default steady_clock).
  ProgressLine(FILE* out, int tty, double log_seconds = 10, std::function<double()> clock = {});
  void update(const data::BuildProgress& p);
  // Ends the terminal line; idempotent.
  void finish();
  double elapsed() const;
  // The text of one update after `seconds`.
  static std::string format(const data::BuildProgress& p, double seconds, bool bar);
  // "12.3k", "4.56M", "999"
  static std::string count(double v);

 private:
  FILE* out_;
  bool tty_;
  double log_seconds_;
  std::function<double()> clock_;
  double start_;
  double last_ = -1;
  bool open_ = false;
};

}  // namespace zeroshard::data_tool
