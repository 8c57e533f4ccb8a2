// SPDX-License-Identifier: Apache-2.0
// The torch zip reader (tensor_file.h): archives written by Python (torch.save of a state dict,
// torch.jit.save of scripted and traced modules; the make_tensor_files fixture, with references of
// the same values in safetensors) and by LibTorch (torch::serialize::OutputArchive with nested
// archives, as zeroshard-ckpt consolidate writes). Every tensor is compared element by element with
// its reference, whole and in random ranges; then aliases, dtype conversion, partial reads, and the
// errors for damaged, foreign and unsupported files.

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <random>
#include <set>

#include "io/aio_test_util.h"
#include "io/tensor_file_test_util.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
using zs::test::same_elements;
using namespace std::string_literals;  // "..."s keeps the NUL bytes of hand-written pickles

namespace {

std::string fixture_file(const std::string& name) {
  const std::string dir = zs::test::tensor_files_dir();
  return dir.empty() ? "" : dir + "/" + name;
}

std::vector<std::string> names_of(const zs::TensorFile& f) {
  std::vector<std::string> out;
  for (const auto& t : f.tensors()) out.push_back(t.name);
  return out;
}

// `file` holds the tensors of `reference` (same names, dtypes, shapes, elements; in the same order
// when `same_order`), and the format and aliases its metadata names.
void expect_matches_reference(const std::string& file, const std::string& reference, bool same_order) {
  auto f = zs::open_tensor_file(file);
  auto ref = zs::open_tensor_file(reference);
  EXPECT_EQ(f->format(), ref->metadata().at("zeroshard.format"));
  std::vector<std::string> got = names_of(*f), want = names_of(*ref);
  if (!same_order) std::sort(got.begin(), got.end()), std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  for (const auto& r : ref->tensors()) {
    const zs::TensorInfo* t = f->find(r.name);
    if (t == nullptr) continue;  // reported by the name comparison
    EXPECT_EQ(t->dtype, r.dtype) << r.name;
    EXPECT_EQ(t->shape, r.shape) << r.name;
    EXPECT_TRUE(same_elements(zs::test::read_all(*f, r.name), zs::test::read_all(*ref, r.name))) << r.name;
  }
  EXPECT_EQ(f->aliases(), ref->aliases());
}

TEST(TorchZip, StateDictMatchesReference) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  expect_matches_reference(file, fixture_file("state_dict.ref.safetensors"), true);
  EXPECT_EQ(zs::open_tensor_file(file)->tensors().size(), 17u);
}

// Nested containers are named by their keys and indices; non-tensor values are skipped.
TEST(TorchZip, CheckpointMatchesReference) {
  const std::string file = fixture_file("checkpoint.pt");
  ASSERT_FALSE(file.empty());
  expect_matches_reference(file, fixture_file("checkpoint.ref.safetensors"), true);
  auto f = zs::open_tensor_file(file);
  EXPECT_NE(f->find("opt.state.0.exp_avg"), nullptr);
  EXPECT_NE(f->find("model.layers.79.weight"), nullptr);
}

TEST(TorchZip, ScriptedModuleMatchesReference) {
  const std::string file = fixture_file("module_script.pt");
  ASSERT_FALSE(file.empty());
  expect_matches_reference(file, fixture_file("module_script.ref.safetensors"), false);
  auto f = zs::open_tensor_file(file);
  EXPECT_NE(f->find("h.1.attn.weight"), nullptr);
  EXPECT_EQ(f->find("training"), nullptr);  // module attributes that are not tensors are skipped
}

TEST(TorchZip, TracedModuleConstants) {
  const std::string file = fixture_file("module_traced.pt");
  ASSERT_FALSE(file.empty());
  expect_matches_reference(file, fixture_file("module_traced.ref.safetensors"), true);
}

