// SPDX-License-Identifier: Apache-2.0
// Datasets: the byte-level text corpus and its windows, the IDX reader, Fashion-MNIST, and the
// errors a user meets when files are missing or malformed.

#include <ATen/ops/bincount.h>
#include <ATen/ops/full.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "zeroshard/train/images.h"
#include "zeroshard/train/lm_data.h"
#include "zeroshard/train/text.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
namespace fs = std::filesystem;

namespace {

// A fresh directory per test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("zs_test_datasets_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

std::string idx_bytes(unsigned char type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s{'\0', '\0', static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift : {24, 16, 8, 0}) s.push_back(static_cast<char>((d >> shift) & 0xff));
  }
  return s + data;
}

void write_gz(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  gzclose(f);
}

TEST(TextCorpus, SplitsEveryFileAtALineStartAndSkipsIndexFiles) {
  TempDir d;
  d.file("b", "line one\nline two\nline three\nline four\n");
  d.file("a", "alpha\nbeta\ngamma\ndelta\n");
  d.file("a.dat", "strfile index: not text");
  fs::create_symlink(d.path / "a", d.path / "a.u8");
  zs::TextCorpus c = zs::load_text_corpus(d.path.string(), 0.25);
  ASSERT_EQ(c.files.size(), 2u) << "*.dat and symlinks are skipped";
  EXPECT_EQ(fs::path(c.files[0]).filename(), "a");
  EXPECT_EQ(fs::path(c.files[1]).filename(), "b");
  // a: 23 bytes, cut at 23 - 5 = 18 -> back to the line start 17: "delta\n".
  // b: 39 bytes, cut at 39 - 9 = 30 -> back to the line start 29: "line four\n".
  EXPECT_EQ(zs::ByteTokenizer::decode(c.train), "alpha\nbeta\ngamma\nline one\nline two\nline three\n");
  EXPECT_EQ(zs::ByteTokenizer::decode(c.val), "delta\nline four\n");
  // No validation part at all.
  zs::TextCorpus whole = zs::load_text_corpus((d.path / "a").string(), 0.0);
  EXPECT_EQ(whole.train.numel(), 23);
  EXPECT_EQ(whole.val.numel(), 0);
}

TEST(TextCorpus, MissingCorpusNamesThePathAndThePackage) {
  const std::string w = error_text_of<zs::IoError>([] { zs::load_text_corpus("/nonexistent/zs-corpus", 0.1); });
  EXPECT_NE(w.find("text corpus '/nonexistent/zs-corpus' does not exist"), std::string::npos) << w;
  EXPECT_NE(w.find("Debian package 'fortunes'"), std::string::npos) << w;
  EXPECT_NE(w.find("apt-get install fortunes"), std::string::npos) << w;
  EXPECT_NE(w.find("/usr/share/games/fortunes"), std::string::npos) << w;
}

TEST(TextCorpus, EmptyOrTooSmallCorpusIsADataError) {
  TempDir d;
  const std::string empty_dir = error_text_of<zs::DataError>([&] { zs::load_text_corpus(d.path.string(), 0.1); });
  EXPECT_NE(empty_dir.find("holds no text files"), std::string::npos) << empty_dir;
  const std::string tiny = d.file("tiny", "x");
  const std::string w = error_text_of<zs::DataError>([&] { zs::load_text_corpus(tiny, 0.1); });
  EXPECT_NE(w.find("too small to hold out a validation part"), std::string::npos) << w;
  EXPECT_THROW(zs::load_text_corpus(tiny, 1.0), zs::UsageError);
}

TEST(TextCorpus, TokenWindowsAreShiftedByOne) {
  at::Tensor tokens = zs::ByteTokenizer::encode("abcdefghij");  // 10 tokens
  zs::TokenWindowDataset ds(tokens.to(at::kByte), /*seq_len=*/4);
  EXPECT_EQ(ds.size(), 2);  // windows of 5 tokens at 0 and 4; the one at 8 does not fit
  zs::Example e = ds.get(1);
  EXPECT_EQ(zs::ByteTokenizer::decode(e.data), "efgh");
  EXPECT_EQ(zs::ByteTokenizer::decode(e.target), "fghi");
  EXPECT_EQ(e.data.scalar_type(), at::kLong);
  zs::TokenWindowDataset overlapping(tokens, 4, /*stride=*/1);
  EXPECT_EQ(overlapping.size(), 6);
  EXPECT_EQ(zs::ByteTokenizer::decode(overlapping.get(5).target), "ghij");
  EXPECT_THROW(ds.get(2), zs::UsageError);
  const std::string w = error_text_of<zs::DataError>([&] { zs::TokenWindowDataset(tokens, 10); });
  EXPECT_NE(w.find("10 tokens hold no window of seq_len + 1 = 11"), std::string::npos) << w;
}

