// SPDX-License-Identifier: Apache-2.0
// Documents into llm.c-format token shards with document indexes and loss masks (shard_writer.h).

#include "zeroshard/data/shard_writer.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "zeroshard/base/error.h"
#include "zeroshard/data/doc_index.h"
#include "zeroshard/data/shard_file.h"

namespace zeroshard::data {
namespace {

constexpr int64_t kMaxShardTokens = INT32_MAX;  // llm.c's header holds the count as int32

std::string shard_name(const ShardWriterOptions& o, size_t index) {
  char number[16];
  std::snprintf(number, sizeof(number), "%06zu", index);
  return (std::filesystem::path(o.dir) / (o.prefix + "_" + number + ".bin")).string();
}

void require_no_shards(const ShardWriterOptions& o) {
  const std::string pattern = (std::filesystem::path(o.dir) / (o.prefix + "_*.bin")).string();
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  const std::string first = rc == 0 ? g.gl_pathv[0] : "";
  globfree(&g);
  ZS_REQUIRE(rc != 0, IoError, "'", o.dir, "' already holds shards (", first,
             "); new ones would mix with them: remove them or write to another folder");
}

}  // namespace

ShardWriter::ShardWriter(ShardWriterOptions options) : options_(std::move(options)) {
  ZS_REQUIRE(options_.vocab_size >= 1, UsageError, "ShardWriter: vocab_size = ", options_.vocab_size,
             " must be at least 1");
  ZS_REQUIRE(options_.shard_tokens >= 1, UsageError, "ShardWriter: shard_tokens = ", options_.shard_tokens,
             " must be at least 1");
  bytes_per_token_ = options_.vocab_size <= 65536 ? 2 : 4;
  std::error_code ec;
  std::filesystem::create_directories(options_.dir, ec);
  ZS_REQUIRE(!ec, IoError, "cannot create the folder '", options_.dir, "': ", ec.message());
  require_no_shards(options_);
}

ShardWriter::~ShardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void ShardWriter::open_shard() {
  current_ = {shard_name(options_, written_.size()), 0, 0, 0};
  file_ = std::fopen(current_.path.c_str(), "wb");
  if (file_ == nullptr) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create token shard '", current_.path, "': ", detail::errno_string(err));
  }
  const std::vector<char> header(kLlmcHeaderBytes, 0);  // filled in by close_shard
  std::fwrite(header.data(), 1, header.size(), file_);
  mask_ = std::make_unique<LossMaskWriter>(mask_path_for(current_.path));
  starts_.clear();
}

void ShardWriter::close_shard() {
  int32_t header[3] = {bytes_per_token_ == 2 ? kLlmcMagicUint16 : kLlmcMagicUint32,
                       bytes_per_token_ == 2 ? kLlmcVersionUint16 : kLlmcVersionUint32,
                       static_cast<int32_t>(current_.tokens)};
  const bool ok = std::fseek(file_, 0, SEEK_SET) == 0 && std::fwrite(header, sizeof(header), 1, file_) == 1 &&
                  std::fflush(file_) == 0 && !std::ferror(file_);
  const int err = errno;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  ZS_REQUIRE(ok && closed, IoError, "cannot write token shard '", current_.path, "': ", detail::errno_string(err));
  mask_->finish();
  mask_.reset();
  write_doc_index(docs_path_for(current_.path), current_.tokens, starts_);
  written_.push_back(current_);
}

namespace {

// The smallest and largest id (one pass, no early exit).
std::pair<int32_t, int32_t> id_range(const std::vector<int32_t>& tokens) {
  int32_t lo = tokens[0], hi = tokens[0];
  for (int32_t v : tokens) {
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
  }
  return {lo, hi};
}

template <typename T>
void narrow(const std::vector<int32_t>& tokens, std::vector<uint8_t>* out) {
  out->resize(tokens.size() * sizeof(T));
  T* o = reinterpret_cast<T*>(out->data());  // operator new's alignment suffices for T
  for (size_t i = 0; i < tokens.size(); ++i) o[i] = static_cast<T>(tokens[i]);  // little-endian hosts
}

}  // namespace

void ShardWriter::write_tokens(const std::vector<int32_t>& tokens) {
  const auto [lo, hi] = id_range(tokens);
  ZS_REQUIRE(lo >= 0 && hi < options_.vocab_size, DataError, "token id ", lo < 0 ? lo : hi,
             " is outside the vocabulary of ", options_.vocab_size, " ids");
  if (bytes_per_token_ == 2) {
    narrow<uint16_t>(tokens, &buffer_);
  } else {
    narrow<uint32_t>(tokens, &buffer_);
  }
  ZS_REQUIRE(std::fwrite(buffer_.data(), 1, buffer_.size(), file_) == buffer_.size(), IoError,
             "cannot write token shard '", current_.path, "': ", detail::errno_string(errno));
}

void ShardWriter::add(const Document& doc) {
  if (doc.tokens.empty()) return;
  ZS_REQUIRE(doc.size() <= kMaxShardTokens, DataError, "a document of ", doc.size(),
             " tokens is longer than a token shard can hold (", kMaxShardTokens, ")");
  const int64_t limit = std::min(options_.shard_tokens, kMaxShardTokens);
  if (file_ != nullptr && current_.tokens > 0 && current_.tokens + doc.size() > limit) close_shard();
  if (file_ == nullptr) open_shard();
  write_tokens(doc.tokens);
  mask_->append(doc.trained.data(), doc.size());
  starts_.push_back(current_.tokens);
  current_.tokens += doc.size();
  current_.documents += 1;
  current_.trained_tokens += doc.size() - std::count(doc.trained.begin(), doc.trained.end(), uint8_t{0});
}

std::vector<WrittenShard> ShardWriter::finish() {
  if (file_ != nullptr) close_shard();
  return written_;
}

}  // namespace zeroshard::data
