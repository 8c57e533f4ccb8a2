// SPDX-License-Identifier: Apache-2.0
// The line-chart rasteriser: white canvas, title, axes with nice ticks and labels (as many as their
// size allows without overlapping), light grid, an optional right-hand axis, one 2-pixel line per
// series (with point markers when asked) or stacked bands, a legend under the title when there is
// more than one series.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "plot.h"
#include "zeroshard/base/error.h"

namespace zeroshard::plot {
namespace {

constexpr uint32_t kBackground = 0xffffff, kInk = 0x202020, kGrid = 0xe4e4e4, kAxis = 0x000000;

class Canvas {
 public:
  Canvas(int w, int h) {
    img_.width = w;
    img_.height = h;
    img_.rgb.assign(static_cast<size_t>(w) * h * 3, 0xff);
  }
  Image take() { return std::move(img_); }

  void set(int x, int y, uint32_t c) {
    if (x < clip_x0_ || y < clip_y0_ || x > clip_x1_ || y > clip_y1_) return;
    if (x < 0 || y < 0 || x >= img_.width || y >= img_.height) return;
    uint8_t* p = &img_.rgb[(static_cast<size_t>(y) * img_.width + x) * 3];
    p[0] = static_cast<uint8_t>(c >> 16);
    p[1] = static_cast<uint8_t>(c >> 8);
    p[2] = static_cast<uint8_t>(c);
  }
  void clip(int x0, int y0, int x1, int y1) { clip_x0_ = x0, clip_y0_ = y0, clip_x1_ = x1, clip_y1_ = y1; }
  void unclip() { clip(0, 0, img_.width - 1, img_.height - 1); }

  void rect(int x0, int y0, int x1, int y1, uint32_t c) {
    for (int y = y0; y <= y1; ++y) {
      for (int x = x0; x <= x1; ++x) set(x, y, c);
    }
  }
  void hline(int x0, int x1, int y, uint32_t c) { rect(std::min(x0, x1), y, std::max(x0, x1), y, c); }
  void vline(int x, int y0, int y1, uint32_t c) { rect(x, std::min(y0, y1), x, std::max(y0, y1), c); }

  // Bresenham, `thick` pixels wide (a square pen).
  void line(int x0, int y0, int x1, int y1, uint32_t c, int thick) {
    const int dx = std::abs(x1 - x0), sx = x0 < x1 ? 1 : -1;
    const int dy = -std::abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy;
    while (true) {
      rect(x0, y0, x0 + thick - 1, y0 + thick - 1, c);
      if (x0 == x1 && y0 == y1) break;
      const int e2 = 2 * err;
      if (e2 >= dy) err += dy, x0 += sx;
      if (e2 <= dx) err += dx, y0 += sy;
    }
  }

  static int text_width(const std::string& s, int scale) { return static_cast<int>(s.size()) * 6 * scale - scale; }
  static int text_height(int scale) { return 7 * scale; }  // without descenders (2 rows more)

  // Left-to-right text with its top-left corner at (x, y).
  void text(int x, int y, const std::string& s, int scale, uint32_t c) {
    for (size_t i = 0; i < s.size(); ++i) {
      const int gx = x + static_cast<int>(i) * 6 * scale, gy = y + glyph_drop(s[i]) * scale;
      for (int row = 0; row < 7; ++row) {
        for (int col = 0; col < 5; ++col) {
          if (glyph_pixel(s[i], col, row)) rect(gx + col * scale, gy + row * scale, gx + (col + 1) * scale - 1, gy + (row + 1) * scale - 1, c);
        }
      }
    }
  }
  // Bottom-to-top text (rotated 90 degrees counter-clockwise), its first character at the bottom;
  // (x, y) is the top-left corner of the rotated block.
  void text_up(int x, int y, const std::string& s, int scale, uint32_t c) {
    const int len = text_width(s, scale);
    for (size_t i = 0; i < s.size(); ++i) {
      for (int row = 0; row < 7; ++row) {
        for (int col = 0; col < 5; ++col) {
          if (!glyph_pixel(s[i], col, row)) continue;
          // Glyph (col, row) -> rotated: x grows with row, y shrinks with position along the text.
          const int along = static_cast<int>(i) * 6 * scale + col * scale;
          const int px = x + (row + glyph_drop(s[i])) * scale, py = y + len - along - scale;
          rect(px, py, px + scale - 1, py + scale - 1, c);
        }
      }
    }
  }

