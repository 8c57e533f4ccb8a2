// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/text.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace zeroshard {
namespace fs = std::filesystem;

namespace {

std::string missing_hint(const std::string& package) {
  if (package.empty()) return "";
  return detail::concat(". The default corpus, ", kFortunesDir, ", is installed by the Debian package '", package,
                        "' (apt-get install ", package, "); or point data.path at a text file or a directory of them");
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) ZS_THROW(IoError, "cannot open text file '", p.string(), "': ", detail::errno_string(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) ZS_THROW(IoError, "error reading text file '", p.string(), "': ", detail::errno_string(errno));
  return bytes;
}

std::vector<fs::path> corpus_files(const std::string& path, const std::string& package) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) {
    ZS_THROW(IoError, "text corpus '", path, "' does not exist", missing_hint(package));
  }
  if (fs::is_regular_file(st)) return {fs::path(path)};
  ZS_REQUIRE(fs::is_directory(st), IoError, "text corpus '", path, "' is neither a file nor a directory");
  std::vector<fs::path> files;
  fs::directory_iterator it(path, ec);
  if (ec) ZS_THROW(IoError, "cannot list text corpus directory '", path, "': ", ec.message());
  for (const fs::directory_entry& e : it) {
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  ZS_REQUIRE(!files.empty(), DataError, "text corpus directory '", path,
             "' holds no text files (regular files other than *.dat)", missing_hint(package));
  return files;
}

at::Tensor to_tensor(const std::string& bytes) {
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  if (!bytes.empty()) std::memcpy(t.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  return t;
}

}  // namespace

at::Tensor ByteTokenizer::encode(const std::string& text) { return to_tensor(text).to(at::kLong); }

std::string ByteTokenizer::decode(const at::Tensor& tokens) {
  at::Tensor t = tokens.reshape({-1}).to(at::kLong).contiguous();
  const int64_t* p = t.data_ptr<int64_t>();
  std::string out(static_cast<size_t>(t.numel()), '\0');
  for (int64_t i = 0; i < t.numel(); ++i) {
    ZS_REQUIRE(p[i] >= 0 && p[i] < kVocabSize, UsageError, "ByteTokenizer::decode: token ", p[i], " at position ", i,
               " is not a byte (vocabulary [0, 256))");
    out[static_cast<size_t>(i)] = static_cast<char>(p[i]);
  }
  return out;
}

TextCorpus load_text_corpus(const std::string& path, double val_fraction, const std::string& package_hint) {
  ZS_REQUIRE(val_fraction >= 0 && val_fraction < 1, UsageError, "load_text_corpus: val_fraction = ", val_fraction,
             " must be in [0, 1)");
  TextCorpus corpus;
  std::string train, val;
  for (const fs::path& f : corpus_files(path, package_hint)) {
    const std::string bytes = read_file(f);
    const size_t n = bytes.size();
    size_t cut = n - static_cast<size_t>(static_cast<double>(n) * val_fraction);
    // The validation part starts at a line start at or before the cut (unless the file has none).
    size_t line_start = cut;
    while (line_start > 0 && line_start < n && bytes[line_start - 1] != '\n') --line_start;
    if (line_start > 0) cut = line_start;
    train.append(bytes, 0, cut);
    val.append(bytes, cut, std::string::npos);
    corpus.files.push_back(f.string());
  }
  ZS_REQUIRE(!train.empty(), DataError, "text corpus '", path, "' is empty (", corpus.files.size(), " file(s))");
  ZS_REQUIRE(val_fraction == 0 || !val.empty(), DataError, "text corpus '", path,
             "' is too small to hold out a validation part of ", val_fraction, " (", train.size(), " bytes)");
  corpus.train = to_tensor(train);
  corpus.val = to_tensor(val);
  return corpus;
}

TokenWindowDataset::TokenWindowDataset(at::Tensor tokens, int64_t seq_len, int64_t stride)
    : tokens_(std::move(tokens)), seq_len_(seq_len), stride_(stride == 0 ? seq_len : stride) {
  ZS_REQUIRE(seq_len >= 1, UsageError, "TokenWindowDataset: seq_len = ", seq_len, " must be >= 1");
  ZS_REQUIRE(stride >= 0, UsageError, "TokenWindowDataset: stride = ", stride, " must be >= 0 (0: seq_len)");
  ZS_REQUIRE(tokens_.defined() && tokens_.dim() == 1 &&
                 (tokens_.scalar_type() == at::kByte || tokens_.scalar_type() == at::kLong),
             UsageError, "TokenWindowDataset: tokens must be a 1-D uint8 or int64 tensor");
  const int64_t n = tokens_.numel();
  ZS_REQUIRE(n >= seq_len + 1, DataError, "TokenWindowDataset: ", n, " tokens hold no window of seq_len + 1 = ",
             seq_len + 1, " tokens; use a shorter seq_len or more text");
  size_ = (n - seq_len - 1) / stride_ + 1;
  tokens_ = tokens_.contiguous();
}

Example TokenWindowDataset::get(int64_t index) const {
  ZS_REQUIRE(index >= 0 && index < size_, UsageError, "TokenWindowDataset: index ", index, " is outside [0, ", size_,
             ")");
  at::Tensor w = tokens_.narrow(0, index * stride_, seq_len_ + 1).to(at::kLong);
  return {w.narrow(0, 0, seq_len_), w.narrow(0, 1, seq_len_)};
}

}  // namespace zeroshard