TEST(TextCorpus, ByteTokenizerRoundTripsUtf8) {
  const std::string text = "na\xc3\xafve caf\xc3\xa9 \xe2\x9c\x93\n";
  at::Tensor t = zs::ByteTokenizer::encode(text);
  EXPECT_EQ(t.numel(), static_cast<int64_t>(text.size()));
  EXPECT_EQ(zs::ByteTokenizer::decode(t), text);
  EXPECT_THROW(zs::ByteTokenizer::decode(at::full({2}, 256, at::kLong)), zs::UsageError);
}

TEST(Idx, ReadsPlainAndGzipFiles) {
  TempDir d;
  const std::string data = "\x01\x02\x03\x04\x05\x06";
  const std::string plain = d.file("m-idx2-ubyte", idx_bytes(0x08, {2, 3}, data));
  write_gz((d.path / "m.gz").string(), idx_bytes(0x08, {2, 3}, data));
  for (const std::string& p : {plain, (d.path / "m.gz").string()}) {
    at::Tensor t = zs::read_idx_file(p);
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(t.scalar_type(), at::kByte);
    EXPECT_EQ(t[1][2].item<int>(), 6);
  }
}

TEST(Idx, MalformedFilesNameTheProblem) {
  TempDir d;
  struct Case {
    std::string bytes, expect;
  };
  const std::vector<Case> cases = {
      {std::string("\x01\x00\x08\x01", 4), "bad magic number"},
      {idx_bytes(0x0D, {4}, std::string(16, '\0')), "element type 0x0d"},
      {idx_bytes(0x08, {}, ""), "declares 0 dimensions"},
      {idx_bytes(0x08, {0}, ""), "dimension 0 = 0"},
      {idx_bytes(0x08, {2, 3}, "abc"), "truncated: its header declares 6 bytes of data but it holds 3"},
      {idx_bytes(0x08, {2}, "abc"), "bytes after the 2"},
      {std::string("\0\0", 2), "shorter than its 4-byte magic"},
      {std::string("\0\0\x08\x02\0\0", 6), "ends inside its header"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string p = d.file("bad" + std::to_string(i), cases[i].bytes);
    const std::string w = error_text_of<zs::DataError>([&] { zs::read_idx_file(p); });
    EXPECT_NE(w.find(p), std::string::npos) << "names the file: " << w;
    EXPECT_NE(w.find(cases[i].expect), std::string::npos) << w;
  }
  const std::string missing = error_text_of<zs::IoError>([&] { zs::read_idx_file((d.path / "none").string()); });
  EXPECT_NE(missing.find("does not exist"), std::string::npos) << missing;
}

TEST(FashionMnist, MissingDirectoryNamesTheFilesAndThePackage) {
  const std::string w = error_text_of<zs::IoError>([] { zs::load_fashion_mnist("/nonexistent/fmnist", true); });
  EXPECT_NE(w.find("/nonexistent/fmnist/train-images-idx3-ubyte.gz"), std::string::npos) << w;
  EXPECT_NE(w.find("Debian package 'dataset-fashion-mnist'"), std::string::npos) << w;
  EXPECT_NE(w.find("apt-get install dataset-fashion-mnist"), std::string::npos) << w;
}

TEST(FashionMnist, InconsistentFilesAreDataErrors) {
  TempDir d;
  d.file("t10k-images-idx3-ubyte", idx_bytes(0x08, {3, 28, 28}, std::string(3 * 784, '\x10')));
  d.file("t10k-labels-idx1-ubyte", idx_bytes(0x08, {2}, std::string("\x01\x02", 2)));
  std::string w = error_text_of<zs::DataError>([&] { zs::load_fashion_mnist(d.path.string(), false); });
  EXPECT_NE(w.find("holds 2 labels but"), std::string::npos) << w;
  d.file("t10k-labels-idx1-ubyte", idx_bytes(0x08, {3}, std::string("\x01\x0c\x02", 3)));
  w = error_text_of<zs::DataError>([&] { zs::load_fashion_mnist(d.path.string(), false); });
  EXPECT_NE(w.find("holds label 12; expected 0 to 9"), std::string::npos) << w;
  d.file("t10k-labels-idx1-ubyte", idx_bytes(0x08, {3}, std::string("\x01\x09\x02", 3)));
  zs::ImageSet set = zs::load_fashion_mnist(d.path.string(), false);
  zs::ImageClassificationDataset ds(set, 0.5, 0.25);
  zs::Example e = ds.get(1);
  EXPECT_EQ(e.data.sizes(), (std::vector<int64_t>{1, 28, 28}));
  EXPECT_NEAR(e.data[0][0][0].item<float>(), (16.0 / 255 - 0.5) / 0.25, 1e-6);
  EXPECT_EQ(e.target.item<int64_t>(), 9);
}

TEST(FashionMnist, ReadsTheInstalledTestSplit) {
  ASSERT_TRUE(fs::exists(zs::kFashionMnistDir))
      << zs::kFashionMnistDir << " is missing: scripts/setup.sh installs the package " << zs::kFashionMnistPackage;
  zs::ImageSet set = zs::load_fashion_mnist(zs::kFashionMnistDir, false);
  EXPECT_EQ(set.images.sizes(), (std::vector<int64_t>{10000, 28, 28}));
  // The test split is balanced: 1000 images of each of the 10 classes.
  at::Tensor counts = at::bincount(set.labels);
  ASSERT_EQ(counts.numel(), 10);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(counts[c].item<int64_t>(), 1000) << "class " << c;
}

}  // namespace

