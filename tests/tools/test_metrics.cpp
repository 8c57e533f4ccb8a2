// SPDX-License-Identifier: Apache-2.0
// The JSON text helpers (zeroshard/base/json.h) and MetricsWriter (zeroshard/train/metrics.h):
// escaping, round-trippable numbers, the parser's errors, and the writer's contract (opened at
// construction, one complete line per call, visible before the writer is gone).

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/json.h"
#include "zeroshard/train/metrics.h"

namespace zs = zeroshard;

namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "zs_metrics_" + std::to_string(::getpid()) + "_" + name;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream f(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(f, line)) lines.push_back(line);
  return lines;
}

std::string parse_error(const std::string& text) {
  try {
    zs::parse_json(text, "t.jsonl:3");
  } catch (const zs::Error& e) {
    return e.message();
  }
  return "<no error>";
}

}  // namespace

TEST(Json, StringsAreEscaped) {
  EXPECT_EQ(zs::json_string("plain"), "\"plain\"");
  EXPECT_EQ(zs::json_string("a\"b\\c\nd\te\x01"), "\"a\\\"b\\\\c\\nd\\te\\u0001\"");
  EXPECT_EQ(zs::json_string("µs ✓"), "\"µs ✓\"");  // UTF-8 passes through
  const std::string nasty = "quote\" backslash\\ newline\n tab\t bell\x07 nul-free ✓";
  EXPECT_EQ(zs::parse_json(zs::json_string(nasty), "x").string, nasty);
  EXPECT_EQ(zs::parse_json("\"\\u00b5\\ud83d\\ude00\"", "x").string, "µ\xF0\x9F\x98\x80");
}

TEST(Json, NumbersRoundTripExactly) {
  const double values[] = {0.1, 1.0 / 3.0, 2.0 / 3.0, 1e-300, 5e-324, 1.7976931348623157e308, 123456789012345678.0,
                           -0.0, 3.0, 6.02214076e23, 0.30000000000000004, 1e-7};
  for (double v : values) {
    const std::string text = zs::json_number(v);
    const double back = zs::parse_json(text, "x").number;
    EXPECT_EQ(std::memcmp(&back, &v, sizeof(double)), 0) << text << " did not read back to " << v;
  }
  EXPECT_EQ(zs::json_number(0.1), "0.1");  // the shortest form that round-trips
  EXPECT_EQ(zs::json_number(3), "3");
  EXPECT_EQ(zs::json_number(std::numeric_limits<double>::quiet_NaN()), "null");
  EXPECT_EQ(zs::json_number(-std::numeric_limits<double>::infinity()), "null");
}

TEST(Json, ObjectBuilder) {
  zs::JsonObject inner;
  inner.add("gathered params", int64_t{1} << 40).add("x", 1.5);
  zs::JsonObject o;
  o.add("step", 7).add("ok", true).add("name", "a\"b").add("mem", inner).add("big", uint64_t{18446744073709551615u});
  EXPECT_EQ(o.str(),
            "{\"step\":7,\"ok\":true,\"name\":\"a\\\"b\",\"mem\":{\"gathered params\":1099511627776,\"x\":1.5},"
            "\"big\":18446744073709551615}");
  EXPECT_THROW(o.add("step", 8), zs::UsageError);
  const zs::JsonValue v = zs::parse_json(o.str(), "x");
  ASSERT_TRUE(v.is_object());
  EXPECT_EQ(v.find("mem")->find("gathered params")->number, 1099511627776.0);
  EXPECT_EQ(v.find("name")->string, "a\"b");
  EXPECT_EQ(v.find("missing"), nullptr);
}