// Random [begin, begin + count) of every tensor, contiguous or not, equal the reference's slices.
TEST(TorchZip, RandomRangesEqualSlices) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  auto f = zs::open_tensor_file(file);
  auto ref = zs::open_tensor_file(fixture_file("state_dict.ref.safetensors"));
  std::mt19937_64 rng(42);
  int ranges = 0;
  for (const auto& t : f->tensors()) {
    const at::Tensor whole = zs::test::read_all(*ref, t.name).reshape({-1});
    for (int i = 0; i < 25 && t.numel() > 0; ++i, ++ranges) {
      const int64_t begin = static_cast<int64_t>(rng() % static_cast<uint64_t>(t.numel()));
      const int64_t count = static_cast<int64_t>(rng() % static_cast<uint64_t>(t.numel() - begin + 1));
      EXPECT_TRUE(same_elements(zs::test::read_range(*f, t.name, begin, count), whole.narrow(0, begin, count)))
          << t.name << " [" << begin << ", " << begin + count << ")";
    }
  }
  EXPECT_GT(ranges, 300);
}

TEST(TorchZip, ContiguousRangeReadsOnlyItsBytes) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  auto f = zs::open_tensor_file(file);
  EXPECT_EQ(f->bytes_read(), 0);
  zs::test::read_range(*f, "block.0.weight", 1000, 2570);
  EXPECT_EQ(f->bytes_read(), 2570 * 4);
  zs::test::read_range(*f, "bf16", 5, 7);
  EXPECT_EQ(f->bytes_read(), 2570 * 4 + 7 * 2);
  // A strided view reads the span its elements cover: row 1 of "transposed" (5x6, strides (1, 5))
  // is elements 1, 6, ..., 26 of the storage: 26 elements.
  const int64_t before = f->bytes_read();
  zs::test::read_range(*f, "transposed", 6, 6);
  EXPECT_EQ(f->bytes_read() - before, 26 * 4);
}

TEST(TorchZip, Aliases) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  using Map = std::map<std::string, std::string>;
  EXPECT_EQ(zs::open_tensor_file(file)->aliases(), (Map{{"tied", "fp32"}}));
  // A view of the same storage with other strides ("transposed") is no alias.
  EXPECT_EQ(zs::open_tensor_file(fixture_file("module_script.pt"))->aliases(), (Map{{"head.weight", "wte.weight"}}));
}

TEST(TorchZip, DtypeConversion) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  auto f = zs::open_tensor_file(file);
  auto ref = zs::open_tensor_file(fixture_file("state_dict.ref.safetensors"));
  const at::Tensor bf16 = zs::test::read_all(*ref, "bf16"), fp32 = zs::test::read_all(*ref, "fp32");
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "bf16", at::kFloat), bf16.to(at::kFloat)));
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "fp32", at::kBFloat16), fp32.to(at::kBFloat16)));
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "transposed", at::kHalf),
                            zs::test::read_all(*ref, "transposed").to(at::kHalf)));
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "fp16", at::kDouble),
                            zs::test::read_all(*ref, "fp16").to(at::kDouble)));
  const std::string w = error_text_of<zs::UsageError>([&] { zs::test::read_all(*f, "int64", at::kFloat); });
  EXPECT_CONTAINS(w, "tensor 'int64' in '" + file + "' is Long and cannot be read as Float");
}

// ---- archives written by LibTorch ----

// Nested archives as zeroshard-ckpt consolidate writes them: "h.0.attn.qkv.weight" is archive h ->
// 0 -> attn -> qkv, key "weight".
struct ArchiveTree {
  torch::serialize::OutputArchive archive;
  std::map<std::string, std::unique_ptr<ArchiveTree>> children;
  void write(const std::string& dotted, const at::Tensor& t, bool is_buffer) {
    const size_t dot = dotted.find('.');
    if (dot == std::string::npos) return archive.write(dotted, t, is_buffer);
    auto& child = children[dotted.substr(0, dot)];
    if (!child) child = std::make_unique<ArchiveTree>();
    child->write(dotted.substr(dot + 1), t, is_buffer);
  }
  void finish() {
    for (auto& [name, child] : children) {
      child->finish();
      archive.write(name, child->archive);
    }
  }
};

