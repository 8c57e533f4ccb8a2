// zeroshard-plot: a metrics file written by MetricsWriter becomes PNG charts that exist, have the
// asked size, and show the data (decoded here with libpng: the series colours are drawn, where
// the data says); bad lines are errors naming FILE:LINE; the tick and font helpers.

#include <png.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include "common/test_util.h"
#include "plot.h"
#include "zeroshard/base/error.h"
#include "zeroshard/train/metrics.h"

namespace zs = zeroshard;
namespace zp = zeroshard::plot;

namespace {

std::string temp_dir() {
  const std::string d = ::testing::TempDir() + "zs_plot_" + std::to_string(::getpid());
  ::mkdir(d.c_str(), 0755);
  return d;
}

struct Decoded {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;
  uint32_t at(int x, int y) const {
    const uint8_t* p = &rgb[(static_cast<size_t>(y) * width + x) * 3];
    return uint32_t{p[0]} << 16 | uint32_t{p[1]} << 8 | p[2];
  }
};

Decoded decode(const std::string& path) {
  png_image img;
  std::memset(&img, 0, sizeof(img));
  img.version = PNG_IMAGE_VERSION;
  Decoded d;
  if (!png_image_begin_read_from_file(&img, path.c_str())) {
    ADD_FAILURE() << "cannot decode " << path << ": " << img.message;
    return d;
  }
  img.format = PNG_FORMAT_RGB;
  d.width = static_cast<int>(img.width);
  d.height = static_cast<int>(img.height);
  d.rgb.resize(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, d.rgb.data(), 0, nullptr)) ADD_FAILURE() << img.message;
  return d;
}

// Pixels of colour c: count and mean row.
struct Ink {
  int64_t count = 0;
  double mean_y = 0;
};
Ink ink(const Decoded& d, uint32_t c, int x0 = 0, int x1 = -1) {
  Ink k;
  if (x1 < 0) x1 = d.width - 1;
  for (int y = 0; y < d.height; ++y) {
    for (int x = x0; x <= x1; ++x) {
      if (d.at(x, y) == c) {
        ++k.count;
        k.mean_y += y;
      }
    }
  }
  if (k.count > 0) k.mean_y /= static_cast<double>(k.count);
  return k;
}

// A run of 60 steps: loss falling, lr warming up, throughput steady, memory in 3 categories
// (gathered params only from step 10), communication constant.
std::string write_sample(const std::string& path) {
  zs::MetricsWriter w(path);
  for (int s = 1; s <= 60; ++s) {
    zs::StepMetrics m;
    m.step = s;
    m.loss = 4.0 * std::exp(-s / 20.0) + 0.5;
    m.lr = 1e-3 * std::min(1.0, s / 10.0);
    m.tokens_per_s = 50000 + 1000 * std::sin(s);
    m.mem = {{"sharded params", 64 << 20}, {"optimizer state", 128 << 20}};
    if (s >= 10) m.mem.emplace_back("gathered params", (16 + s % 4) << 20);
    m.comm_bytes = int64_t{3} << 28;
    w.write_step(m);
  }
  zs::JsonObject summary;
  summary.add("steps", 60);
  w.write_summary(summary);
  return path;
}

std::string metrics_error(const std::string& text) {
  try {
    zp::parse_metrics(text, "run.jsonl");
  } catch (const zs::Error& e) {
    return e.message();
  }
  return "<no error>";
}

}  // namespace