TEST(Json, ArraysOfObjectsRoundTrip) {
  std::vector<zs::JsonObject> items(2);
  items[0].add("bytes", 1024);
  items[1].add("bytes", 8).add("phase", "forward: unit 'blocks.0'");
  zs::JsonObject o;
  o.add("largest", items).add("empty", std::vector<zs::JsonObject>{});
  EXPECT_EQ(o.str(), "{\"largest\":[{\"bytes\":1024},{\"bytes\":8,\"phase\":\"forward: unit 'blocks.0'\"}],\"empty\":[]}");
  const zs::JsonValue v = zs::parse_json(o.str(), "x");
  ASSERT_TRUE(v.find("largest")->is_array());
  ASSERT_EQ(v.find("largest")->items.size(), 2u);
  EXPECT_EQ(v.find("largest")->items[1].find("phase")->string, "forward: unit 'blocks.0'");
  EXPECT_TRUE(v.find("empty")->items.empty());
  EXPECT_EQ(zs::parse_json("[1, [2, 3]]", "x").items[1].items[1].number, 3.0);
}

TEST(Json, ParseErrorsNameThePlace) {
  EXPECT_EQ(parse_error("{\"a\" 1}"), "t.jsonl:3: column 6: expected ':' after key \"a\"");
  EXPECT_EQ(parse_error("{\"a\": [1 2]}"), "t.jsonl:3: column 10: expected ',' or ']' in an array");
  EXPECT_EQ(parse_error("{\"a\": 1, \"a\": 2}"), "t.jsonl:3: column 13: key \"a\" appears twice in one object");
  EXPECT_EQ(parse_error("{\"a\": 1} x"), "t.jsonl:3: column 10: unexpected 'x' after the value");
  EXPECT_EQ(parse_error("{\"a\": tru}"),
            "t.jsonl:3: column 7: expected a value (number, string, object, array, true, false or null), found 't'");
  EXPECT_EQ(parse_error("{\"a\": \"x"), "t.jsonl:3: column 9: unterminated string");
  EXPECT_EQ(parse_error("{\"a\": 1."), "t.jsonl:3: column 9: expected digits after the decimal point");
  EXPECT_EQ(parse_error(""), "t.jsonl:3: column 1: expected a value, found the end of the line");
  std::string deep;
  for (int i = 0; i < 20; ++i) deep += "{\"a\":";
  EXPECT_NE(parse_error(deep).find("nested deeper than 16"), std::string::npos);
}

TEST(MetricsWriter, UnwritablePathFailsAtConstruction) {
  try {
    zs::MetricsWriter w("/nonexistent-dir/run.jsonl");
    ADD_FAILURE() << "no error for a path in a missing directory";
  } catch (const zs::IoError& e) {
    EXPECT_NE(e.message().find("cannot open metrics file '/nonexistent-dir/run.jsonl' for writing: No such file"),
              std::string::npos)
        << e.message();
  }
  EXPECT_THROW(zs::MetricsWriter w(""), zs::UsageError);
}

TEST(MetricsWriter, EachLineIsOnDiskWhenWriteReturns) {
  const std::string path = temp_path("run.jsonl");
  {
    zs::MetricsWriter w(path);
    EXPECT_TRUE(read_lines(path).empty()) << "the file exists, empty, from construction";
    zs::StepMetrics m;
    m.step = 1;
    m.loss = 2.302585092994046;
    m.lr = 1e-4 / 3;
    m.tokens_per_s = 12345.678;
    m.mem = {{"sharded params", 1048576}, {"gathered params", 0}};
    m.comm_bytes = int64_t{1} << 33;
    m.extra.add("grad_norm", 0.75);
    w.write_step(m);
    std::vector<std::string> lines = read_lines(path);  // the writer is still open
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0],
              "{\"step\":1,\"loss\":2.302585092994046,\"lr\":3.3333333333333335e-05,\"tokens_per_s\":12345.678,"
              "\"mem\":{\"sharded params\":1048576,\"gathered params\":0},\"comm_bytes\":8589934592,\"grad_norm\":0.75}");
    const zs::JsonValue v = zs::parse_json(lines[0], path);
    EXPECT_EQ(v.find("lr")->number, 1e-4 / 3);  // exact round trip

    m.step = 2;
    m.loss = std::numeric_limits<double>::infinity();  // a diverged step is still a line
    m.lr.reset();
    m.tokens_per_s.reset();
    m.samples_per_s = 10.5;
    m.mem.clear();
    m.comm_bytes.reset();
    m.extra = zs::JsonObject();
    w.write_step(m);
    zs::JsonObject summary;
    summary.add("steps", 2).add("final_loss", 2.25).add("note", "line\nbreak");
    w.write_summary(summary);
    EXPECT_EQ(w.lines_written(), 3);
    lines = read_lines(path);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[1], "{\"step\":2,\"loss\":null,\"samples_per_s\":10.5}");
    EXPECT_EQ(lines[2], "{\"summary\":true,\"steps\":2,\"final_loss\":2.25,\"note\":\"line\\nbreak\"}");
    zs::JsonObject clash;
    clash.add("summary", false);
    EXPECT_THROW(w.write_summary(clash), zs::UsageError);
  }
  // A new writer truncates.
  { zs::MetricsWriter w(path); }
  EXPECT_TRUE(read_lines(path).empty());
  std::remove(path.c_str());
}

