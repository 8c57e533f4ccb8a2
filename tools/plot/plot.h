#pragma once
// zeroshard-plot's pieces: a metrics JSON-lines reader, a small line-chart rasteriser (axes, nice
// ticks, grid, legend, a built-in 5x7 font) and a PNG writer (libpng). Why our own rasteriser and
// not gnuplot: no run-time dependency on a plotting program, and the test can decode the PNGs and
// check pixels with the same library that wrote them.
// Thread-safety: reentrant functions over values.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zeroshard::plot {

// ---- metrics file ----

// One run's metrics as columns over the step lines (NaN where a line lacks a value).
struct MetricsLog {
  std::string path;
  std::vector<double> step, loss, lr, throughput, comm_bytes;
  std::string throughput_key;                        // "tokens_per_s", "samples_per_s" or ""
  std::vector<std::string> mem_categories;           // in first-seen order
  std::map<std::string, std::vector<double>> mem;    // category -> bytes per step
  bool has_summary = false;
  size_t steps() const { return step.size(); }
};

// Reads a file written by zeroshard::MetricsWriter. Blank lines are skipped; anything else that is
// not what the format says is an error "FILE:LINE: ..." (not a JSON object, a missing or
// non-number "step" or "loss", a key of the wrong type, steps not increasing, a line after the
// summary, both tokens_per_s and samples_per_s in one file). A file without step lines is an
// error too.
MetricsLog read_metrics(const std::string& path);
MetricsLog parse_metrics(const std::string& text, const std::string& path);

// ---- charts ----

struct Series {
  std::string name;
  std::vector<double> x, y;  // a non-finite y leaves a gap
};

struct Chart {
  std::string title, x_label, y_label;
  std::vector<Series> series;
  bool y_from_zero = false;  // include 0 in the y range (sizes, rates)
  int width = 960, height = 540;
};

struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel
};

// The series colours, in order (exposed so the test can look for them).
const std::vector<uint32_t>& palette();  // 0xRRGGBB

// Draws the chart. Throws UsageError for a size below 200x150 or a chart with no finite point.
Image render(const Chart& chart);
// Writes an 8-bit RGB PNG. Throws IoError naming the path.
void write_png(const Image& image, const std::string& path);

// The charts of one run: loss, learning rate (if logged), throughput (if logged), memory by
// category (if logged) and communication bytes (if logged), written as OUT_DIR/PREFIX_<name>.png.
// Returns the paths written.
std::vector<std::string> plot_metrics(const MetricsLog& log, const std::string& out_dir, const std::string& prefix,
                                      int width, int height);

// Internal, for the renderer and its test: is pixel (col, row) of character c's 5x7 glyph inked?
bool glyph_pixel(char c, int col, int row);
// Rows a glyph is drawn below the others (letters with descenders): 0 or 2.
int glyph_drop(char c);
// "Nice" tick values (1, 2, 5 x 10^k steps) covering [lo, hi], about `target` of them.
std::vector<double> nice_ticks(double lo, double hi, int target);
// A tick label: short, enough digits to tell neighbouring ticks `step` apart.
std::string tick_label(double value, double step);

}  // namespace zeroshard::plot
