// SPDX-License-Identifier: Apache-2.0
// TensorBoardWriter (zeroshard/train/tensorboard.h), read back by an independent reader: the
// Python script tests/tools/read_tfevents.py (standard library only: its own CRC-32C and a
// hand-written protobuf wire parser), which checks both CRCs of every record.

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "common/test_util.h"
#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"
#include "zeroshard/train/tensorboard.h"

namespace zs = zeroshard;
namespace fs = std::filesystem;

namespace {

struct ReaderRun {
  int status;
  std::string out;  // stdout and stderr
};

// The reader on `path` with `args`.
ReaderRun read_back(const std::string& path, const std::string& args) {
  const std::string cmd = std::string(ZS_PYTHON) + " " + ZS_READER + " '" + path + "' " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  std::string out;
  char buf[4096];
  size_t n;
  while (p != nullptr && (n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  const int status = p == nullptr ? -1 : ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string temp_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("zs_tb_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  return dir.string();
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST(TensorBoard, MaskedCrcIsTensorBoards) {
  // CRC-32C("123456789") = 0xe3069283 (the check value); masked: rotate right 15, add 0xa282ead8.
  EXPECT_EQ(zs::crc32c("123456789", 9), 0xe3069283u);
  const uint32_t c = 0xe3069283u;
  EXPECT_EQ(zs::masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xa282ead8u);
  const std::string r = zs::tfrecord("abc");
  ASSERT_EQ(r.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(r.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(r.substr(12, 3), "abc");
}

TEST(TensorBoard, AnIndependentReaderReadsTheValuesBack) {
  const std::string dir = temp_dir("values") + "/nested";
  std::string path;
  {
    zs::TensorBoardWriter w(dir);  // creates the folders
    path = w.path();
    w.write_scalars(1, {{"train/loss", 2.5}, {"train/lr", 3e-4}, {"memory_mib/sharded_params", 12.75}});
    w.write_scalar(2, "eval/val_loss", 1.2345678);
    w.write_scalars(int64_t{1} << 40, {{"train/loss", std::numeric_limits<double>::quiet_NaN()}, {"neg", -7.0}});
    EXPECT_EQ(w.events_written(), 4);  // the file_version event and three
  }
  EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u) << path;
  const ReaderRun r = read_back(dir, "--json --expect-tag train/loss --expect-tag eval/val_loss");
  ASSERT_EQ(r.status, 0) << r.out;
  const nlohmann::json doc = nlohmann::json::parse(r.out);
  const nlohmann::json& events = doc.at("events");
  ASSERT_EQ(events.size(), 4u) << r.out;
  EXPECT_EQ(events[0].at("file_version").get<std::string>(), "brain.Event:2");
  EXPECT_GT(events[1].at("wall_time").get<double>(), 1.6e9);  // seconds since 1970, in this decade
  const std::vector<std::pair<int64_t, std::vector<std::pair<std::string, double>>>> want = {
      {1, {{"train/loss", 2.5}, {"train/lr", 3e-4}, {"memory_mib/sharded_params", 12.75}}},
      {2, {{"eval/val_loss", 1.2345678}}},
      {int64_t{1} << 40, {{"train/loss", NAN}, {"neg", -7.0}}}};
  for (size_t i = 0; i < want.size(); ++i) {
    const nlohmann::json& e = events[i + 1];
    EXPECT_EQ(e.at("step").get<int64_t>(), want[i].first);
    const nlohmann::json& values = e.at("values");
    ASSERT_EQ(values.size(), want[i].second.size()) << r.out;
    for (size_t j = 0; j < values.size(); ++j) {
      EXPECT_EQ(values[j][0].get<std::string>(), want[i].second[j].first);
      const double v = want[i].second[j].second;
      if (std::isnan(v)) {
        EXPECT_TRUE(values[j][1].is_null()) << "NaN reads back as NaN (null in the reader's JSON)";
      } else {
        EXPECT_EQ(values[j][1].get<double>(), static_cast<double>(static_cast<float>(v)));  // float32 as TensorBoard
      }
    }
  }
  fs::remove_all(fs::path(dir).parent_path());
}

TEST(TensorBoard, TheReaderCatchesCorruption) {
  const std::string dir = temp_dir("corrupt");
  std::string path;
  {
    zs::TensorBoardWriter w(dir);
    path = w.path();
    w.write_scalar(5, "train/loss", 1.0);
  }
  const std::string good = file_bytes(path);
  std::string bad = good;
  bad[bad.size() - 6] ^= 0x01;  // a bit of the last record's data
  write_bytes(path, bad);
  ReaderRun r = read_back(path, "");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("the data's CRC does not match"), std::string::npos) << r.out;
  bad = good;
  bad[0] ^= 0x01;  // the first record's length
  write_bytes(path, bad);
  r = read_back(path, "");
  EXPECT_NE(r.out.find("offset 0: the length's CRC does not match"), std::string::npos) << r.out;
  write_bytes(path, good.substr(0, good.size() - 2));
  r = read_back(path, "");
  EXPECT_NE(r.out.find("truncated record"), std::string::npos) << r.out;
  write_bytes(path, good);
  r = read_back(path, "--expect-tag eval/val_loss");
  EXPECT_NE(r.out.find("no eval/val_loss"), std::string::npos) << r.out;
  EXPECT_EQ(read_back(path, "--expect-steps 5").status, 0);
  fs::remove_all(dir);
}

TEST(TensorBoard, AnUnwritableFolderIsAnErrorNamingIt) {
  try {
    zs::TensorBoardWriter w("/proc/zs-no-such-folder/tb");
    FAIL() << "no error";
  } catch (const zs::IoError& e) {
    EXPECT_NE(std::string(e.what()).find("'/proc/zs-no-such-folder/tb'"), std::string::npos) << e.what();
  }
}
