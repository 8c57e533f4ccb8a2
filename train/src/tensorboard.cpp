// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/tensorboard.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <system_error>

#include "tensorboard.pb.h"
#include "zeroshard/base/crc32c.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string event_file_name() {
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  return "events.out.tfevents." + std::to_string(static_cast<int64_t>(unix_seconds())) + "." +
         (host[0] != '\0' ? host : "localhost") + "." + std::to_string(::getpid()) + ".zeroshard";
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t bytes) {
  const uint32_t crc = crc32c(data, bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string out;
  out.reserve(data.size() + 16);
  put_le(out, data.size(), 8);
  put_le(out, masked_crc32c(out.data(), 8), 4);
  out += data;
  put_le(out, masked_crc32c(data.data(), data.size()), 4);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  ZS_REQUIRE(!dir.empty(), UsageError, "TensorBoardWriter needs a folder");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  ZS_REQUIRE(!ec, IoError, "cannot create the TensorBoard folder '", dir, "': ", ec.message());
  path_ = (std::filesystem::path(dir) / event_file_name()).string();
  fd_ = ZS_CHECK_ERRNO(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644),
                       "cannot open TensorBoard event file '", path_, "' for writing");
  tensorboard::Event header;
  header.set_wall_time(unix_seconds());
  header.set_file_version("brain.Event:2");
  write_record(header.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void TensorBoardWriter::write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event event;
  event.set_wall_time(unix_seconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  write_record(event.SerializeAsString());
}

void TensorBoardWriter::write_record(const std::string& data) {
  const std::string record = tfrecord(data);
  std::lock_guard<std::mutex> lock(mu_);
  size_t done = 0;
  while (done < record.size()) {
    const ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ZS_CHECK_ERRNO(n, "cannot write TensorBoard event file '", path_, "' (event ", events_ + 1, ")");
    done += static_cast<size_t>(n);
  }
  ++events_;
}

int64_t TensorBoardWriter::events_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

}  // namespace zeroshard
