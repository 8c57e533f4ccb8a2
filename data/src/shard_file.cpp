// SPDX-License-Identifier: Apache-2.0
// One memory-mapped file of tokens: llm.c's shard format or a headerless uint16/uint32 file
// (shard_file.h).

#include "zeroshard/data/shard_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "mapped_range.h"
#include "zeroshard/base/error.h"

namespace zeroshard::data {

TokenFormat parse_token_format(const std::string& text, const std::string& option) {
  if (text == "llmc") return TokenFormat::kLlmc;
  if (text == "uint16") return TokenFormat::kRawUint16;
  if (text == "uint32") return TokenFormat::kRawUint32;
  ZS_THROW(UsageError, option, " '", text, "' is not a token file format (llmc, uint16, uint32)");
}

const char* to_string(TokenFormat format) {
  switch (format) {
    case TokenFormat::kLlmc: return "llmc";
    case TokenFormat::kRawUint16: return "uint16";
    case TokenFormat::kRawUint32: return "uint32";
  }
  return "?";
}

ShardFile::ShardFile(std::string path, TokenFormat format) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    ZS_THROW(IoError, "cannot open token shard '", path_, "': ", detail::errno_string(err));
  }
  struct stat st {};
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    ZS_THROW(IoError, "token shard '", path_, "' is not a regular file");
  }
  file_bytes_ = st.st_size;
  try {
    if (format == TokenFormat::kLlmc) {
      check_llmc_header();
    } else {
      bytes_per_token_ = format == TokenFormat::kRawUint16 ? 2 : 4;
      check_raw_size();
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

ShardFile::~ShardFile() {
  if (fd_ >= 0) ::close(fd_);
}

ShardFile::ShardFile(ShardFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      file_bytes_(o.file_bytes_),
      num_tokens_(o.num_tokens_),
      bytes_per_token_(o.bytes_per_token_),
      data_offset_(o.data_offset_),
      magic_(o.magic_),
      version_(o.version_) {}

void ShardFile::check_llmc_header() {
  ZS_REQUIRE(file_bytes_ >= kLlmcHeaderBytes, DataError, "token shard '", path_, "' is not an llm.c token shard: ",
             file_bytes_, " bytes, shorter than the ", kLlmcHeaderBytes, "-byte header");
  int32_t header[3];
  MappedRange map(fd_, 0, sizeof(header), path_);
  std::memcpy(header, map.data(), sizeof(header));
  magic_ = header[0];
  version_ = header[1];
  ZS_REQUIRE(magic_ == kLlmcMagicUint16 || magic_ == kLlmcMagicUint32, DataError, "token shard '", path_,
             "' is not an llm.c token shard: magic ", magic_, " at byte 0, expected ", kLlmcMagicUint16,
             " (uint16 tokens) or ", kLlmcMagicUint32,
             " (uint32 tokens); a headerless token file needs the format uint16 or uint32");
  bytes_per_token_ = magic_ == kLlmcMagicUint16 ? 2 : 4;
  const int32_t expected_version = magic_ == kLlmcMagicUint16 ? kLlmcVersionUint16 : kLlmcVersionUint32;
  ZS_REQUIRE(version_ == expected_version, DataError, "token shard '", path_, "' has llm.c magic ", magic_,
             " with version ", version_, "; that magic goes with version ", expected_version);
  ZS_REQUIRE(header[2] >= 0, DataError, "token shard '", path_, "' has a negative token count (", header[2],
             ") in its header");
  num_tokens_ = header[2];
  data_offset_ = kLlmcHeaderBytes;
  const int64_t expected = num_tokens_ * bytes_per_token_;
  const int64_t held = file_bytes_ - data_offset_;
  ZS_REQUIRE(held >= expected, DataError, "token shard '", path_, "' is truncated: its header says ", num_tokens_,
             " tokens (", expected, " bytes after the ", kLlmcHeaderBytes, "-byte header) but the file holds ", held,
             " bytes after the header");
  ZS_REQUIRE(held == expected, DataError, "token shard '", path_, "' has ", held - expected,
             " bytes after its last token (its header says ", num_tokens_, " tokens, ", expected, " bytes after the ",
             kLlmcHeaderBytes, "-byte header)");
}

void ShardFile::check_raw_size() {
  ZS_REQUIRE(file_bytes_ % bytes_per_token_ == 0, DataError, "token file '", path_, "' holds ", file_bytes_,
             " bytes, not a whole number of ", bytes_per_token_ == 2 ? "uint16" : "uint32", " tokens (",
             bytes_per_token_, " bytes each)");
  num_tokens_ = file_bytes_ / bytes_per_token_;
}

namespace {

[[noreturn]] void throw_outside_vocabulary(const std::string& path, uint64_t id, int64_t offset, int64_t vocab_size) {
  if (vocab_size <= 0) {
    ZS_THROW(DataError, "token shard '", path, "': token id ", id, " at token offset ", offset,
             " is larger than any id zeroshard reads (", INT32_MAX, ")");
  }
  ZS_THROW(DataError, "token shard '", path, "': token id ", id, " at token offset ", offset,
           " is outside the model's vocabulary (", vocab_size, " ids: 0..", vocab_size - 1, ")");
}

template <typename T>
void copy_checked(const uint8_t* bytes, int64_t count, int32_t* out, int64_t vocab_size, int64_t first_offset,
                  const std::string& path) {
  const uint64_t limit = std::min<uint64_t>(vocab_size > 0 ? static_cast<uint64_t>(vocab_size) : UINT64_MAX,
                                            uint64_t{INT32_MAX} + 1);
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, bytes + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    if (static_cast<uint64_t>(v) >= limit) throw_outside_vocabulary(path, v, first_offset + i, vocab_size);
    out[i] = static_cast<int32_t>(v);
  }
}

}  // namespace

void ShardFile::read(int64_t begin, int64_t count, int32_t* out, int64_t vocab_size) const {
  ZS_REQUIRE(begin >= 0 && count >= 0 && begin + count <= num_tokens_, UsageError, "tokens ", begin, "..",
             begin + count, " are outside token shard '", path_, "' (", num_tokens_, " tokens)");
  const int64_t window = kMapWindowBytes / bytes_per_token_;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(window, count - done);
    const int64_t first = begin + done;
    MappedRange map(fd_, data_offset_ + first * bytes_per_token_, n * bytes_per_token_, path_);
    if (bytes_per_token_ == 2) {
      copy_checked<uint16_t>(map.data(), n, out + done, vocab_size, first, path_);
    } else {
      copy_checked<uint32_t>(map.data(), n, out + done, vocab_size, first, path_);
    }
    done += n;
  }
}

}  // namespace zeroshard::data
