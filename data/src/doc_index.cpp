// SPDX-License-Identifier: Apache-2.0
// The document index sidecar of a token shard (doc_index.h).

#include "zeroshard/data/doc_index.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "file_io.h"
#include "zeroshard/base/error.h"

namespace zeroshard::data {
namespace {

constexpr char kMagic[8] = {'Z', 'S', 'D', 'O', 'C', 'S', '1', '\n'};
constexpr int64_t kHeaderBytes = 24;

std::string sidecar_path(const std::string& shard, const char* suffix) {
  const std::string bin = ".bin";
  if (shard.size() > bin.size() && shard.compare(shard.size() - bin.size(), bin.size(), bin) == 0) {
    return shard.substr(0, shard.size() - bin.size()) + suffix;
  }
  return shard + suffix;
}

}  // namespace

std::string docs_path_for(const std::string& shard_path) { return sidecar_path(shard_path, ".docs"); }
std::string mask_path_for(const std::string& shard_path) { return sidecar_path(shard_path, ".mask"); }

DocIndexFile::DocIndexFile(std::string path, int64_t shard_tokens)
    : path_(std::move(path)), shard_tokens_(shard_tokens) {
  fd_ = open_for_reading(path_, "document index");
  try {
    const int64_t size = file_size(fd_, path_);
    ZS_REQUIRE(size >= kHeaderBytes, DataError, "document index '", path_, "' holds ", size,
               " bytes, shorter than its ", kHeaderBytes, "-byte header");
    char header[kHeaderBytes];
    read_at(fd_, 0, kHeaderBytes, header, path_);
    ZS_REQUIRE(std::memcmp(header, kMagic, sizeof(kMagic)) == 0, DataError, "document index '", path_,
               "' does not start with ZSDOCS1 (not a zeroshard document index)");
    int64_t tokens = 0;
    std::memcpy(&tokens, header + 8, 8);
    std::memcpy(&num_documents_, header + 16, 8);
    ZS_REQUIRE(tokens == shard_tokens, DataError, "document index '", path_, "' is for a shard of ", tokens,
               " tokens, but its shard holds ", shard_tokens);
    ZS_REQUIRE(num_documents_ >= 0 && size == kHeaderBytes + (num_documents_ + 1) * 8, DataError,
               "document index '", path_, "' holds ", size, " bytes; its header's ", num_documents_,
               " documents need ", kHeaderBytes + (num_documents_ + 1) * 8);
    ZS_REQUIRE(entry(0) == 0 && entry(num_documents_) == shard_tokens, DataError, "document index '", path_,
               "' must begin at offset 0 and end at the shard's ", shard_tokens, " tokens; it spans ", entry(0),
               "..", entry(num_documents_));
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

DocIndexFile::~DocIndexFile() {
  if (fd_ >= 0) ::close(fd_);
}

DocIndexFile::DocIndexFile(DocIndexFile&& o) noexcept
    : path_(std::move(o.path_)),
      fd_(std::exchange(o.fd_, -1)),
      shard_tokens_(o.shard_tokens_),
      num_documents_(o.num_documents_) {}

int64_t DocIndexFile::entry(int64_t d) const {
  int64_t v = 0;
  read_at(fd_, kHeaderBytes + d * 8, 8, &v, path_);
  return v;
}

int64_t DocIndexFile::offset(int64_t d) const {
  ZS_REQUIRE(d >= 0 && d <= num_documents_, UsageError, "document ", d, " is outside document index '", path_,
             "' (", num_documents_, " documents)");
  return entry(d);
}

int64_t DocIndexFile::document_of(int64_t token) const {
  ZS_REQUIRE(token >= 0 && token < shard_tokens_, UsageError, "token ", token, " is outside the shard of '", path_,
             "' (", shard_tokens_, " tokens)");
  // The last d with entry(d) <= token, in [0, num_documents_).
  int64_t lo = 0, hi = num_documents_;  // entry(lo) <= token < entry(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    const int64_t v = entry(mid);
    ZS_REQUIRE(v > 0 && v < shard_tokens_, DataError, "document index '", path_, "': offset ", v, " of document ",
               mid, " is outside (0, ", shard_tokens_, ") (the offsets must increase)");
    (v <= token ? lo : hi) = mid;
  }
  return lo;
}

void DocIndexFile::starts_in(int64_t begin, int64_t end, std::vector<int64_t>* out) const {
  if (begin + 1 >= end) return;
  constexpr int64_t kBlock = 64;  // entries read per pread
  int64_t entries[kBlock];
  int64_t previous = begin;
  for (int64_t d = document_of(begin) + 1; d < num_documents_; d += kBlock) {
    const int64_t n = std::min(kBlock, num_documents_ - d);
    read_at(fd_, kHeaderBytes + d * 8, n * 8, entries, path_);
    for (int64_t k = 0; k < n; ++k) {
      const int64_t v = entries[k];
      ZS_REQUIRE(v > previous, DataError, "document index '", path_, "': offset ", v, " of document ", d + k,
                 " does not come after ", previous, " (the offsets must increase)");
      if (v >= end) return;
      out->push_back(v);
      previous = v;
    }
  }
}

void write_doc_index(const std::string& path, int64_t shard_tokens, const std::vector<int64_t>& starts) {
  ZS_REQUIRE(shard_tokens == 0 ? starts.empty() : (!starts.empty() && starts[0] == 0), UsageError,
             "write_doc_index: the first document must start at token 0");
  std::vector<int64_t> entries(starts);
  entries.push_back(shard_tokens);
  for (size_t i = 1; i < entries.size(); ++i) {
    ZS_REQUIRE(entries[i] > entries[i - 1], UsageError, "write_doc_index: document ", i, " of '", path,
               "' starts at ", entries[i], ", not after ", entries[i - 1], " (documents are not empty)");
  }
  const int64_t documents = static_cast<int64_t>(starts.size());
  std::string header(kMagic, sizeof(kMagic));
  header.append(reinterpret_cast<const char*>(&shard_tokens), 8);
  header.append(reinterpret_cast<const char*>(&documents), 8);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    ZS_THROW(IoError, "cannot create document index '", path, "': ", detail::errno_string(err));
  }
  try {
    write_at(fd, 0, kHeaderBytes, header.data(), path);
    write_at(fd, kHeaderBytes, static_cast<int64_t>(entries.size()) * 8, entries.data(), path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ZS_CHECK_ERRNO(::close(fd), "cannot close '", path, "'");
}

}  // namespace zeroshard::data
