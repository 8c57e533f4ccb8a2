// SPDX-License-Identifier: Apache-2.0
// zeroshard-plot: a metrics file written by MetricsWriter (every line kind: step, eval, summary)
// becomes PNG charts that exist, have the asked size, and show the data (decoded here with
// libpng: the series colours are drawn, where the data says); lines of unknown kinds are skipped
// with a note, bad lines are errors naming FILE:LINE; tick labels never overlap (5000 steps, every
// size); the tick and font helpers. The same charts from the examples' real output:
// tests/tools/tools_chain.sh.

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

// A run of 60 steps as the examples write it: a validation loss and an accuracy before training
// and every 20 steps, loss falling, lr warming up, throughput steady, memory in 3 categories after
// each step ("mem": gathered params and unsharded grads back at 0) and each step's peak
// ("mem_peak": both transient categories up), communication constant, a summary.
std::string write_sample(const std::string& path) {
  zs::MetricsWriter w(path);
  auto evals = [&](int s) {
    w.write_eval(s, "val_loss", 4.2 * std::exp(-s / 25.0) + 0.6);
    w.write_eval(s, "val_accuracy", 0.9 - 0.8 * std::exp(-s / 15.0));
  };
  evals(0);
  for (int s = 1; s <= 60; ++s) {
    zs::StepMetrics m;
    m.step = s;
    m.loss = 4.0 * std::exp(-s / 20.0) + 0.5;
    m.lr = 1e-3 * std::min(1.0, s / 10.0);
    m.tokens_per_s = 50000 + 1000 * std::sin(s);
    m.mem = {{"sharded params", 64 << 20}, {"optimizer state", 128 << 20}, {"gathered params", 0},
             {"unsharded grads", 0}};
    m.mem_peak = {{"sharded params", 64 << 20}, {"optimizer state", 128 << 20},
                  {"gathered params", (16 + s % 4) << 20}, {"unsharded grads", 0}};
    m.comm_bytes = int64_t{3} << 28;
    w.write_step(m);
    if (s % 20 == 0) evals(s);
  }
  zs::MetricFields summary;
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
  EXPECT_EQ(log.skipped_lines, 0);
  EXPECT_EQ(log.throughput_key, "tokens_per_s");
  EXPECT_EQ(log.mem_categories,
            (std::vector<std::string>{"sharded params", "optimizer state", "gathered params", "unsharded grads"}));
  EXPECT_EQ(log.mem.at("gathered params")[9], 0.0);
  EXPECT_EQ(log.mem_peak.at("gathered params")[9], 18.0 * (1 << 20));  // step 10: 16 + 10 % 4 MiB
  ASSERT_EQ(log.evals.size(), 2u);
  EXPECT_EQ(log.evals[0].name, "val_loss");
  EXPECT_EQ(log.evals[0].step, (std::vector<double>{0, 20, 40, 60}));
  EXPECT_EQ(log.evals[1].name, "val_accuracy");

  const auto files = zp::plot_metrics(log, dir, "run", 800, 450);
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(f.path);
  const std::vector<std::string> want = {dir + "/run_loss.png", dir + "/run_lr.png", dir + "/run_throughput.png",
                                         dir + "/run_memory.png", dir + "/run_comm.png"};
  ASSERT_EQ(paths, want);
  // What each chart drew: evaluations with the training loss (accuracy on the right axis); the
  // memory chart from the peaks, without the category that stays at zero.
  EXPECT_EQ(files[0].series, (std::vector<std::string>{"train loss: 60 points", "val_loss: 4 points",
                                                       "val_accuracy: 4 points, right axis"}));
  EXPECT_EQ(files[3].series, (std::vector<std::string>{"sharded params: 60 points", "optimizer state: 60 points",
                                                       "gathered params: 60 points"}));
  const uint32_t first = zp::palette()[0];
  for (const auto& f : paths) {
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
  // The loss falls: its line sits higher (smaller row) on the left than on the right. The
  // accuracy (third colour) rises: lower on the left.
  const Decoded loss = decode(paths[0]);
  const Ink left = ink(loss, first, 0, 250), right = ink(loss, first, 400, 560);
  ASSERT_GT(left.count, 0);
  ASSERT_GT(right.count, 0);
  EXPECT_LT(left.mean_y + 50, right.mean_y);
  EXPECT_GT(ink(loss, zp::palette()[1]).count, 100) << "val_loss not drawn";
  const Ink acc_left = ink(loss, zp::palette()[2], 0, 250), acc_right = ink(loss, zp::palette()[2], 400, 560);
  ASSERT_GT(acc_left.count, 0);
  ASSERT_GT(acc_right.count, 0);
  EXPECT_GT(acc_left.mean_y, acc_right.mean_y + 50);
  // Memory: one stacked band per category in its colour, from the bottom in file order (sharded
  // params, optimizer state, gathered params), each as tall as its bytes: optimizer state's band
  // (128 MiB) twice sharded params' (64); gathered params (the peak, 16-19 MiB) drawn although it
  // is 0 after every step; unsharded grads (always 0) left out.
  const Decoded mem = decode(paths[3]);
  const Ink sharded = ink(mem, zp::palette()[0]), optim = ink(mem, zp::palette()[1]), gathered = ink(mem, zp::palette()[2]);
  EXPECT_GT(sharded.count, 3000);
  EXPECT_NEAR(static_cast<double>(optim.count) / static_cast<double>(sharded.count), 2.0, 0.2);
  EXPECT_NEAR(static_cast<double>(gathered.count) / static_cast<double>(sharded.count), 17.5 / 64, 0.06);
  EXPECT_EQ(ink(mem, zp::palette()[3]).count, 0);
  EXPECT_GT(sharded.mean_y, optim.mean_y);
  EXPECT_GT(optim.mean_y, gathered.mean_y);
}

// Every line kind: evaluations, a summary, a kind this reader does not know (skipped with a note),
// and an older file with "mem" only (its memory chart shows the values after each step).
TEST(Plot, LineKinds) {
  const std::string text =
      "{\"eval\":\"val_loss\",\"step\":0,\"value\":5.5}\n"
      "{\"step\":1,\"loss\":5.0,\"mem\":{\"a\":1048576}}\n"
      "{\"checkpoint\":\"step-1\",\"step\":1}\n"
      "{\"eval\":\"val_loss\",\"step\":1,\"value\":null}\n"
      "{\"eval\":\"test_accuracy\",\"step\":1,\"value\":0.5}\n"
      "{\"step\":2,\"loss\":4.0,\"mem\":{\"a\":2097152}}\n"
      "{\"step\":2}\n"
      "{}\n"
      "{\"x\":1}\n"
      "{\"summary\":true,\"steps\":2}\n";
  const zp::MetricsLog log = zp::parse_metrics(text, "run.jsonl");
  EXPECT_EQ(log.steps(), 2u);
  ASSERT_EQ(log.evals.size(), 2u);
  EXPECT_EQ(log.evals[0].step, (std::vector<double>{0, 1}));
  EXPECT_TRUE(std::isnan(log.evals[0].value[1]));
  EXPECT_EQ(log.evals[1].value, (std::vector<double>{0.5}));
  EXPECT_EQ(log.skipped_lines, 4);
  ASSERT_EQ(log.notes.size(), 3u);  // the first three, then a count
  EXPECT_EQ(log.notes[0],
            "run.jsonl:3: skipped a line of a kind this zeroshard-plot does not know (keys: checkpoint, step); it "
            "reads step, eval and summary lines");
  EXPECT_NE(log.notes[2].find("run.jsonl:8: skipped a line of a kind this zeroshard-plot does not know (keys: none)"),
            std::string::npos);
  EXPECT_TRUE(log.mem_peak.empty());
  const auto files = zp::plot_metrics(log, temp_dir(), "kinds", 640, 360);
  ASSERT_EQ(files.size(), 2u);  // loss, memory
  EXPECT_EQ(files[0].series, (std::vector<std::string>{"train loss: 2 points", "val_loss: 1 points",
                                                       "test_accuracy: 1 points, right axis"}));
  EXPECT_EQ(files[1].series, (std::vector<std::string>{"a: 2 points"}));
}

TEST(Plot, BadLinesNameFileAndLine) {
  const std::string ok = "{\"step\":1,\"loss\":2}\n";
  EXPECT_EQ(metrics_error(ok + "not json\n"),
            "run.jsonl:2: column 2: syntax error while parsing value - invalid literal; last read: 'no'");
  EXPECT_EQ(metrics_error(ok + "\n3\n"), "run.jsonl:3: a metrics line is a JSON object, this is a number");
  EXPECT_EQ(metrics_error(ok + "{\"loss\":2}\n"),
            "run.jsonl:2: no \"step\" key in a step line (a step line has \"step\" and \"loss\"; the last line may "
            "be {\"summary\": true, ...})");
  EXPECT_EQ(metrics_error("{\"step\":\"1\",\"loss\":2}\n"), "run.jsonl:1: \"step\" is a string; expected a number");
  EXPECT_EQ(metrics_error("{\"step\":1}\n"),  // a later kind, skipped: then nothing is left
            "run.jsonl: no step lines (lines like {\"step\": 1, \"loss\": 2.3, ...})");
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
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":2,\"mem_peak\":5}\n"),
            "run.jsonl:1: \"mem_peak\" is a number; expected an object of category -> bytes");
  EXPECT_EQ(metrics_error(ok + "{\"eval\":3,\"step\":1,\"value\":2}\n"),
            "run.jsonl:2: \"eval\" is a number; expected the evaluation's name");
  EXPECT_EQ(metrics_error(ok + "{\"eval\":\"val_loss\",\"value\":2}\n"),
            "run.jsonl:2: no \"step\" key in an evaluation line ({\"eval\": NAME, \"step\": S, \"value\": V})");
  EXPECT_EQ(metrics_error(ok + "{\"eval\":\"val_loss\",\"step\":1}\n"),
            "run.jsonl:2: no \"value\" key in an evaluation line ({\"eval\": NAME, \"step\": S, \"value\": V})");
  EXPECT_EQ(metrics_error(ok + "{\"eval\":\"v\",\"step\":1,\"value\":\"high\"}\n"),
            "run.jsonl:2: \"value\" is a string; expected a number");
  EXPECT_EQ(metrics_error(ok + "{\"eval\":\"v\",\"step\":4,\"value\":1}\n{\"eval\":\"v\",\"step\":4,\"value\":1}\n"),
            "run.jsonl:3: evaluation \"v\" at step 4 does not follow its step 4; steps must increase");
  EXPECT_EQ(metrics_error(ok + "{\"summary\":true}\n{\"eval\":\"v\",\"step\":4,\"value\":1}\n"),
            "run.jsonl:3: a line after the summary line (line 2); the summary is the last line of a run");
  EXPECT_EQ(metrics_error("\n\n"), "run.jsonl: no step lines (lines like {\"step\": 1, \"loss\": 2.3, ...})");
  EXPECT_EQ(metrics_error("{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":1"),
            "run.jsonl:2: column 19: syntax error while parsing object - unexpected end of input; expected '}'");
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

// Labels (x and both y axes) never overlap nor leave the image, at 5000 steps (and at 2 million)
// from the smallest size to a large one, with a legend and a right-hand axis taking width; and
// tick spacing comes from the labels, so every tick keeps its label (none had to be left out).
TEST(Plot, TickLabelsNeverOverlap) {
  auto overlap = [](const zp::Box& a, const zp::Box& b) {
    return a.x0 <= b.x1 && b.x0 <= a.x1 && a.y0 <= b.y1 && b.y0 <= a.y1;
  };
  for (double last_step : {5000.0, 2.0e6}) {
    zp::Chart c;
    c.title = "loss and evaluation";
    c.x_label = "step";
    c.y_label = "loss";
    c.y2_label = "test_accuracy";
    c.x_integer = true;
    zp::Series loss{"train loss", {}, {}}, acc{"test_accuracy", {}, {}, /*right_axis=*/true, /*markers=*/true};
    for (int i = 1; i <= 5000; ++i) {
      loss.x.push_back(i * last_step / 5000);
      loss.y.push_back(4000.0 * std::exp(-i / 800.0) + 1234.5);
      if (i % 500 == 0) {
        acc.x.push_back(i * last_step / 5000);
        acc.y.push_back(0.5 + i / 12000.0);
      }
    }
    c.series = {loss, acc, {"unsharded grads peak", loss.x, loss.y}};
    for (auto [w, h] : std::vector<std::pair<int, int>>{{200, 150}, {320, 240}, {640, 360}, {960, 540}, {1920, 1080}}) {
      SCOPED_TRACE(std::to_string(static_cast<int64_t>(last_step)) + " steps at " + std::to_string(w) + "x" +
                   std::to_string(h));
      c.width = w;
      c.height = h;
      zp::ChartLayout l;
      try {
        zp::render(c, &l);
      } catch (const zs::UsageError& e) {  // too small for labels and legend: said, not drawn badly
        EXPECT_LT(w, 640) << e.message();
        EXPECT_NE(e.message().find("does not fit in"), std::string::npos) << e.message();
        continue;
      }
      std::vector<zp::Box> all = l.x_labels;
      all.insert(all.end(), l.y_labels.begin(), l.y_labels.end());
      all.insert(all.end(), l.y2_labels.begin(), l.y2_labels.end());
      for (size_t i = 0; i < all.size(); ++i) {
        EXPECT_GE(all[i].x0, 0) << all[i].text;
        EXPECT_LT(all[i].x1, w) << all[i].text;
        EXPECT_GE(all[i].y0, 0) << all[i].text;
        EXPECT_LT(all[i].y1, h) << all[i].text;
        for (size_t j = i + 1; j < all.size(); ++j) {
          EXPECT_FALSE(overlap(all[i], all[j])) << "'" << all[i].text << "' and '" << all[j].text << "' overlap";
        }
      }
      // Neighbouring x labels at least a character apart; every tick labelled; at least 3 of them.
      for (size_t i = 1; i < l.x_labels.size(); ++i) EXPECT_GE(l.x_labels[i].x0 - l.x_labels[i - 1].x1, 6);
      EXPECT_EQ(l.x_labels.size(), l.x_ticks.size());
      EXPECT_EQ(l.y_labels.size(), l.y_ticks.size());
      EXPECT_EQ(l.y2_labels.size(), l.y2_ticks.size());
      EXPECT_GE(l.x_ticks.size(), 3u);
      EXPECT_GE(l.y2_ticks.size(), 2u);
      EXPECT_GE(l.x_ticks.back(), last_step) << "the range is covered";
      EXPECT_LE(l.x_ticks.front(), last_step / 5000);
      for (double t : l.x_ticks) EXPECT_EQ(t, std::round(t)) << "steps are whole";
    }
  }
}

// The charts zeroshard-plot draws for a 5000-step run (every line kind, 6 memory categories), at
// the smallest size that holds them and larger: every tick labelled, no two labels overlapping.
TEST(Plot, RealChartsAt5000Steps) {
  const std::string dir = temp_dir();
  {
    zs::MetricsWriter w(dir + "/long.jsonl");
    for (int s = 0; s <= 5000; ++s) {
      if (s % 500 == 0) {
        w.write_eval(s, "val_loss", 3.0 + 2.0 * std::exp(-s / 900.0));
        w.write_eval(s, "test_accuracy", 0.9 - 0.5 * std::exp(-s / 700.0));
      }
      if (s == 0) continue;
      zs::StepMetrics m;
      m.step = s;
      m.loss = 3.0 + 2.0 * std::exp(-s / 800.0) + 0.1 * std::sin(s);
      m.lr = 3e-4 * std::min(1.0, s / 100.0);
      m.tokens_per_s = 123456.0 + 5000 * std::sin(s / 50.0);
      for (const char* c : {"sharded params", "gathered params", "gradient shards", "unsharded grads",
                            "optimizer state", "comm buffers"}) {
        m.mem.emplace_back(c, int64_t{3} << 30);
        m.mem_peak.emplace_back(c, (int64_t{3} << 30) + (s % 7) * (int64_t{1} << 26));
      }
      m.comm_bytes = int64_t{5} << 30;
      w.write_step(m);
    }
  }
  const zp::MetricsLog log = zp::read_metrics(dir + "/long.jsonl");
  for (auto [w, h] : std::vector<std::pair<int, int>>{{400, 300}, {640, 360}, {960, 540}, {1600, 900}}) {
    const auto files = zp::plot_metrics(log, dir, "long" + std::to_string(w), w, h);
    ASSERT_EQ(files.size(), 5u);
    for (const auto& f : files) {
      SCOPED_TRACE(f.path);
      const zp::ChartLayout& l = f.layout;
      EXPECT_EQ(l.x_labels.size(), l.x_ticks.size());
      EXPECT_EQ(l.y_labels.size(), l.y_ticks.size());
      EXPECT_GE(l.x_ticks.size(), 3u);
      EXPECT_GE(l.x_ticks.back(), 5000);
      for (size_t i = 1; i < l.x_labels.size(); ++i) {
        EXPECT_GE(l.x_labels[i].x0 - l.x_labels[i - 1].x1, w >= 640 ? 12 : 6)
            << "'" << l.x_labels[i - 1].text << "' and '" << l.x_labels[i].text << "'";
      }
      for (size_t i = 1; i < l.y_labels.size(); ++i) EXPECT_GT(l.y_labels[i - 1].y0, l.y_labels[i].y1);
      EXPECT_GE(l.x_labels.front().x0, 0);
      EXPECT_LT(l.x_labels.back().x1, w);
    }
  }
}

TEST(Plot, FittingTicks) {
  auto chars = [](const std::string& s) { return static_cast<int>(s.size()) * 10; };
  // Room for all: the usual nice ticks. Less room: fewer, wider-spaced ones.
  EXPECT_EQ(zp::fitting_ticks(0, 5000, 1000, 5, true, 10, chars), (std::vector<double>{0, 1000, 2000, 3000, 4000, 5000}));
  EXPECT_EQ(zp::fitting_ticks(0, 5000, 120, 10, true, 10, chars), (std::vector<double>{0, 5000}));
  const auto mid = zp::fitting_ticks(0, 5000, 300, 10, true, 10, chars);
  ASSERT_GE(mid.size(), 2u);
  EXPECT_GE(300.0 / static_cast<double>(mid.size() - 1), 50.0);  // "5000" is 40 pixels + 10 apart
  // Whole steps: 3 steps give 1, 2, 3-style ticks, one step gives 0, 1, 2, never 1.5.
  for (double t : zp::fitting_ticks(1, 3, 800, 10, true, 10, chars)) EXPECT_EQ(t, std::round(t));
  EXPECT_EQ(zp::fitting_ticks(1, 1, 800, 10, true, 10, chars), (std::vector<double>{0, 1, 2}));
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
