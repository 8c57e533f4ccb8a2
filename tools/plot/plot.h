// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard-plot's pieces: a metrics JSON-lines reader, a small line-chart rasteriser (axes, nice
// ticks spaced by their labels' size, grid, legend, a second y axis, a built-in 5x7 font) and a
// PNG writer (libpng). Why our own rasteriser and not gnuplot: no run-time dependency on a
// plotting program, and the test can decode the PNGs and check pixels with the same library that
// wrote them.
// Thread-safety: reentrant functions over values.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace zeroshard::plot {

// ---- metrics file ----

// One evaluation name's results ({"eval":"val_loss","step":40,"value":2.31} lines).
struct EvalSeries {
  std::string name;
  std::vector<double> step, value;  // value NaN where the line had null
};

// One run's metrics: columns over the step lines (NaN where a line lacks a value), the
// evaluation series, and what was skipped.
struct MetricsLog {
  std::string path;
  std::vector<double> step, loss, lr, throughput, comm_bytes;
  std::string throughput_key;                          // "tokens_per_s", "samples_per_s" or ""
  std::vector<std::string> mem_categories;             // in first-seen order ("mem" and "mem_peak")
  std::map<std::string, std::vector<double>> mem;      // category -> bytes after each step
  std::map<std::string, std::vector<double>> mem_peak; // category -> each step's peak bytes
  std::vector<EvalSeries> evals;                       // in first-seen order
  int64_t skipped_lines = 0;                           // lines of a kind this reader does not know
  std::vector<std::string> notes;                      // "FILE:LINE: ..." for the first few of them
  bool has_summary = false;
  size_t steps() const { return step.size(); }
};

// Reads a file written by zeroshard::MetricsWriter (zeroshard/train/metrics.h). Line kinds: a
// summary ("summary": true, the last line), an evaluation ("eval": name, "step", "value"), a step
// ("step", "loss", ...); any other JSON object is a later kind: skipped, counted and noted. Blank
// lines are skipped. Anything else that is not what the format says is an error "FILE:LINE: ..."
// (not a JSON object, a step or evaluation line with a missing or mistyped key, steps not
// increasing, a line after the summary, both tokens_per_s and samples_per_s in one file). A file
// without step lines is an error too.
MetricsLog read_metrics(const std::string& path);
MetricsLog parse_metrics(const std::string& text, const std::string& path);

// ---- charts ----

struct Series {
  std::string name;
  std::vector<double> x, y;  // a non-finite y leaves a gap
  bool right_axis = false;   // scaled on the right-hand axis (Chart::y2_label)
  bool markers = false;      // a square on every point (sparse series such as evaluations)
};

struct Chart {
  std::string title, x_label, y_label, y2_label;
  std::vector<Series> series;
  bool y_from_zero = false;  // include 0 in the y range (sizes, rates)
  bool x_integer = false;    // x ticks at whole numbers only (steps)
  bool stacked = false;      // series as bands stacked from 0 in order (all on the same x; no right axis)
  int width = 960, height = 540;
};

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
};

// Where render() put things, for tests and for callers that annotate: the plot area and the
// pixel box (inclusive) of every tick label it drew.
struct Box {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
  std::string text;
};
struct ChartLayout {
  int left = 0, top = 0, right = 0, bottom = 0;
  std::vector<double> x_ticks, y_ticks, y2_ticks;
  std::vector<Box> x_labels, y_labels, y2_labels;
};

// The series colours, in order (exposed so the test can look for them).
const std::vector<uint32_t>& palette();  // 0xRRGGBB

// Draws the chart. Tick spacing comes from the labels' size, so labels never overlap whatever
// the range or the image size. Throws UsageError for a size below 200x150, a chart with no finite
// point, or one whose labels and legend leave no room to plot.
Image render(const Chart& chart, ChartLayout* layout = nullptr);
// Writes an 8-bit RGB PNG. Throws IoError naming the path.
void write_png(const Image& image, const std::string& path);

// One chart written by plot_metrics: its file, a line per series ("val_loss: 3 points"), and
// where render() put its labels.
struct PlotFile {
  std::string path;
  std::vector<std::string> series;
  ChartLayout layout;
};

// The charts of one run, written as OUT_DIR/PREFIX_<name>.png: loss (training loss with the
// evaluation series: losses on the loss axis, others such as accuracy on a right-hand axis),
// learning rate, throughput, memory by category (each step's peak when the file has "mem_peak",
// else the values after each step; categories that stay at zero are left out) and communication
// bytes, each when logged.
std::vector<PlotFile> plot_metrics(const MetricsLog& log, const std::string& out_dir, const std::string& prefix,
                                   int width, int height);

// Internal, for the renderer and its test: is pixel (col, row) of character c's 5x7 glyph inked?
bool glyph_pixel(char c, int col, int row);
// Rows a glyph is drawn below the others (letters with descenders): 0 or 2.
int glyph_drop(char c);
// "Nice" tick values (1, 2, 5 x 10^k steps) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target);
// The most nice ticks (at most `max_target`-ish) over [lo, hi] whose labels, each `extent(label)`
// pixels long along an axis of `pixels`, stay at least `gap` pixels apart. `integer`: whole
// steps only. May return ticks whose labels still collide when even two do not fit (render
// then leaves labels out rather than overlap them).
std::vector<double> fitting_ticks(double lo, double hi, int pixels, int max_target, bool integer, int gap,
                                  const std::function<int(const std::string&)>& extent);
// A tick label: short, enough digits to tell neighbouring ticks `step` apart.
std::string tick_label(double value, double step);

}  // namespace zeroshard::plot
