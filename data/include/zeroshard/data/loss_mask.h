// SPDX-License-Identifier: Apache-2.0
#pragma once
// The loss mask of a token shard: which tokens are training targets, one bit per token, in a file
// next to the shard (X.bin -> X.mask). zeroshard-data writes it with every shard it makes (prompt
// and non-assistant tokens 0, the rest 1); a shard without one trains on every token.
//
// Format (little-endian): 8 bytes "ZSMASK1\n", int64 shard token count n, then ceil(n / 8) bytes:
// bit (t % 8) of byte t / 8 (least significant first) is 1 when token t is a loss target, i.e. the
// model is trained to predict token t from the tokens before it.
// Thread-safety: LossMaskFile is immutable after construction (pread; const calls thread-safe);
// a LossMaskWriter belongs to one thread.

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace zeroshard::data {

class LossMaskFile {
 public:
  // DataError naming the file for a wrong magic, another token count, or a wrong size.
  LossMaskFile(std::string path, int64_t shard_tokens);
  ~LossMaskFile();
  LossMaskFile(LossMaskFile&& other) noexcept;
  LossMaskFile& operator=(LossMaskFile&&) = delete;
  LossMaskFile(const LossMaskFile&) = delete;
  LossMaskFile& operator=(const LossMaskFile&) = delete;

  const std::string& path() const { return path_; }
  // out[i] = 1 when token begin + i is a loss target, else 0.
  void read(int64_t begin, int64_t count, uint8_t* out) const;

 private:
  std::string path_;
  int fd_ = -1;
  int64_t shard_tokens_ = 0;
};

class LossMaskWriter {
 public:
  // Creates `path` (IoError when it cannot).
  explicit LossMaskWriter(std::string path);
  ~LossMaskWriter();  // closes without finishing when finish() was not called
  LossMaskWriter(const LossMaskWriter&) = delete;
  LossMaskWriter& operator=(const LossMaskWriter&) = delete;

  // Appends the bits of `count` tokens (nonzero = loss target).
  void append(const uint8_t* trained, int64_t count);
  // Writes the last partial byte and the token count; closes the file.
  void finish();
  int64_t tokens() const { return tokens_; }

 private:
  std::string path_;
  FILE* file_ = nullptr;
  int64_t tokens_ = 0;
  uint8_t pending_ = 0;  // bits of the byte being filled
  std::vector<uint8_t> bytes_;  // whole bytes of one append()
};

}  // namespace zeroshard::data
