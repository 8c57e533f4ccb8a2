// The line-chart rasteriser: white canvas, title, axes with nice ticks and labels, light grid,
// one 2-pixel line per series, a legend when there is more than one series.

#include <algorithm>
#include <cmath>
#include <cstdio>
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

Image render(const Chart& chart) {
  ZS_REQUIRE(chart.width >= 200 && chart.height >= 150, UsageError, "chart size ", chart.width, "x", chart.height,
             " is too small; at least 200x150");
  Range xr, yr;
  for (const Series& s : chart.series) {
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
      xr.add(s.x[i]);
      yr.add(s.y[i]);
    }
  }
  ZS_REQUIRE(xr.valid(), UsageError, "chart '", chart.title, "' has no finite point to draw");
  if (chart.y_from_zero) yr.add(0);
  const std::vector<double> xt = nice_ticks(xr.lo, xr.hi, 8), yt = nice_ticks(yr.lo, yr.hi, 6);
  const double x0 = xt.front(), x1 = xt.back(), y0 = yt.front(), y1 = yt.back();
  const double xstep = xt.size() > 1 ? xt[1] - xt[0] : 1, ystep = yt.size() > 1 ? yt[1] - yt[0] : 1;

  const int scale = chart.width >= 640 ? 2 : 1;
  const int th = Canvas::text_height(scale);
  int ylabel_w = 0;
  for (double v : yt) ylabel_w = std::max(ylabel_w, Canvas::text_width(tick_label(v, ystep), scale));
  int legend_w = 0;
  if (chart.series.size() > 1) {
    for (const Series& s : chart.series) legend_w = std::max(legend_w, Canvas::text_width(s.name, scale));
    legend_w += 14 * scale + 8;
  }
  const int left = 12 + th + 10 + ylabel_w + 8;
  const int right = chart.width - 16 - (legend_w > 0 ? legend_w + 16 : 0);
  const int top = 14 + 2 * th + 14;
  const int bottom = chart.height - (10 + th + 10 + th + 12);
  ZS_REQUIRE(right - left >= 40 && bottom - top >= 40, UsageError, "chart '", chart.title, "' does not fit in ",
             chart.width, "x", chart.height, " (labels or legend too wide); make it larger");
  auto px = [&](double x) { return left + static_cast<int>(std::lround((x - x0) / (x1 - x0) * (right - left))); };
  auto py = [&](double y) { return bottom - static_cast<int>(std::lround((y - y0) / (y1 - y0) * (bottom - top))); };

  Canvas c(chart.width, chart.height);
  c.rect(0, 0, chart.width - 1, chart.height - 1, kBackground);
  // Title, axis labels.
  c.text((chart.width - Canvas::text_width(chart.title, 2 * scale)) / 2, 14, chart.title, 2 * scale, kInk);
  c.text((left + right - Canvas::text_width(chart.x_label, scale)) / 2, chart.height - 12 - th, chart.x_label, scale, kInk);
  c.text_up(12, (top + bottom - Canvas::text_width(chart.y_label, scale)) / 2, chart.y_label, scale, kInk);
  // Grid and ticks.
  for (double v : xt) {
    const int x = px(v);
    c.vline(x, top, bottom, kGrid);
    c.vline(x, bottom, bottom + 5, kAxis);
    const std::string label = tick_label(v, xstep);
    c.text(x - Canvas::text_width(label, scale) / 2, bottom + 9, label, scale, kInk);
  }
  for (double v : yt) {
    const int y = py(v);
    c.hline(left, right, y, kGrid);
    c.hline(left - 5, left, y, kAxis);
    const std::string label = tick_label(v, ystep);
    c.text(left - 8 - Canvas::text_width(label, scale), y - th / 2, label, scale, kInk);
  }
  c.vline(left, top, bottom, kAxis);
  c.hline(left, right, bottom, kAxis);
  // Series, clipped to the plot area.
  c.clip(left + 1, top, right, bottom - 1);
  for (size_t k = 0; k < chart.series.size(); ++k) {
    const Series& s = chart.series[k];
    const uint32_t colour = palette()[k % palette().size()];
    bool have_prev = false;
    int prev_x = 0, prev_y = 0;
    for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) {
        have_prev = false;
        continue;
      }
      const int x = px(s.x[i]), y = py(s.y[i]);
      const bool next_finite = i + 1 < s.y.size() && std::isfinite(s.y[i + 1]) && std::isfinite(s.x[i + 1]);
      if (have_prev) {
        c.line(prev_x, prev_y, x, y, colour, 2);
      } else if (!next_finite) {
        c.rect(x - 2, y - 2, x + 2, y + 2, colour);  // an isolated point
      }
      have_prev = true;
      prev_x = x, prev_y = y;
    }
  }
  c.unclip();
  // Legend.
  if (legend_w > 0) {
    int y = top;
    const int x = right + 16;
    for (size_t k = 0; k < chart.series.size(); ++k) {
      const uint32_t colour = palette()[k % palette().size()];
      c.rect(x, y + th / 2 - scale, x + 10 * scale, y + th / 2 + scale - 1, colour);
      c.text(x + 14 * scale, y, chart.series[k].name, scale, kInk);
      y += th + 8;
    }
  }
  return c.take();
}

}  // namespace zeroshard::plot