TEST(TorchZip, LibTorchNestedArchives) {
  zs::test::TempDir dir;
  const at::Tensor wte = at::randn({11, 4});
  const std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"wte.weight", wte},
      {"h.0.attn.qkv.weight", at::randn({12, 4}).to(at::kBFloat16)},
      {"h.0.attn.qkv.bias", at::randn({12}, at::kDouble)},
      {"h.1.mlp.fc.weight", at::randn({4, 6}).t()},  // a transposed view, saved as such
      {"h.1.mlp.mask", at::arange(10) % 3 == 0},
      {"h.1.count", at::arange(5, at::kInt)},
      {"lm_head.weight", wte},                         // tied
  };
  ArchiveTree tree;
  for (const auto& [name, t] : tensors) tree.write(name, t, name.find("mask") != std::string::npos);
  tree.finish();
  const std::string path = dir.file("consolidated.pt");
  tree.archive.save_to(path);

  auto f = zs::open_tensor_file(path);
  EXPECT_STREQ(f->format(), "torchscript");
  std::set<std::string> want;
  for (const auto& [name, t] : tensors) {
    want.insert(name);
    ASSERT_NE(f->find(name), nullptr) << name;
    EXPECT_TRUE(same_elements(zs::test::read_all(*f, name), t)) << name;
  }
  const auto got = names_of(*f);
  EXPECT_EQ(std::set<std::string>(got.begin(), got.end()), want);
  // Archives are written children last, in name order (ArchiveTree's map): lm_head before wte.
  EXPECT_EQ(f->aliases(), (std::map<std::string, std::string>{{"wte.weight", "lm_head.weight"}}));
  const at::Tensor fc = tensors[3].second.reshape({-1});
  EXPECT_TRUE(same_elements(zs::test::read_range(*f, "h.1.mlp.fc.weight", 5, 13), fc.narrow(0, 5, 13)));
}

// ---- errors ----

// Copies archive `from` into a new archive `to` record by record through `edit`, which may change a
// record's bytes or drop it (by returning false), then adds `extra` records.
void rewrite_archive(const std::string& from, const std::string& to,
                     const std::function<bool(const std::string&, std::string&)>& edit,
                     const std::vector<std::pair<std::string, std::string>>& extra = {}) {
  caffe2::serialize::PyTorchStreamReader in(from);
  caffe2::serialize::PyTorchStreamWriter out(to);
  for (const std::string& name : in.getAllRecords()) {
    if (name == "version") continue;  // the writer adds its own
    bool replaced = false;  // `extra` replaces a record of that name (PyTorch 2.x writes "byteorder")
    for (const auto& e : extra) replaced = replaced || e.first == name;
    if (replaced) continue;
    auto [data, size] = in.getRecord(name);
    std::string bytes(static_cast<const char*>(data.get()), size);
    if (edit(name, bytes)) out.writeRecord(name, bytes.data(), bytes.size());
  }
  for (const auto& [name, bytes] : extra) out.writeRecord(name, bytes.data(), bytes.size());
  out.writeEndOfFile();
}

TEST(TorchZipErrors, UnknownNameAndRange) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  auto f = zs::open_tensor_file(file);
  at::Tensor dst = at::empty({4});
  std::string w = error_text_of<zs::UsageError>([&] { f->read("fp33", 0, 4, dst); });
  EXPECT_CONTAINS(w, "tensor file '" + file + "' has no tensor 'fp33' (it has 17 tensors)");
  w = error_text_of<zs::UsageError>([&] { f->read("fp32", 28, 4, dst); });
  EXPECT_CONTAINS(w, "reading elements [28, 32) of tensor 'fp32' in '" + file + "': it has 30 elements");
  w = error_text_of<zs::UsageError>([&] { f->read("fp32", 0, 3, dst); });
  EXPECT_CONTAINS(w, "reading tensor 'fp32' from '" + file + "': the destination must be a contiguous CPU tensor of 3");
}

TEST(TorchZipErrors, TruncatedZip) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  zs::test::TempDir dir;
  const std::string cut = dir.file("cut.pt");
  for (int64_t keep : {int64_t{100000}, int64_t{40}, static_cast<int64_t>(zs::test::read_file(file).size()) - 10}) {
    zs::test::copy_file(file, cut);
    zs::test::truncate_file(cut, keep);
    const std::string w = error_text_of<zs::IoError>([&] { zs::open_tensor_file(cut); });
    EXPECT_CONTAINS(w, "'" + cut + "' is not a readable torch zip archive (opening it failed; is it truncated or damaged?)");
  }
}