 private:
  Image img_;
  int clip_x0_ = 0, clip_y0_ = 0, clip_x1_ = std::numeric_limits<int>::max(), clip_y1_ = std::numeric_limits<int>::max();
};

struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (!std::isfinite(v)) return;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  bool valid() const { return lo <= hi; }
};

std::string legend_name(const Series& s) { return s.right_axis ? s.name + " (right axis)" : s.name; }

// A stacked chart's series with y replaced by the running sum (a missing value counts as 0).
std::vector<Series> stack(const Chart& chart) {
  std::vector<Series> out = chart.series;
  for (size_t k = 0; k < out.size(); ++k) {
    ZS_REQUIRE(out[k].x == out[0].x && out[k].y.size() == out[k].x.size() && !out[k].right_axis, UsageError,
               "stacked chart '", chart.title, "': series '", out[k].name, "' is not on the first series' steps");
    for (size_t i = 0; i < out[k].y.size(); ++i) {
      if (!std::isfinite(out[k].y[i])) out[k].y[i] = 0;
      if (k > 0) out[k].y[i] += out[k - 1].y[i];
    }
  }
  return out;
}

}  // namespace

const std::vector<uint32_t>& palette() {
  static const std::vector<uint32_t> colours = {0x1f77b4, 0xd62728, 0x2ca02c, 0xff7f0e, 0x9467bd,
                                               0x8c564b, 0xe377c2, 0x17becf, 0xbcbd22, 0x7f7f7f};
  return colours;
}

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const double raw = (hi - lo) / std::max(1, target);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  const double step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
  const double first = std::floor(lo / step + 1e-9), last = std::ceil(hi / step - 1e-9);
  std::vector<double> ticks;
  for (double k = first; k <= last + 0.5; k += 1) {
    double v = k * step;
    if (std::abs(v) < step * 1e-9) v = 0;
    ticks.push_back(v);
  }
  return ticks;
}

std::string tick_label(double value, double step) {
  if (value == 0) return "0";
  step = std::abs(step) > 0 ? std::abs(step) : std::abs(value);
  const double av = std::abs(value), big = std::max(av, step);
  char buf[48];
  if (big < 1e6 && big >= 1e-4) {
    // Fixed notation with as many decimals as the step has (0.25 -> 2, 50 -> 0).
    int decimals = 0;
    while (decimals < 8) {
      const double scaled = step * std::pow(10.0, decimals);
      if (std::abs(scaled - std::round(scaled)) < 1e-6 * std::max(1.0, scaled)) break;
      ++decimals;
    }
    std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
    return buf;
  }
  // Scientific: enough mantissa digits to tell ticks `step` apart; 1.5e+06 -> 1.5e6, 2e-05 -> 2e-5.
  const double step_exp = std::floor(std::log10(step));
  const double mantissa = step / std::pow(10.0, step_exp);
  int digits = static_cast<int>(std::floor(std::log10(av)) - step_exp) + 1;
  if (std::abs(mantissa - std::round(mantissa)) > 1e-6) ++digits;
  std::snprintf(buf, sizeof(buf), "%.*e", std::clamp(digits - 1, 0, 8), value);
  std::string s = buf;
  const size_t e = s.find('e');
  std::string mant = s.substr(0, e), exp = s.substr(e + 1);
  if (mant.find('.') != std::string::npos) {  // 1.50 -> 1.5, 2.0 -> 2
    mant.erase(mant.find_last_not_of('0') + 1);
    if (mant.back() == '.') mant.pop_back();
  }
  const bool neg = exp[0] == '-';
  exp = exp.substr(1);
  exp.erase(0, std::min(exp.find_first_not_of('0'), exp.size() - 1));
  return mant + "e" + (neg ? "-" : "") + exp;
}

