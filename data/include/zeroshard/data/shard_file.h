// SPDX-License-Identifier: Apache-2.0
#pragma once
// ShardFile: one file of pre-tokenized data, read by memory-mapping only the pages a read needs.
//
//   ShardFile f("train_000001.bin", TokenFormat::kLlmc);
//   std::vector<int32_t> ids(1025);
//   f.read(/*begin=*/4096, 1025, ids.data(), /*vocab_size=*/50257);
//
// Formats: llm.c's token shards (256 little-endian int32 of header: magic, version, token count;
// then the tokens: magic 20240520 / version 1 for uint16 tokens, 20240801 / version 7 for uint32)
// and headerless little-endian uint16 or uint32 files (nanoGPT's train.bin). The constructor checks
// the header and the file size; a read copies tokens out, checking each id against the vocabulary.
// A read maps at most kMapWindowBytes at a time and unmaps it before returning: memory stays flat
// however large the file. Thread-safety: immutable after construction; read() is thread-safe.

#include <cstdint>
#include <string>

namespace zeroshard::data {

enum class TokenFormat {
  kLlmc,       // llm.c header; uint16 or uint32 tokens as its magic says
  kRawUint16,  // no header, uint16 tokens
  kRawUint32,  // no header, uint32 tokens
};

// llm.c's header (dev/data/data_common.py): 256 int32; [0] magic, [1] version, [2] token count.
inline constexpr int32_t kLlmcMagicUint16 = 20240520;  // GPT-2 shards, uint16 tokens
inline constexpr int32_t kLlmcVersionUint16 = 1;
inline constexpr int32_t kLlmcMagicUint32 = 20240801;  // Llama 3 shards, uint32 tokens
inline constexpr int32_t kLlmcVersionUint32 = 7;
inline constexpr int64_t kLlmcHeaderInts = 256;
inline constexpr int64_t kLlmcHeaderBytes = kLlmcHeaderInts * 4;
// The most bytes a read maps at once.
inline constexpr int64_t kMapWindowBytes = int64_t{16} << 20;

// "llmc", "uint16" or "uint32"; UsageError naming `option` and the choices otherwise.
TokenFormat parse_token_format(const std::string& text, const std::string& option);
const char* to_string(TokenFormat format);

class ShardFile {
 public:
  // Opens `path` and checks it. IoError when it cannot be opened; DataError naming the path for a
  // wrong magic or version, a header count that disagrees with the file size (truncated, or bytes
  // after the tokens), or a raw file whose size is not a whole number of tokens.
  ShardFile(std::string path, TokenFormat format);
  ~ShardFile();
  ShardFile(ShardFile&& other) noexcept;
  ShardFile& operator=(ShardFile&&) = delete;
  ShardFile(const ShardFile&) = delete;
  ShardFile& operator=(const ShardFile&) = delete;

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return num_tokens_; }
  int bytes_per_token() const { return bytes_per_token_; }
  int64_t data_offset() const { return data_offset_; }  // bytes before the first token
  int64_t file_bytes() const { return file_bytes_; }
  bool has_header() const { return data_offset_ > 0; }
  int32_t magic() const { return magic_; }      // llm.c files; 0 for raw ones
  int32_t version() const { return version_; }  // llm.c files; 0 for raw ones

  // Copies tokens [begin, begin + count) to `out`. With vocab_size > 0, a token id >= vocab_size is
  // a DataError naming the file, the id and its token offset in the file. UsageError for a range
  // outside [0, num_tokens()).
  void read(int64_t begin, int64_t count, int32_t* out, int64_t vocab_size) const;

 private:
  void check_llmc_header();
  void check_raw_size();

  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  int64_t num_tokens_ = 0;
  int bytes_per_token_ = 2;
  int64_t data_offset_ = 0;
  int32_t magic_ = 0;
  int32_t version_ = 0;
};

}  // namespace zeroshard::data