TEST(TorchZipErrors, StorageShorterThanTensor) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  zs::test::TempDir dir;
  const std::string bad = dir.file("short.pt");
  // data/0 is the storage of fp32 (6x5 floats), its transposed view and "tied".
  rewrite_archive(file, bad, [](const std::string& name, std::string& bytes) {
    if (name == "data/0") bytes.resize(100);
    return true;
  });
  const std::string w = error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); });
  EXPECT_CONTAINS(w, "'" + bad + "': tensor 'fp32' needs 120 bytes of storage record 'short/data/0', which holds only "
                     "100 bytes (the archive is truncated or damaged)");
  // A storage record that is missing altogether.
  rewrite_archive(file, bad, [](const std::string& name, std::string&) { return name != "data/1"; });
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); }),
                  "tensor 'bf16' refers to storage record 'short/data/1', which the archive does not have");
}

TEST(TorchZipErrors, NotATensorFile) {
  zs::test::TempDir dir;
  const std::string text = dir.file("notes.txt");
  zs::test::write_file(text, "just some text, long enough\n");
  std::string w = error_text_of<zs::IoError>([&] { zs::open_tensor_file(text); });
  EXPECT_CONTAINS(w, "'" + text + "' (28 bytes) is not a tensor file zeroshard reads");
  EXPECT_CONTAINS(w, "its first bytes are 6a75737420736f6d");
  zs::test::write_file(dir.file("legacy.pt"), "\x80\x02\x8a\x0al\xfc\x9c" "F\xf9 j\xa8P\x19.");
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(dir.file("legacy.pt")); }),
                  "its first bytes are 80028a0a6cfc9c46 (a pickle: torch.save's legacy format");
  w = error_text_of<zs::IoError>([&] { zs::open_torch_zip_file(text); });
  EXPECT_CONTAINS(w, "'" + text + "' is not a readable torch zip archive (opening it failed");
  w = error_text_of<zs::IoError>([&] { zs::open_tensor_file(dir.file("missing.pt")); });
  EXPECT_CONTAINS(w, "cannot open tensor file '" + dir.file("missing.pt") + "'");
}

TEST(TorchZipErrors, ZipWithoutDataPkl) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  zs::test::TempDir dir;
  const std::string bad = dir.file("nopickle.pt");
  rewrite_archive(file, bad, [](const std::string& name, std::string&) { return name != "data.pkl"; });
  const std::string err = error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); });
  EXPECT_CONTAINS(err, "'" + bad + "' is a zip archive without a data.pkl record, so not a torch.save or TorchScript "
                       "archive (its records: ");
  EXPECT_CONTAINS(err, "data/0, data/1");  // after "byteorder, " where PyTorch 2.x wrote the fixture
}

TEST(TorchZipErrors, BigEndianCompressedAndBadPickles) {
  const std::string file = fixture_file("state_dict.pt");
  ASSERT_FALSE(file.empty());
  zs::test::TempDir dir;
  const std::string bad = dir.file("bad.pt");
  auto keep = [](const std::string&, std::string&) { return true; };
  rewrite_archive(file, bad, keep, {{"byteorder", "big"}});
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); }),
                  "'" + bad + "' was written on a machine of byte order 'big' (its byteorder record); zeroshard reads "
                  "little-endian archives only");
  rewrite_archive(file, bad, keep, {{"byteorder", "little"}});
  EXPECT_EQ(zs::open_tensor_file(bad)->tensors().size(), 17u);

  const std::string deflated = fixture_file("state_dict_deflated.pt");
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(deflated); }),
                  "'" + deflated + "': storage record 'state_dict/data/0' of tensor 'fp32' is compressed (zip method 8)");

  auto with_pickle = [&](const std::string& pickle) {
    rewrite_archive(file, bad, [&](const std::string& name, std::string& bytes) {
      if (name == "data.pkl") bytes = pickle;
      return true;
    });
    return error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); });
  };
  EXPECT_CONTAINS(with_pickle("\x80\x02}q\x00\xff."s),
                  "'" + bad + "': data.pkl: unsupported pickle opcode 0xff at offset 5");
  EXPECT_CONTAINS(with_pickle("\x80\x02}X\x10\x00\x00\x00"s + "abc"),
                  "'" + bad + "': data.pkl: the pickle ends at byte 11 inside the opcode at offset 3 (truncated)");
  EXPECT_CONTAINS(with_pickle("\x80\x02u."s), "'" + bad + "': data.pkl: malformed pickle at offset 2: no MARK to pop to");
  // A quantized tensor: a rebuild function zeroshard does not read.
  EXPECT_CONTAINS(with_pickle("\x80\x02}(X\x01\x00\x00\x00qctorch._utils\n_rebuild_qtensor\n)Ru."s),
                  "'" + bad + "': data.pkl: tensor 'q' is rebuilt by torch._utils._rebuild_qtensor, which zeroshard "
                  "does not read");
}