std::vector<double> fitting_ticks(double lo, double hi, int pixels, int max_target, bool integer, int gap,
                                  const std::function<int(const std::string&)>& extent) {
  if (integer && hi - lo < 1) lo -= 1, hi += 1;  // one step: 0, 1, 2 rather than 0.9, 1, 1.1
  std::vector<double> best;
  for (int target = std::max(1, max_target); target >= 1; --target) {
    std::vector<double> t = nice_ticks(lo, hi, target);
    const double step = t.size() > 1 ? t[1] - t[0] : 1;
    if (integer && step < 1 - 1e-9) continue;
    best = t;
    if (t.size() < 2) break;
    int longest = 0;
    for (double v : t) longest = std::max(longest, extent(tick_label(v, step)));
    if (static_cast<double>(pixels) / static_cast<double>(t.size() - 1) >= longest + gap) break;
  }
  return best.empty() ? nice_ticks(lo, hi, 1) : best;
}

namespace {

// Tick labels along one axis, centred on their ticks, left out where one would come within `gap`
// pixels of the previous one (only when even the fewest nice ticks are too dense).
struct AxisLabels {
  std::vector<Box> boxes;
  void place(Box b, bool horizontal, int gap) {
    if (!boxes.empty()) {
      const Box& p = boxes.back();
      const bool clash = horizontal ? b.x0 < p.x1 + gap && p.x0 < b.x1 + gap : b.y0 < p.y1 + gap && p.y0 < b.y1 + gap;
      if (clash) return;
    }
    boxes.push_back(std::move(b));
  }
};

// Where everything goes: text size, plot area, ticks, legend entries.
struct Frame {
  int scale = 1, th = 7, cell = 6;
  int left = 0, top = 0, right = 0, bottom = 0;
  std::vector<double> xt, yt, y2t;
  bool has_y2 = false;
  int y2label_w = 0;
  std::vector<std::pair<int, int>> legend;  // top-left corner of each series' entry
  int width_of(const std::string& s) const { return Canvas::text_width(s, scale); }
  int px(double x) const {
    return left + static_cast<int>(std::lround((x - xt.front()) / (xt.back() - xt.front()) * (right - left)));
  }
  int py(const std::vector<double>& t, double y) const {
    return bottom - static_cast<int>(std::lround((y - t.front()) / (t.back() - t.front()) * (bottom - top)));
  }
  static double step(const std::vector<double>& t) { return t.size() > 1 ? t[1] - t[0] : 1; }
};

Frame plan(const Chart& chart, const std::vector<Series>& series) {
  Range xr, yr, y2r;
  for (const Series& s : series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xr.add(s.x[i]);
      (s.right_axis ? y2r : yr).add(s.y[i]);
    }
  }
  ZS_REQUIRE(xr.valid(), UsageError, "chart '", chart.title, "' has no finite point to draw");
  if (chart.y_from_zero) yr.add(0);
  if (!yr.valid()) yr = y2r;  // only right-axis series: the left axis mirrors the right one
  Frame f;
  f.has_y2 = y2r.valid();
  f.scale = chart.width >= 640 ? 2 : 1;
  f.th = Canvas::text_height(f.scale);
  f.cell = 6 * f.scale;
  const int th = f.th;
  // The legend (more than one series): rows of [swatch name] under the title, wrapped at the
  // right margin, so it takes height rather than the width the x axis needs.
  const int legend_x0 = 12 + th + 10, title_bottom = 14 + 2 * th;
  int legend_rows = 0;
  if (series.size() > 1) {
    int x = legend_x0;
    legend_rows = 1;
    for (const Series& s : series) {
      const int w = 14 * f.scale + f.width_of(legend_name(s));
      if (x > legend_x0 && x + w > chart.width - 16) x = legend_x0, ++legend_rows;
      f.legend.emplace_back(x, title_bottom + 10 + (legend_rows - 1) * (th + 8));
      x += w + 3 * f.cell;
    }
  }
  f.top = title_bottom + 14 + legend_rows * (th + 8) + (legend_rows > 0 ? 4 : 0);
  f.bottom = chart.height - (10 + th + 10 + th + 12);
  ZS_REQUIRE(f.bottom - f.top >= 40, UsageError, "chart '", chart.title, "' does not fit in ", chart.width, "x",
             chart.height, " (with its legend); make it larger");
  // y ticks first (they depend on the height only), then the margins their labels need, then x.
  auto height_of = [th](const std::string&) { return th; };
  auto width_of = [&f](const std::string& s) { return f.width_of(s); };
  f.yt = fitting_ticks(yr.lo, yr.hi, f.bottom - f.top, 6, false, th, height_of);
  if (f.has_y2) f.y2t = fitting_ticks(y2r.lo, y2r.hi, f.bottom - f.top, 6, false, th, height_of);
  int ylabel_w = 0;
  for (double v : f.yt) ylabel_w = std::max(ylabel_w, f.width_of(tick_label(v, Frame::step(f.yt))));
  for (double v : f.y2t) f.y2label_w = std::max(f.y2label_w, f.width_of(tick_label(v, Frame::step(f.y2t))));
  const int y2_block = f.has_y2 ? 8 + f.y2label_w + 10 + th + 4 : 0;
  // The x labels are centred on their ticks: the first and last need half their width beside the
  // plot area. Ticks, then margins; again if the margins moved.
  f.left = 12 + th + 10 + ylabel_w + 8;
  f.right = chart.width - 16 - y2_block;
  for (int pass = 0; pass < 3; ++pass) {
    ZS_REQUIRE(f.right - f.left >= 40, UsageError, "chart '", chart.title, "' does not fit in ", chart.width, "x",
               chart.height, " (its tick labels are too wide); make it wider");
    f.xt = fitting_ticks(xr.lo, xr.hi, f.right - f.left, 10, chart.x_integer, 2 * f.cell, width_of);
    const int first_half = f.width_of(tick_label(f.xt.front(), Frame::step(f.xt))) / 2 + 4;
    const int last_half = f.width_of(tick_label(f.xt.back(), Frame::step(f.xt))) / 2 + 4;
    if (f.left >= first_half && chart.width - f.right >= last_half) break;
    f.left = std::max(f.left, first_half);
    f.right = std::min(f.right, chart.width - last_half);
  }
  return f;
}

