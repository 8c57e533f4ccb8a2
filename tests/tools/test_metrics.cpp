// SPDX-License-Identifier: Apache-2.0
// MetricsWriter (zeroshard/train/metrics.h): the lines read back by an independent JSON parser
// (nlohmann-json) with every double exact, integers as integers, strings escaped; the fields'
// refusals; and the writer's contract (opened at construction, one complete line per call,
// visible before the writer is gone).

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error_text.h"
#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/train/metrics.h"

namespace zs = zeroshard;
using Json = nlohmann::ordered_json;

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

// The one line a summary of `fields` is written as.
std::string summary_line(const zs::MetricFields& fields) {
  const std::string path = temp_path("summary.jsonl");
  {
    zs::MetricsWriter w(path);
    w.write_summary(fields);
  }
  const std::vector<std::string> lines = read_lines(path);
  std::remove(path.c_str());
  return lines.size() == 1 ? lines[0] : "<" + std::to_string(lines.size()) + " lines>";
}

}  // namespace

TEST(MetricsWriter, NumbersReadBackExactly) {
  const double values[] = {0.1, 1.0 / 3.0, 2.0 / 3.0, 1e-300, 5e-324, 1.7976931348623157e308, 123456789012345678.0,
                           -0.0, 3.0, 6.02214076e23, 0.30000000000000004, 1e-7};
  zs::MetricFields fields;
  for (size_t i = 0; i < std::size(values); ++i) fields.add("v" + std::to_string(i), values[i]);
  const Json line = Json::parse(summary_line(fields));
  for (size_t i = 0; i < std::size(values); ++i) {
    const Json& v = line.at("v" + std::to_string(i));
    ASSERT_TRUE(v.is_number_float()) << v.dump();
    const double back = v.get<double>();
    EXPECT_EQ(std::memcmp(&back, &values[i], sizeof(double)), 0) << v.dump() << " did not read back to " << values[i];
  }
  // The shortest form that reads back; a whole double keeps its fraction, an integer has none.
  zs::MetricFields spelled;
  spelled.add("tenth", 0.1).add("three", 3.0).add("steps", 3).add("bytes", int64_t{1} << 40);
  spelled.add("max", uint64_t{18446744073709551615u}).add("nan", std::numeric_limits<double>::quiet_NaN());
  spelled.add("inf", -std::numeric_limits<double>::infinity()).add("ok", true);
  EXPECT_EQ(summary_line(spelled), "{\"summary\":true,\"tenth\":0.1,\"three\":3.0,\"steps\":3,\"bytes\":1099511627776,"
                                   "\"max\":18446744073709551615,\"nan\":null,\"inf\":null,\"ok\":true}");
}

TEST(MetricsWriter, StringsAreEscaped) {
  const std::string nasty = "quote\" backslash\\ newline\n tab\t bell\x07 nul-free \u2713";
  zs::MetricFields fields;
  fields.add("plain", "plain").add("escaped", "a\"b\\c\nd\te\x01").add("utf8", "\u00b5s \u2713");
  fields.add("not utf8", std::string("a\xff")).add("nasty", nasty);
  const std::string line = summary_line(fields);
  EXPECT_EQ(line.substr(0, line.find(",\"nasty\":")),
            "{\"summary\":true,\"plain\":\"plain\",\"escaped\":\"a\\\"b\\\\c\\nd\\te\\u0001\","
            "\"utf8\":\"\u00b5s \u2713\",\"not utf8\":\"a\xEF\xBF\xBD\"");
  const Json v = Json::parse(line);
  EXPECT_EQ(v.at("nasty").get<std::string>(), nasty);
  // Bytes that are not UTF-8 become U+FFFD: the line stays JSON.
  EXPECT_EQ(v.at("not utf8").get<std::string>(), "a\uFFFD");
}

TEST(MetricsWriter, FieldsRefuseARepeatedKey) {
  zs::MetricFields fields;
  fields.add("grad_norm", 1.0);
  EXPECT_EQ(zs::test::message_of<zs::UsageError>([&] { fields.add("grad_norm", 2.0); }),
            "metrics: the key 'grad_norm' added twice to one line");
  zs::StepMetrics m;
  m.step = 1;
  m.extra.add("loss", 2.0);
  EXPECT_EQ(zs::test::message_of<zs::UsageError>([&] { zs::MetricsWriter::step_line(m); }),
            "metrics: a step's extra field repeats the key 'loss' of its line");
  m.extra = zs::MetricFields();
  m.mem = {{"a", 1}, {"a", 2}};
  EXPECT_EQ(zs::test::message_of<zs::UsageError>([&] { zs::MetricsWriter::step_line(m); }),
            "metrics: the category 'a' twice in \"mem\"");
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
    m.extra.add("grad_norm", 0.75).add("clipped", 3);
    w.write_step(m);
    std::vector<std::string> lines = read_lines(path);  // the writer is still open
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0],
              "{\"step\":1,\"loss\":2.302585092994046,\"lr\":3.3333333333333335e-05,\"tokens_per_s\":12345.678,"
              "\"mem\":{\"sharded params\":1048576,\"gathered params\":0},\"comm_bytes\":8589934592,\"grad_norm\":0.75,"
              "\"clipped\":3}");
    EXPECT_EQ(Json::parse(lines[0]).at("lr").get<double>(), 1e-4 / 3);  // exact round trip

    m.step = 2;
    m.loss = std::numeric_limits<double>::infinity();  // a diverged step is still a line
    m.lr.reset();
    m.tokens_per_s.reset();
    m.samples_per_s = 10.5;
    m.mem.clear();
    m.comm_bytes.reset();
    m.extra = zs::MetricFields();
    w.write_step(m);
    zs::MetricFields summary;
    summary.add("steps", 2).add("final_loss", 2.25).add("note", "line\nbreak");
    w.write_summary(summary);
    EXPECT_EQ(w.lines_written(), 3);
    lines = read_lines(path);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[1], "{\"step\":2,\"loss\":null,\"samples_per_s\":10.5}");
    EXPECT_EQ(lines[2], "{\"summary\":true,\"steps\":2,\"final_loss\":2.25,\"note\":\"line\\nbreak\"}");
    zs::MetricFields clash;
    clash.add("summary", false);
    EXPECT_THROW(w.write_summary(clash), zs::UsageError);
    EXPECT_EQ(w.lines_written(), 3);
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
  EXPECT_EQ(lines[2], "{\"step\":1,\"loss\":2.0,\"mem\":{\"gathered params\":0},\"mem_peak\":{\"gathered params\":4096}}");
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
