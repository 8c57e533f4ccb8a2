// SPDX-License-Identifier: Apache-2.0
#pragma once
// Byte-level text data: a corpus read from files, split into training and held-out validation
// bytes, and a dataset of fixed-length token windows over either part for next-token prediction.
//
//   zeroshard::TextCorpus corpus = zeroshard::load_text_corpus("/usr/share/games/fortunes", 0.05);
//   auto train = std::make_shared<zeroshard::TokenWindowDataset>(corpus.train, /*seq_len=*/128);
//   // train->get(i): data = tokens [i*128, i*128+128), target = the same window shifted by one.
//
// Tokens are bytes (vocabulary 256): every file is valid input, UTF-8 included (a multi-byte
// character is several tokens). Thread-safety: plain values and immutable tensors; concurrent
// const calls are safe.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "zeroshard/train/dataset.h"

namespace zeroshard {

// The default corpus: the fortune cookie files of Debian's `fortunes` package.
inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";
inline constexpr const char* kFortunesPackage = "fortunes";

struct ByteTokenizer {
  static constexpr int64_t kVocabSize = 256;
  // One int64 token per byte.
  static at::Tensor encode(const std::string& text);
  // Bytes of the tokens (int64 or uint8, any shape, read in order); UsageError for a token outside
  // [0, 256).
  static std::string decode(const at::Tensor& tokens);
};

struct TextCorpus {
  at::Tensor train;                // uint8 [n_train]
  at::Tensor val;                  // uint8 [n_val]
  std::vector<std::string> files;  // the files read, in reading order
};

// Reads `path`: a text file, or a directory whose regular files (not symlinks, not subdirectories,
// not `*.dat` index files such as fortune's strfile tables) are read in name order. From each file
// the last `val_fraction` of its bytes, extended back to the start of its first line (when the file
// has a line break before the cut), goes to `val`, the rest to `train`, so both parts sample every
// file. Throws IoError when the path is missing or unreadable, naming it
// and the Debian package `package_hint` that installs the default corpus (kFortunesDir /
// kFortunesPackage); DataError when there is no text or a part is empty; UsageError for a
// val_fraction outside [0, 1).
TextCorpus load_text_corpus(const std::string& path, double val_fraction,
                            const std::string& package_hint = kFortunesPackage);

// Example i: data = tokens[i*stride, i*stride + seq_len) and target = tokens[i*stride + 1,
// i*stride + seq_len + 1), both int64 [seq_len]. size() = windows that fit entirely.
class TokenWindowDataset : public Dataset {
 public:
  // `tokens`: uint8 or int64, 1-D. stride 0 means seq_len (non-overlapping windows). Throws
  // DataError when not even one window fits, UsageError for seq_len < 1 or a stride < 0.
  TokenWindowDataset(at::Tensor tokens, int64_t seq_len, int64_t stride = 0);
  int64_t size() const override { return size_; }
  Example get(int64_t index) const override;
  int64_t seq_len() const { return seq_len_; }

 private:
  at::Tensor tokens_;
  int64_t seq_len_;
  int64_t stride_;
  int64_t size_;
};

}  // namespace zeroshard
