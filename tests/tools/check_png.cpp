// SPDX-License-Identifier: Apache-2.0
// check_png: does a chart zeroshard-plot wrote show what it should? For the job tests that chain
// the real tools (tests/tools/tools_chain.sh).
//
//   check_png FILE.png WIDTHxHEIGHT SERIES
//
// Decodes FILE with libpng and checks: the size; not blank (over 1% of the pixels inked); text
// present (the chart's ink colour); the plot area found (the bottom axis: the row with the longest
// run of axis black); inside it, each of the first SERIES palette colours drawn (at least 20
// pixels: a line or evaluation markers), and the next palette colour absent (no more series than
// expected). The legend's swatches lie outside the plot area, so they do not count. Prints one
// line per file; exit 0 when every check passes, 1 otherwise.

#include <png.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plot.h"

namespace {

constexpr uint32_t kInk = 0x202020, kAxis = 0x000000;

struct Decoded {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  uint32_t at(int x, int y) const {
    const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
    return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
  }
};

bool decode(const std::string& path, Decoded& d, std::string& why) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str())) {
    why = img.message;
    return false;
  }
  img.format = PNG_FORMAT_RGB;
  d.width = static_cast<int>(img.width);
  d.height = static_cast<int>(img.height);
  d.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, d.rgb.data(), 0, nullptr)) {
    why = img.message;
    return false;
  }
  return true;
}

// The longest horizontal run of `colour`: the bottom axis of the plot area.
struct Run {
  int y = -1, x0 = 0, x1 = -1;
};
Run longest_run(const Decoded& d, uint32_t colour) {
  Run best;
  for (int y = 0; y < d.height; ++y) {
    for (int x = 0; x < d.width;) {
      if (d.at(x, y) != colour) {
        ++x;
        continue;
      }
      int end = x;
      while (end + 1 < d.width && d.at(end + 1, y) == colour) ++end;
      if (end - x > best.x1 - best.x0) best = {y, x, end};
      x = end + 1;
    }
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: check_png FILE.png WIDTHxHEIGHT SERIES\n");
    return 2;
  }
  const std::string path = argv[1];
  int want_w = 0, want_h = 0;
  if (std::sscanf(argv[2], "%dx%d", &want_w, &want_h) != 2) {
    std::fprintf(stderr, "check_png: bad size '%s'\n", argv[2]);
    return 2;
  }
  const int series = std::atoi(argv[3]);
  const auto& palette = zeroshard::plot::palette();
  if (series < 1 || series >= static_cast<int>(palette.size())) {
    std::fprintf(stderr, "check_png: SERIES must be 1..%zu\n", palette.size() - 1);
    return 2;
  }
  Decoded d;
  std::string why;
  if (!decode(path, d, why)) {
    std::printf("check_png: %s: FAILED: cannot decode: %s\n", path.c_str(), why.c_str());
    return 1;
  }
  std::string failures;
  auto fail = [&](const std::string& what) { failures += (failures.empty() ? "" : "; ") + what; };
  if (d.width != want_w || d.height != want_h) {
    fail("size " + std::to_string(d.width) + "x" + std::to_string(d.height) + ", expected " + argv[2]);
  }
  int64_t inked = 0, text = 0;
  for (int y = 0; y < d.height; ++y) {
    for (int x = 0; x < d.width; ++x) {
      const uint32_t c = d.at(x, y);
      inked += c != 0xffffff;
      text += c == kInk;
    }
  }
  if (inked * 100 < static_cast<int64_t>(d.width) * d.height) fail("blank (" + std::to_string(inked) + " inked pixels)");
  if (text < 200) fail("no text (" + std::to_string(text) + " pixels of ink)");
  const Run axis = longest_run(d, kAxis);
  if (axis.y < 0 || axis.x1 - axis.x0 < 40) fail("no plot area (no bottom axis)");
  std::string counts;
  for (int k = 0; k <= series && axis.y >= 0; ++k) {
    int64_t n = 0;
    for (int y = 0; y < axis.y; ++y) {
      for (int x = axis.x0 + 1; x < axis.x1; ++x) n += d.at(x, y) == palette[static_cast<size_t>(k)];
    }
    if (k < series) {
      counts += (counts.empty() ? "" : " ") + std::to_string(k + 1) + ":" + std::to_string(n);
      if (n < 20) fail("series " + std::to_string(k + 1) + " not drawn (" + std::to_string(n) + " pixels)");
    } else if (n > 0) {
      fail("a series " + std::to_string(k + 1) + " drawn (" + std::to_string(n) + " pixels), expected " +
           std::to_string(series));
    }
  }
  if (!failures.empty()) {
    std::printf("check_png: %s: FAILED: %s\n", path.c_str(), failures.c_str());
    return 1;
  }
  std::printf("check_png: %s: ok, %dx%d, %d series (pixels per series %s)\n", path.c_str(), d.width, d.height, series,
              counts.c_str());
  return 0;
}