// Title, axis names, grid, axes, ticks and their labels; fills `layout`'s label boxes.
void draw_frame(Canvas& c, const Chart& chart, const Frame& f, ChartLayout& layout) {
  const int scale = f.scale, th = f.th;
  // The title at twice the labels' size, or at their size when that does not fit.
  const int title_scale = Canvas::text_width(chart.title, 2 * scale) <= chart.width - 24 ? 2 * scale : scale;
  c.text((chart.width - Canvas::text_width(chart.title, title_scale)) / 2, 14 + (2 * scale - title_scale) * 7 / 2,
         chart.title, title_scale, kInk);
  c.text((f.left + f.right - f.width_of(chart.x_label)) / 2, chart.height - 12 - th, chart.x_label, scale, kInk);
  c.text_up(12, (f.top + f.bottom - f.width_of(chart.y_label)) / 2, chart.y_label, scale, kInk);
  if (f.has_y2) {
    c.text_up(f.right + 8 + f.y2label_w + 10, (f.top + f.bottom - f.width_of(chart.y2_label)) / 2, chart.y2_label,
              scale, kInk);
  }
  AxisLabels xl, yl, y2l;
  for (double v : f.xt) {
    const int x = f.px(v);
    c.vline(x, f.top, f.bottom, kGrid);
    c.vline(x, f.bottom, f.bottom + 5, kAxis);
    const std::string label = tick_label(v, Frame::step(f.xt));
    const int x0 = x - f.width_of(label) / 2;
    xl.place({x0, f.bottom + 9, x0 + f.width_of(label) - 1, f.bottom + 9 + th - 1, label}, true, f.cell);
  }
  for (double v : f.yt) {
    const int y = f.py(f.yt, v);
    c.hline(f.left, f.right, y, kGrid);
    c.hline(f.left - 5, f.left, y, kAxis);
    const std::string label = tick_label(v, Frame::step(f.yt));
    yl.place({f.left - 8 - f.width_of(label), y - th / 2, f.left - 9, y - th / 2 + th - 1, label}, false, 2);
  }
  for (double v : f.y2t) {
    const int y = f.py(f.y2t, v);
    c.hline(f.right, f.right + 5, y, kAxis);
    const std::string label = tick_label(v, Frame::step(f.y2t));
    y2l.place({f.right + 8, y - th / 2, f.right + 7 + f.width_of(label), y - th / 2 + th - 1, label}, false, 2);
  }
  for (const AxisLabels* axis : {&xl, &yl, &y2l}) {
    for (const Box& b : axis->boxes) c.text(b.x0, b.y0, b.text, scale, kInk);
  }
  c.vline(f.left, f.top, f.bottom, kAxis);
  c.hline(f.left, f.right, f.bottom, kAxis);
  if (f.has_y2) c.vline(f.right, f.top, f.bottom, kAxis);
  layout = ChartLayout{f.left, f.top, f.right, f.bottom, f.xt, f.yt, f.y2t, xl.boxes, yl.boxes, y2l.boxes};
}