// The line kinds the examples write: an evaluation line, and a step line with the memory after the
// step ("mem") and the step's peak ("mem_peak"), both by category.
TEST(MetricsWriter, EvalAndPeakMemoryLines) {
  const std::string path = temp_path("kinds.jsonl");
  zs::MetricsWriter w(path);
  w.write_eval(0, "val_loss", 5.5);
  w.write_eval(10, "test_accuracy", std::numeric_limits<double>::quiet_NaN());
  EXPECT_THROW(w.write_eval(1, "", 1.0), zs::UsageError);
  zs::StepMetrics m;
  m.step = 1;
  m.loss = 2;
  m.mem = {{"gathered params", 0}};
  m.mem_peak = {{"gathered params", 4096}};
  w.write_step(m);
  const std::vector<std::string> lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "{\"eval\":\"val_loss\",\"step\":0,\"value\":5.5}");
  EXPECT_EQ(lines[1], "{\"eval\":\"test_accuracy\",\"step\":10,\"value\":null}");
  EXPECT_EQ(lines[2], "{\"step\":1,\"loss\":2,\"mem\":{\"gathered params\":0},\"mem_peak\":{\"gathered params\":4096}}");
  std::remove(path.c_str());
}

// record_memory: each call's "mem_peak" is the peak since the previous call (one step's), while
// the run's peaks (the memory summary's) are left alone.
TEST(MetricsWriter, RecordMemoryGivesEachStepItsOwnPeak) {
  zs::MemoryStats mem;
  const auto gathered = zs::MemCategory::kGatheredParams, sharded = zs::MemCategory::kShardedParams;
  auto bytes = [](const std::vector<std::pair<std::string, int64_t>>& v, const std::string& name) {
    for (const auto& [k, b] : v) {
      if (k == name) return b;
    }
    ADD_FAILURE() << "no category '" << name << "'";
    return int64_t{-1};
  };
  mem.add(sharded, 100);
  // Step 1 gathers 1000 bytes and frees them again.
  mem.add(gathered, 1000);
  mem.sub(gathered, 1000);
  zs::StepMetrics step1;
  zs::record_memory(step1, mem);
  EXPECT_EQ(step1.mem.size(), static_cast<size_t>(zs::MemCategory::kCount));
  EXPECT_EQ(bytes(step1.mem, "gathered params"), 0);
  EXPECT_EQ(bytes(step1.mem_peak, "gathered params"), 1000);
  EXPECT_EQ(bytes(step1.mem_peak, "sharded params"), 100);
  // Step 2 needs only 300.
  mem.add(gathered, 300);
  mem.sub(gathered, 300);
  zs::StepMetrics step2;
  zs::record_memory(step2, mem);
  EXPECT_EQ(bytes(step2.mem_peak, "gathered params"), 300);
  EXPECT_EQ(bytes(step2.mem_peak, "sharded params"), 100);  // held throughout: its current value
  // Nothing in step 3; an explicit restart (after an evaluation) drops what came before it.
  mem.add(gathered, 700);
  mem.sub(gathered, 700);
  mem.restart_window();
  zs::StepMetrics step3;
  zs::record_memory(step3, mem);
  EXPECT_EQ(bytes(step3.mem_peak, "gathered params"), 0);
  EXPECT_EQ(mem.peak(gathered), 1000);  // the run's peak is untouched
  EXPECT_EQ(mem.total_peak(), 1100);
}
