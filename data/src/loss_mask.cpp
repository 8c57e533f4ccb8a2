// SPDX-License-Identifier: Apache-2.0
// The loss mask sidecar of a token shard (loss_mask.h).

#include "zeroshard/data/loss_mask.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "file_io.h"
#include "zeroshard/base/error.h"

namespace zeroshard::data {
namespace {

constexpr char kMagic[8] = {'Z', 'S', 'M', 'A', 'S', 'K', '1', '\n'};
constexpr int64_t kHeaderBytes = 16;

}  // namespace

LossMaskFile::LossMaskFile(std::string path, int64_t shard_tokens)
    : path_(std::move(path)), shard_tokens_(shard_tokens) {
  fd_ = open_for_reading(path_, "loss mask");
  try {
    const int64_t size = file_size(fd_, path_);
    ZS_REQUIRE(size >= kHeaderBytes, DataError, "loss mask '", path_, "' holds ", size, " bytes, shorter than its ",
               kHeaderBytes, "-byte header");
    char header[kHeaderBytes];
    read_at(fd_, 0, kHeaderBytes, header, path_);
    ZS_REQUIRE(std::memcmp(header, kMagic, sizeof(kMagic)) == 0, DataError, "loss mask '", path_,
               "' does not start with ZSMASK1 (not a zeroshard loss mask)");
    int64_t tokens = 0;
    std::memcpy(&tokens, header + 8, 8);
    ZS_REQUIRE(tokens == shard_tokens, DataError, "loss mask '", path_, "' is for a shard of ", tokens,
               " tokens, but its shard holds ", shard_tokens);
    ZS_REQUIRE(size == kHeaderBytes + (tokens + 7) / 8, DataError, "loss mask '", path_, "' holds ", size,
               " bytes; ", tokens, " tokens need ", kHeaderBytes + (tokens + 7) / 8);
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

LossMaskFile::~LossMaskFile() {
  if (fd_ >= 0) ::close(fd_);
}

LossMaskFile::LossMaskFile(LossMaskFile&& o) noexcept
    : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)), shard_tokens_(o.shard_tokens_) {}

void LossMaskFile::read(int64_t begin, int64_t count, uint8_t* out) const {
  ZS_REQUIRE(begin >= 0 && count >= 0 && begin + count <= shard_tokens_, UsageError, "tokens ", begin, "..",
             begin + count, " are outside loss mask '", path_, "' (", shard_tokens_, " tokens)");
  if (count == 0) return;
  const int64_t first = begin / 8, last = (begin + count - 1) / 8;
  std::vector<uint8_t> bytes(static_cast<size_t>(last - first + 1));
  read_at(fd_, kHeaderBytes + first, static_cast<int64_t>(bytes.size()), bytes.data(), path_);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = begin + i;
    out[i] = (bytes[static_cast<size_t>(t / 8 - first)] >> (t % 8)) & 1;
  }
}

LossMaskWriter::LossMaskWriter(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create loss mask '", path_, "': ", detail::errno_string(err));
  }
  const int64_t zero = 0;
  std::fwrite(kMagic, 1, sizeof(kMagic), file_);
  std::fwrite(&zero, 8, 1, file_);  // the token count, written by finish()
}

LossMaskWriter::~LossMaskWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void LossMaskWriter::append(const uint8_t* trained, int64_t count) {
  ZS_REQUIRE(file_ != nullptr, UsageError, "LossMaskWriter::append after finish() ('", path_, "')");
  bytes_.clear();
  auto one = [&](uint8_t t) {
    if (t) pending_ |= static_cast<uint8_t>(1u << (tokens_ % 8));
    if (++tokens_ % 8 == 0) {
      bytes_.push_back(pending_);
      pending_ = 0;
    }
  };
  int64_t i = 0;
  for (; i < count && tokens_ % 8 != 0; ++i) one(trained[i]);
  for (; i + 8 <= count; i += 8, tokens_ += 8) {  // byte-aligned: eight at a time
    uint8_t b = 0;
    for (int k = 0; k < 8; ++k) b |= static_cast<uint8_t>((trained[i + k] != 0) << k);
    bytes_.push_back(b);
  }
  for (; i < count; ++i) one(trained[i]);
  // Nothing to write (an empty record, or fewer than 8 tokens in all so far): fwrite's buffer must
  // not be null, which an empty vector's data() may be.
  if (bytes_.empty()) return;
  ZS_REQUIRE(std::fwrite(bytes_.data(), 1, bytes_.size(), file_) == bytes_.size(), IoError,
             "cannot write loss mask '", path_, "': ", detail::errno_string(errno));
}

void LossMaskWriter::finish() {
  ZS_REQUIRE(file_ != nullptr, UsageError, "LossMaskWriter::finish called twice ('", path_, "')");
  if (tokens_ % 8 != 0) std::fputc(pending_, file_);
  const bool ok = std::fseek(file_, 8, SEEK_SET) == 0 && std::fwrite(&tokens_, 8, 1, file_) == 1 &&
                  std::fflush(file_) == 0 && !std::ferror(file_);
  const int err = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  ZS_REQUIRE(ok && closed, IoError, "cannot write loss mask '", path_, "': ", detail::errno_string(err));
}

}  // namespace zeroshard::data