// Stacked series k: the band between series k - 1 (or 0) and series k, column by column.
void draw_band(Canvas& c, const Frame& f, const std::vector<Series>& series, size_t k, uint32_t colour) {
  const Series& s = series[k];
  const size_t n = s.x.size();
  for (size_t i = 0; i + 1 < n || (n == 1 && i == 0); ++i) {
    const size_t j = n == 1 ? i : i + 1;  // a single point: a narrow bar
    const double below = k > 0 ? series[k - 1].y[i] : 0, below_next = k > 0 ? series[k - 1].y[j] : 0;
    const int xa = f.px(s.x[i]), xb = j > i ? f.px(s.x[j]) : xa + 2;
    for (int x = j > i ? xa : xa - 2; x <= xb; ++x) {
      const double t = xb > xa ? static_cast<double>(x - xa) / (xb - xa) : 0;
      const int hi = f.py(f.yt, s.y[i] + t * (s.y[j] - s.y[i])), lo = f.py(f.yt, below + t * (below_next - below));
      if (lo > hi) c.vline(x, hi, lo - 1, colour);
    }
  }
}

// A line through the finite points (gaps at the others), with markers when asked or where a
// point stands alone.
void draw_line(Canvas& c, const Frame& f, const Series& s, uint32_t colour) {
  const std::vector<double>& ticks = s.right_axis ? f.y2t : f.yt;
  bool have_prev = false;
  int prev_x = 0, prev_y = 0;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
      have_prev = false;
      continue;
    }
    const int x = f.px(s.x[i]), y = f.py(ticks, s.y[i]);
    const bool next_finite = i + 1 < s.y.size() && std::isfinite(s.y[i + 1]) && std::isfinite(s.x[i + 1]);
    if (have_prev) c.line(prev_x, prev_y, x, y, colour, 2);
    if (s.markers || (!have_prev && !next_finite)) c.rect(x - 2, y - 2, x + 3, y + 3, colour);
    have_prev = true;
    prev_x = x, prev_y = y;
  }
}

}  // namespace

Image render(const Chart& chart, ChartLayout* layout) {
  ZS_REQUIRE(chart.width >= 200 && chart.height >= 150, UsageError, "chart size ", chart.width, "x", chart.height,
             " is too small; at least 200x150");
  const std::vector<Series> series = chart.stacked ? stack(chart) : chart.series;
  const Frame f = plan(chart, series);
  Canvas c(chart.width, chart.height);
  c.rect(0, 0, chart.width - 1, chart.height - 1, kBackground);
  ChartLayout drawn;
  draw_frame(c, chart, f, drawn);
  c.clip(f.left + 1, f.top, f.right - (f.has_y2 ? 1 : 0), f.bottom - 1);  // series stay in the plot area
  for (size_t k = 0; k < series.size(); ++k) {
    const uint32_t colour = palette()[k % palette().size()];
    if (chart.stacked) {
      draw_band(c, f, series, k, colour);
    } else {
      draw_line(c, f, series[k], colour);
    }
  }
  c.unclip();
  for (size_t k = 0; k < f.legend.size(); ++k) {
    const auto [x, y] = f.legend[k];
    const uint32_t colour = palette()[k % palette().size()];
    c.rect(x, y + f.th / 2 - f.scale, x + 10 * f.scale, y + f.th / 2 + f.scale - 1, colour);
    c.text(x + 14 * f.scale, y, legend_name(series[k]), f.scale, kInk);
  }
  if (layout != nullptr) *layout = std::move(drawn);
  return c.take();
}

}  // namespace zeroshard::plot