// Pickles that reach one value many ways or nest without end; each must end quickly (ctest's
// timeout bounds it) with a clear error or a correct result.
class TorchZipCraftedPickles : public ::testing::Test {
 protected:
  void SetUp() override {
    file_ = fixture_file("state_dict.pt");
    ASSERT_FALSE(file_.empty());
  }
  std::string archive_with(const std::string& pickle) {
    const std::string bad = dir_.file("crafted.pt");
    rewrite_archive(file_, bad, [&](const std::string& name, std::string& bytes) {
      if (name == "data.pkl") bytes = pickle;
      return true;
    });
    return bad;
  }
  // `bottom` (leaving one value) wrapped 64 times in l = [l, l] with memo references, as
  // torch.save writes `for _ in range(64): l = [l, l]` (about 1 KB).
  static std::string shared_lists(const std::string& bottom) {
    std::string p = "\x80\x02"s + bottom + "q\x00"s;
    for (int i = 1; i <= 64; ++i) {  // POP the previous level (kept in the memo), make the next
      p += "0]q"s + static_cast<char>(i) + "(h"s + static_cast<char>(i - 1) + "h"s + static_cast<char>(i - 1) + "e"s;
    }
    return p + ".";
  }
  // A call torch._utils._rebuild_tensor_v2 of float storage "0" (the fixture's data/0), shape [1].
  static std::string one_tensor() {
    return "ctorch._utils\n_rebuild_tensor_v2\n(("s + "X\x07\x00\x00\x00storage"s + "ctorch\nFloatStorage\n"s +
           "X\x01\x00\x00\x00" "0"s + "X\x03\x00\x00\x00" "cpu"s + "K\x06tQK\x00K\x01\x85K\x01\x85tR"s;
  }
  std::string file_;
  zs::test::TempDir dir_;
};

// Before: the walk over the values re-walked every memo reference, 2^64 visits: it never ended.
// Now each list is walked once; it holds no tensor, so the archive opens with none.
TEST_F(TorchZipCraftedPickles, SharedListsWalkOnce) {
  const std::string bad = archive_with(shared_lists("]"));
  EXPECT_TRUE(zs::open_tensor_file(bad)->tensors().empty());
}

// The same with a tensor at the bottom: 2^64 names. Before: never ended (as above); now refused
// once the names pass 2^20.
TEST_F(TorchZipCraftedPickles, SharedListsNamingTooManyTensors) {
  const std::string bad = archive_with(shared_lists(one_tensor()));
  // The list 43 levels below the root, second item: 2^20 names already found, as many under it.
  std::string at;
  for (int i = 0; i < 43; ++i) at += "0.";
  at += "1";
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); }),
            "'" + bad + "': data.pkl: more than 1048576 tensor names (containers shared under too many "
            "paths, at '" + at + "'): not a file torch writes");
}

// A shallow sharing that torch does write (one dict under two keys): both names, same tensor.
TEST_F(TorchZipCraftedPickles, SharedDictNamedTwice) {
  const std::string pickle = "\x80\x02}q\x00(X\x01\x00\x00\x00" "a}q\x01X\x01\x00\x00\x00w"s + one_tensor() +
                             "sX\x01\x00\x00\x00" "bh\x01u."s;
  const auto f = zs::open_tensor_file(archive_with(pickle));
  std::vector<std::string> names;
  for (const auto& t : f->tensors()) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a.w", "b.w"}));
}

// 100000 nested lists (200 KB). Before: SIGSEGV (the walk recursed once per level, and so did
// the values' destructor); now refused at 1000.
TEST_F(TorchZipCraftedPickles, DeepNestingRefused) {
  const int n = 100000;
  const std::string bad = archive_with("\x80\x02"s + std::string(n, ']') + std::string(n - 1, 'a') + ".");
  std::string where = "0";
  for (int i = 1; i < 1000; ++i) where += ".0";
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(bad); }),
            "'" + bad + "': data.pkl: values nested deeper than 1000 containers (at '" + where +
                "'): not a file torch writes");
}

}  // namespace
