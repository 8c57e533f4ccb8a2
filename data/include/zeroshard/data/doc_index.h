// SPDX-License-Identifier: Apache-2.0
#pragma once
// The document index of a token shard: where each document starts, in a file next to the shard
// (X.bin -> X.docs). zeroshard-data writes it with every shard it makes; `zeroshard-data index`
// derives it from the end-of-text tokens of shards made elsewhere.
//
// Format (little-endian): 8 bytes "ZSDOCS1\n", int64 shard token count, int64 document count D,
// then D + 1 int64 token offsets: 0 first, the shard's token count last, strictly increasing.
// Document d holds tokens [offset(d), offset(d + 1)) of the shard.
// Reads use pread of the entries they need (a binary search reads about log2(D) of them); nothing
// is kept in memory. Thread-safety: immutable after construction; const calls are thread-safe.

#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::data {

// The sidecar file names of a shard: its path with ".bin" (when it ends so) replaced, or with
// the suffix appended.
std::string docs_path_for(const std::string& shard_path);
std::string mask_path_for(const std::string& shard_path);

class DocIndexFile {
 public:
  // Opens and checks `path` against its shard's token count: DataError naming the file for a
  // wrong magic, another token count, a size that disagrees with the document count, or a first or
  // last offset that is not 0 / the token count.
  DocIndexFile(std::string path, int64_t shard_tokens);
  ~DocIndexFile();
  DocIndexFile(DocIndexFile&& other) noexcept;
  DocIndexFile& operator=(DocIndexFile&&) = delete;
  DocIndexFile(const DocIndexFile&) = delete;
  DocIndexFile& operator=(const DocIndexFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_documents() const { return num_documents_; }
  // offset(d) for d in [0, num_documents()]. DataError when the entries are not increasing there.
  int64_t offset(int64_t d) const;
  // The document holding token `token` (in [0, shard tokens)).
  int64_t document_of(int64_t token) const;
  // Appends the offsets in (begin, end) to `out`, ascending: the documents starting inside a range.
  void starts_in(int64_t begin, int64_t end, std::vector<int64_t>* out) const;

 private:
  int64_t entry(int64_t d) const;

  std::string path_;
  int fd_ = -1;
  int64_t shard_tokens_ = 0;
  int64_t num_documents_ = 0;
};

// Writes `path` for a shard of `shard_tokens` tokens whose documents start at `offsets` (0 first,
// then increasing; the shard's end is appended). UsageError for offsets that are not so.
void write_doc_index(const std::string& path, int64_t shard_tokens, const std::vector<int64_t>& starts);

}  // namespace zeroshard::data
