// SPDX-License-Identifier: Apache-2.0
#pragma once
// ProgressBar: training progress for a person watching (rank 0): steps, loss, learning rate,
// throughput, ETA and memory.
//
//   zeroshard::ProgressOptions o;
//   o.total_steps = 500, o.items_name = "tok", o.enabled = s.rank() == 0;
//   zeroshard::ProgressBar bar(o);
//   for (...) bar.update({step + 1, loss, lr, tokens_this_step, engine.memory().total_current()});
//   bar.println("val loss 1.92");   // a line above the bar
//   bar.finish();
//
// On a terminal (see auto_tty) one line is redrawn in place with '\r' after every
// update:
//   step 120/500 [####>               ]  24% loss 2.3140 lr 3.00e-04 | 12.3k tok/s | ETA 1m05s | elapsed 21s | mem 45.2 MiB rss 512 MiB
// Otherwise (a log file, CI) the same text without the bar is printed as a plain line at the first
// step, every `log_every` steps and at the last step, never with '\r'. Throughput and ETA use the last `window` updates, so a slow
// first step (warm-up) fades out; with ProgressUpdate::seconds they count only the steps' own time.
// The rss figure is this process's resident set
// (/proc/self/statm; left out where unavailable).
// Thread-safety: not thread-safe; one thread updates a bar. Disabled bars print nothing.

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <string>

namespace zeroshard {

struct ProgressOptions {
  int64_t total_steps = 0;          // 0: unknown (no percentage, no ETA)
  int log_every = 10;               // not a TTY: print every log_every steps, >= 1
  std::string items_name = "items"; // throughput unit, e.g. "tok" (tok/s) or "samples"
  bool enabled = true;              // false: print nothing (e.g. ranks other than 0)
  FILE* out = stdout;
  int tty = -1;                     // -1: auto_tty(out); 0 or 1 forces the mode
  int bar_width = 20;               // characters of the bar (TTY)
  int window = 20;                  // updates averaged for throughput and ETA, >= 1
  std::function<double()> clock;    // seconds, monotonic; default steady_clock
};

struct ProgressUpdate {
  int64_t step = 0;            // steps completed so far (1 after the first)
  double loss = 0;
  double lr = -1;              // < 0: not shown
  int64_t items = 0;           // items processed by this step, over all ranks
  int64_t memory_bytes = -1;   // e.g. tracked model memory; < 0: not shown
  double seconds = -1;         // this step's duration as the caller timed it; < 0: the time since
                               // the previous update (then pauses, e.g. evaluations, count too)
};

class ProgressBar {
 public:
  // Throws UsageError for log_every < 1, window < 1 or a negative total_steps.
  explicit ProgressBar(ProgressOptions options);
  ~ProgressBar();  // finish()
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(const ProgressUpdate& u);
  // Prints `line` on its own line (above the bar on a TTY; the bar is redrawn below it).
  void println(const std::string& line);
  // Ends the bar's line on a TTY. Idempotent.
  void finish();

  bool is_tty() const { return tty_; }
  // Items per second over the recent window; 0 before two time points exist.
  double items_per_second() const;
  // Seconds since construction.
  double elapsed_s() const;
  // Items counted by all updates so far.
  int64_t total_items() const { return total_items_; }

  // The text of one update (what a TTY line or a log line shows), for tests and for callers that
  // print elsewhere.
  std::string format(const ProgressUpdate& u) const;

  // "1m05s", "2h03m", "42s"
  static std::string format_duration(double seconds);
  // "12.3k", "4.56M", "999"
  static std::string format_count(double value);
  // "45.2 MiB"
  static std::string format_bytes(int64_t bytes);
  // The process's resident set size in bytes, or -1 where /proc/self/statm is unavailable.
  static int64_t resident_bytes();
  // Whether `out` is a terminal a bar can be redrawn on: isatty, and not a rank of Open MPI's
  // mpirun (OMPI_COMM_WORLD_SIZE set), which gives ranks a pseudo-terminal even when mpirun's own
  // output goes to a file or pipe.
  static bool auto_tty(FILE* out);

 private:
  void write(const std::string& text);

  ProgressOptions options_;
  bool tty_;
  double start_;
  double last_update_ = 0;  // clock() at the previous update
  double busy_ = 0;         // seconds of steps so far (the sum of their durations)
  struct Point {
    double busy;    // busy_ after this update
    int64_t items;  // total items so far
    int64_t step;
  };
  std::deque<Point> window_;  // after each update, the newest last; the first is the start
  int64_t total_items_ = 0;
  int64_t last_step_ = 0;
  std::string last_line_;   // the bar currently on screen (TTY), empty when none
  bool open_line_ = false;  // the TTY line holds a bar without a newline
};

}  // namespace zeroshard