// Packed token samples as the Trainer's examples (lm_data.h): inputs, positions and document
// numbers stacked, targets -100 where the loss mask is 0; ids outside the model's vocabulary and
// ranges outside the source are refused by name.
namespace {
class TwoSamples : public zeroshard::data::SampleSource {
 public:
  explicit TwoSamples(int32_t last_target) : last_target_(last_target) {}
  int64_t num_samples() const override { return 2; }
  int64_t seq_len() const override { return 3; }
  void read(int64_t id, const zeroshard::data::SampleRow& out) const override {
    for (int j = 0; j < 3; ++j) {
      out.inputs[j] = static_cast<int32_t>(10 * id + j);
      out.targets[j] = j == 2 ? last_target_ : static_cast<int32_t>(10 * id + j + 1);
      out.loss_mask[j] = j == 0 ? 0 : 1;
      out.doc_ids[j] = j < 2 ? 0 : 1;
      out.positions[j] = j < 2 ? j : 0;
    }
  }

 private:
  int32_t last_target_;
};
}  // namespace

TEST(LmSampleDataset, StacksInputsPositionsDocumentsAndMasksTargets) {
  zeroshard::LmSampleDataset d(std::make_shared<TwoSamples>(7), 1, 1, 32);
  ASSERT_EQ(d.size(), 1);
  const zeroshard::Example e = d.get(0);
  EXPECT_TRUE(torch::equal(e.data, torch::tensor({10, 11, 12, 0, 1, 0, 0, 0, 1}, at::kLong).view({3, 3})));
  EXPECT_TRUE(torch::equal(e.target, torch::tensor({-100, 12, 7}, at::kLong)));
  zeroshard::LmSampleDataset bad(std::make_shared<TwoSamples>(40), 0, 2, 32);
  EXPECT_EQ(zeroshard::test::message_of<zeroshard::DataError>([&] { bad.get(0); }),
            "sample 0, position 2: token id 40 is outside the model's vocabulary of 32 ids");
  EXPECT_NE(zeroshard::test::error_text_of<zeroshard::UsageError>(
                [] { zeroshard::LmSampleDataset(std::make_shared<TwoSamples>(7), 1, 2, 32); })
                .find("LmSampleDataset: samples [1, 3) lie outside the source's 2 samples"),
            std::string::npos);
}