TEST(Plot, ChartsFromAMetricsFile) {
  const std::string dir = temp_dir();
  const zp::MetricsLog log = zp::read_metrics(write_sample(dir + "/run.jsonl"));
  ASSERT_EQ(log.steps(), 60u);
  EXPECT_TRUE(log.has_summary);
  EXPECT_EQ(log.throughput_key, "tokens_per_s");
  EXPECT_EQ(log.mem_categories, (std::vector<std::string>{"sharded params", "optimizer state", "gathered params"}));
  EXPECT_TRUE(std::isnan(log.mem.at("gathered params")[0]));
  EXPECT_EQ(log.mem.at("gathered params")[9], 18.0 * (1 << 20));  // step 10: 16 + 10 % 4 MiB

  const auto files = zp::plot_metrics(log, dir, "run", 800, 450);
  const std::vector<std::string> want = {dir + "/run_loss.png", dir + "/run_lr.png", dir + "/run_throughput.png",
                                         dir + "/run_memory.png", dir + "/run_comm.png"};
  ASSERT_EQ(files, want);
  const uint32_t first = zp::palette()[0];
  for (const auto& f : files) {
    SCOPED_TRACE(f);
    const Decoded d = decode(f);
    ASSERT_EQ(d.width, 800);
    ASSERT_EQ(d.height, 450);
    int64_t non_white = 0;
    for (size_t i = 0; i < d.rgb.size(); i += 3) non_white += (d.rgb[i] & d.rgb[i + 1] & d.rgb[i + 2]) != 0xff;
    EXPECT_GT(non_white, 800 * 450 / 100) << "the chart is (nearly) blank";
    EXPECT_GT(ink(d, first).count, 400) << "the first series' line is missing";
    EXPECT_GT(ink(d, 0x202020).count, 200) << "no text (title, tick labels)";
  }
  // The loss falls: its line sits higher (smaller row) on the left than on the right.
  const Decoded loss = decode(files[0]);
  const Ink left = ink(loss, first, 0, 300), right = ink(loss, first, 500, 799);
  ASSERT_GT(left.count, 0);
  ASSERT_GT(right.count, 0);
  EXPECT_LT(left.mean_y + 50, right.mean_y);
  // Memory: one line per category, each in its colour; the largest category (optimizer state,
  // colour 2) above the smaller ones.
  const Decoded mem = decode(files[3]);
  const Ink sharded = ink(mem, zp::palette()[0]), optim = ink(mem, zp::palette()[1]), gathered = ink(mem, zp::palette()[2]);
  EXPECT_GT(sharded.count, 300);
  EXPECT_GT(optim.count, 300);
  EXPECT_GT(gathered.count, 200);
  EXPECT_LT(optim.mean_y, sharded.mean_y);
  EXPECT_LT(sharded.mean_y, gathered.mean_y);
}

TEST(Plot, BadLinesNameFileAndLine) {
  const std::string ok = "{\"step\":1,\"loss\":2}\n";
  EXPECT_EQ(metrics_error(ok + "not json\n"),
            "run.jsonl:2: column 1: expected a value (number, string, object, array, true, false or null), found 'n'");
  EXPECT_EQ(metrics_error(ok + "\n3\n"), "run.jsonl:3: a metrics line is a JSON object, this is a number");
  EXPECT_EQ(metrics_error(ok + "{\"loss\":2}\n"),
            "run.jsonl:2: no \"step\" key; a step line has \"step\" and \"loss\" (the last line may be "
            "{\"summary\": true, ...})");
  EXPECT_EQ(metrics_error("{\"step\":\"1\",\"loss\":2}\n"), "run.jsonl:1: \"step\" is a string; expected a number");
  EXPECT_EQ(metrics_error("{\"step\":1}\n"), "run.jsonl:1: no \"loss\" key in a step line");
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":true}\n"), "run.jsonl:1: \"loss\" is a boolean; expected a number");
  EXPECT_EQ(metrics_error(ok + "{\"step\":1,\"loss\":2}\n"),
            "run.jsonl:2: step 1 does not follow step 1 (line 1); steps must increase");
  EXPECT_EQ(metrics_error(ok + "{\"summary\":true}\n{\"step\":2,\"loss\":1}\n"),
            "run.jsonl:3: a line after the summary line (line 2); the summary is the last line of a run");
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":2,\"tokens_per_s\":1,\"samples_per_s\":2}\n"),
            "run.jsonl:1: both \"tokens_per_s\" and \"samples_per_s\"; log one");
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":2,\"mem\":5}\n"),
            "run.jsonl:1: \"mem\" is a number; expected an object of category -> bytes");
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":2,\"mem\":{\"a\":\"x\"}}\n"),
            "run.jsonl:1: \"mem\".\"a\" is a string; expected a number of bytes");
  EXPECT_EQ(metrics_error("\n\n"), "run.jsonl: no step lines (lines like {\"step\": 1, \"loss\": 2.3, ...})");
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1"),
            "run.jsonl:2: column 19: expected ',' or '}' in an object");
  try {
    zp::read_metrics("/nonexistent/run.jsonl");
    ADD_FAILURE();
  } catch (const zs::IoError& e) {
    EXPECT_NE(e.message().find("cannot read metrics file '/nonexistent/run.jsonl'"), std::string::npos);
  }
}

TEST(Plot, NullLossIsAGapAndAllNullIsAnError) {
  const zp::MetricsLog log = zp::parse_metrics("{\"step\":1,\"loss\":null}\n{\"step\":2,\"loss\":1.5}\n", "r");
  EXPECT_TRUE(std::isnan(log.loss[0]));
  EXPECT_EQ(log.loss[1], 1.5);
  const zp::MetricsLog bad = zp::parse_metrics("{\"step\":1,\"loss\":null}\n", "r");
  EXPECT_THROW(zp::plot_metrics(bad, temp_dir(), "nulls", 400, 300), zs::Error);
}

TEST(Plot, TicksAndLabels) {
  EXPECT_EQ(zp::nice_ticks(0, 100, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  EXPECT_EQ(zp::nice_ticks(1, 60, 8), (std::vector<double>{0, 10, 20, 30, 40, 50, 60}));
  const auto t = zp::nice_ticks(0.00012, 0.00098, 5);
  EXPECT_DOUBLE_EQ(t.front(), 0.0);
  EXPECT_NEAR(t[1], 0.0002, 1e-15);
  EXPECT_EQ(zp::nice_ticks(5, 5, 4).size() >= 2, true);  // a flat series still gets an axis
  EXPECT_EQ(zp::tick_label(0, 5), "0");
  EXPECT_EQ(zp::tick_label(250, 50), "250");
  EXPECT_EQ(zp::tick_label(0.0006, 0.0002), "0.0006");
  EXPECT_EQ(zp::tick_label(1.5e6, 5e5), "1.5e6");
  EXPECT_EQ(zp::tick_label(2e-5, 1e-5), "2e-5");
  EXPECT_EQ(zp::tick_label(2.25, 0.25), "2.25");
  EXPECT_EQ(zp::tick_label(0.30000000000000004, 0.1), "0.3");
  EXPECT_EQ(zp::tick_label(7.5e6, 2.5e6), "7.5e6");
  EXPECT_EQ(zp::tick_label(-40, 20), "-40");
}

TEST(Plot, FontCoversPrintableAscii) {
  auto bits = [](char c) {
    std::string b;
    for (int r = 0; r < 7; ++r) {
      for (int col = 0; col < 5; ++col) b += zp::glyph_pixel(c, col, r) ? '#' : '.';
    }
    return b;
  };
  std::set<std::string> seen;
  for (char c = '!'; c <= '~'; ++c) {
    EXPECT_NE(bits(c), std::string(35, '.')) << "glyph '" << c << "' is empty";
    EXPECT_TRUE(seen.insert(bits(c)).second) << "glyph '" << c << "' looks like another one";
  }
  EXPECT_EQ(bits(' '), std::string(35, '.'));
  EXPECT_EQ(bits('\x01'), bits('?'));  // outside the table
}

TEST(Plot, SizesAndPngErrors) {
  zp::Chart c;
  c.title = "t";
  c.series.push_back({"s", {1, 2}, {3, 4}});
  c.width = 100;
  EXPECT_THROW(zp::render(c), zs::UsageError);
  c.width = 400;
  c.height = 300;
  const zp::Image img = zp::render(c);
  EXPECT_EQ(img.rgb.size(), 400u * 300 * 3);
  try {
    zp::write_png(img, "/nonexistent-dir/x.png");
    ADD_FAILURE();
  } catch (const zs::IoError& e) {
    EXPECT_NE(e.message().find("cannot write PNG '/nonexistent-dir/x.png'"), std::string::npos) << e.message();
  }
}
