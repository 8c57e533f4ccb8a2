// SPDX-License-Identifier: Apache-2.0
// safetensors (tensor_file.h): SafetensorsWriter -> reader round trips (every dtype, metadata,
// aliases, tensors written out of declaration order), the writer's refusals, and the reader's
// errors on hand-made bad files, the JSON header's included (malformed, a key twice, nested too
// deep), and a model directory's index.json. The reader is also checked against files written without
// zeroshard: the references make_tensor_files.py writes with struct and json (test_tensor_file.cpp).

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include "io/aio_test_util.h"
#include "io/tensor_file_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_dir.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
using zs::test::same_elements;

namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::pair<std::string, at::Tensor>> every_dtype() {
  at::manual_seed(7);
  at::Tensor f = at::randn({5, 7});
  f[0][0] = std::numeric_limits<float>::quiet_NaN();
  f[1][2] = -0.0f;
  return {
      {"f32", f},
      {"bf16", at::randn({3, 4}).to(at::kBFloat16)},
      {"f16", at::randn({6}).to(at::kHalf)},
      {"f64", at::randn({2, 2, 2}, at::kDouble)},
      {"i64", at::randint(-1000000000000LL, 1000000000000LL, {4}, at::kLong)},
      {"i32", at::randint(-100000, 100000, {3, 3}, at::kInt)},
      {"i16", at::randint(-30000, 30000, {5}, at::kShort)},
      {"i8", at::randint(-128, 127, {9}, at::kChar)},
      {"u8", at::randint(0, 255, {2, 5}, at::kByte)},
      {"bool", at::arange(13) % 3 == 1},
      {"scalar", at::randn({})},
      {"empty", at::empty({0, 3})},
      {"h.0.attn.qkv.weight", at::randn({12, 4}).t()},  // non-contiguous: the writer makes it contiguous
  };
}

std::vector<zs::TensorInfo> infos_of(const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
  std::vector<zs::TensorInfo> out;
  for (const auto& [name, t] : tensors) out.push_back({name, t.scalar_type(), t.sizes().vec()});
  return out;
}

TEST(Safetensors, RoundTripEveryDtype) {
  zs::test::TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const auto tensors = every_dtype();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"zeroshard.step", "1200"}};
  int64_t bytes = 0;
  {
    zs::SafetensorsWriter w(path, infos_of(tensors), meta);
    for (size_t i = tensors.size(); i-- > 0;) w.write(tensors[i].first, tensors[i].second);  // reverse order
    EXPECT_FALSE(exists(path));  // only the .tmp until finish()
    w.finish();
    for (const auto& [name, t] : tensors) bytes += static_cast<int64_t>(t.nbytes());
    EXPECT_EQ(w.bytes_written(), bytes);
  }
  ASSERT_TRUE(exists(path));
  EXPECT_FALSE(exists(path + ".tmp"));
  auto f = zs::open_tensor_file(path);
  EXPECT_STREQ(f->format(), "safetensors");
  EXPECT_EQ(f->metadata(), meta);
  EXPECT_TRUE(f->aliases().empty());
  ASSERT_EQ(f->tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    EXPECT_EQ(f->tensors()[i].name, name);  // declaration order
    EXPECT_EQ(f->tensors()[i].dtype, t.scalar_type()) << name;
    EXPECT_EQ(f->tensors()[i].shape, t.sizes().vec()) << name;
    EXPECT_TRUE(same_elements(zs::test::read_all(*f, name), t)) << name;
  }
  EXPECT_EQ(f->bytes_read(), bytes);
}

TEST(Safetensors, RangesConversionAndAliases) {
  zs::test::TempDir dir;
  const std::string path = dir.file("tied.safetensors");
  const at::Tensor w = at::randn({40, 9}), b = at::randn({17}).to(at::kBFloat16);
  {
    zs::SafetensorsWriter out(path, {{"wte.weight", at::kFloat, {40, 9}}, {"lm_head.weight", at::kFloat, {40, 9}},
                                     {"ln.bias", at::kBFloat16, {17}}},
                              {{"zeroshard.aliases", "lm_head.weight=wte.weight;x=y"}});
    out.write("wte.weight", w);
    out.write("ln.bias", b);
    out.write("lm_head.weight", w);
    out.finish();
  }
  auto f = zs::open_tensor_file(path);
  EXPECT_EQ(f->aliases(), (std::map<std::string, std::string>{{"lm_head.weight", "wte.weight"}, {"x", "y"}}));
  EXPECT_TRUE(same_elements(zs::test::read_range(*f, "wte.weight", 100, 77), w.reshape({-1}).narrow(0, 100, 77)));
  EXPECT_EQ(f->bytes_read(), 77 * 4);
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "ln.bias", at::kFloat), b.to(at::kFloat)));
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "wte.weight", at::kBFloat16), w.to(at::kBFloat16)));
  const std::string e = error_text_of<zs::UsageError>([&] { zs::test::read_all(*f, "ln.bias", at::kInt); });
  EXPECT_CONTAINS(e, "tensor 'ln.bias' in '" + path + "' is BFloat16 and cannot be read as Int");
  EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { zs::test::read_range(*f, "ln.bias", 10, 8); }),
                  "reading elements [10, 18) of tensor 'ln.bias' in '" + path + "': it has 17 elements");
}

TEST(Safetensors, WriterRefusals) {
  zs::test::TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::string tmp = path + ".tmp";
  {
    zs::SafetensorsWriter w(path, {{"a", at::kFloat, {2, 3}}, {"b", at::kInt, {4}}});
    EXPECT_TRUE(exists(tmp));
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.write("c", at::randn({2, 3})); }),
                    "SafetensorsWriter '" + path + "': tensor 'c' was not declared");
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.write("a", at::randn({3, 2})); }),
                    "SafetensorsWriter '" + path + "': tensor 'a' was declared Float [2, 3] on cpu, got Float [3, 2]");
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.write("b", at::randn({4})); }),
                    "tensor 'b' was declared Int [4] on cpu, got Float [4]");
    w.write("a", at::randn({2, 3}));
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.write("a", at::randn({2, 3})); }),
                    "SafetensorsWriter '" + path + "': tensor 'a' written twice");
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.finish(); }),
                    "SafetensorsWriter '" + path + "': tensor 'b' was declared but never written");
  }
  EXPECT_FALSE(exists(tmp));  // the destructor removed the unfinished file
  EXPECT_FALSE(exists(path));
  {
    zs::SafetensorsWriter w(path, {{"a", at::kFloat, {1}}});
    w.write("a", at::ones({1}));
    w.finish();
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.finish(); }), "SafetensorsWriter '" + path + "': finish() called twice");
    EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { w.write("a", at::ones({1})); }),
                    "SafetensorsWriter '" + path + "': tensor 'a' written after finish()");
  }
  EXPECT_TRUE(exists(path));  // a finished file stays
  EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { zs::SafetensorsWriter(path, {{"__metadata__", at::kFloat, {1}}}); }),
                  "a tensor cannot be named \"__metadata__\"");
  EXPECT_CONTAINS(error_text_of<zs::UsageError>([&] { zs::SafetensorsWriter(path, {{"a", at::kFloat, {1}}, {"a", at::kFloat, {2}}}); }),
                  "SafetensorsWriter '" + path + "': tensor 'a' declared twice");
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::SafetensorsWriter(dir.file("no/such/dir/x.safetensors"), {}); }),
                  "cannot create '" + dir.file("no/such/dir/x.safetensors.tmp") + "'");
}

// A safetensors file from its parts: the 8-byte length (`len` when >= 0, else the header's), the
// header text, then `data`.
void write_safetensors(const std::string& path, const std::string& header, const std::string& data,
                       int64_t len = -1) {
  const uint64_t n = len >= 0 ? static_cast<uint64_t>(len) : header.size();
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((n >> (8 * i)) & 0xff);
  zs::test::write_file(path, bytes + header + data);
}

TEST(Safetensors, ReaderErrors) {
  zs::test::TempDir dir;
  const std::string p = dir.file("bad.safetensors");
  auto error = [&](const std::string& header, const std::string& data, int64_t len = -1) {
    write_safetensors(p, header, data, len);
    return error_text_of<zs::IoError>([&] { zs::open_tensor_file(p); });
  };
  const std::string good = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
  write_safetensors(p, good, std::string(16, '\0'));
  EXPECT_EQ(zs::open_tensor_file(p)->tensors().size(), 1u);

  EXPECT_CONTAINS(error(good, std::string(16, '\0'), 5000),
                  "'" + p + "' is not a valid safetensors file: the header length 5000 runs past the end of the file "
                  "(" + std::to_string(8 + good.size() + 16) + " bytes): the file is truncated or not safetensors");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"F32",)", ""),
                  "'" + p + "' is not a valid safetensors file: the JSON header: column 21: syntax error while "
                  "parsing object key - unexpected end of input; expected string literal");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", std::string(16, '\0')),
                  "'" + p + "' is not a valid safetensors file: tensor 'w' spans bytes [0, 12) but its F32 shape needs "
                  "16 bytes");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]}})", std::string(16, '\0')),
                  "safetensors file '" + p + "' is truncated: tensor 'w' ends at data byte 24 but the file holds 16 "
                  "data bytes");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", std::string(16, '\0')),
                  "tensor 'w' has dtype 'C64', which zeroshard does not read");
  EXPECT_CONTAINS(error(R"({"__metadata__":{"n":3}})", ""), "\"__metadata__\" entry 'n' is not a string");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,0]}})", ""),
                  "tensor 'w' has a shape entry that is not a whole number >= 0");
  write_safetensors(p, "", "", 0);  // not even '{' at byte 8: no format
  EXPECT_CONTAINS(error_text_of<zs::IoError>([&] { zs::open_tensor_file(p); }), "is not a tensor file zeroshard reads");
}

// Headers whose fields would make a reader index outside the file or two tensors share bytes.
// Before these checks (run against the earlier reader): [2^32, 2^32] F32 with offsets [0, 0]
// (numel * 4 wrapped to 0), offsets of 1e300 or 0.5, overlapping ranges (either order), gaps and
// trailing data bytes were all accepted; a header length over 100 MB was refused only because this
// file is smaller (a file that large had its header read into memory whole); end < begin was
// refused by the size check without saying the offsets were reversed.
TEST(Safetensors, ReaderRefusesCraftedLayouts) {
  zs::test::TempDir dir;
  const std::string p = dir.file("crafted.safetensors");
  auto error = [&](const std::string& header, const std::string& data, int64_t len = -1) {
    write_safetensors(p, header, data, len);
    return error_text_of<zs::IoError>([&] { zs::open_tensor_file(p); });
  };
  const std::string prefix = "'" + p + "' is not a valid safetensors file: ";
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", ""),
                  prefix + "tensor 'w' has shape [4294967296, 4294967296], whose F32 byte size overflows 64 bits");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"U8","shape":[1e300],"data_offsets":[0,0]}})", ""),
                  prefix + "tensor 'w' has a shape entry that is not a whole number >= 0");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[1e300,1e300]}})", ""),
                  prefix + "tensor 'w' has a data offset that is not a whole number >= 0");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[0.5,0.5]}})", ""),
                  prefix + "tensor 'w' has a data offset that is not a whole number >= 0");
  // The header length is bounded before anything is allocated: the file needs not be that large.
  EXPECT_CONTAINS(error("{}", "", 100'000'001),
                  prefix + "the header length 100000001 is over the limit of 100000000 bytes");
  EXPECT_CONTAINS(error(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[8,4]}})", std::string(8, '\0')),
                  prefix + "tensor 'w' has data_offsets [8, 4] that end before they begin");
  // b overlaps a (either order in the header: the check sorts by offset).
  EXPECT_CONTAINS(error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0')),
                  prefix + "tensor 'b' at data bytes [4, 12) overlaps tensor 'a', which ends at 8");
  EXPECT_CONTAINS(error(R"({"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0')),
                  prefix + "tensor 'b' at data bytes [0, 8) overlaps tensor 'a', which ends at 8");
  EXPECT_CONTAINS(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", std::string(8, '\0')),
                  prefix + "data bytes [0, 4) belong to no tensor");
  EXPECT_CONTAINS(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", std::string(12, '\0')),
                  prefix + "data bytes [4, 8) belong to no tensor (after tensor 'a')");
  EXPECT_CONTAINS(error(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(12, '\0')),
                  prefix + "the tensors end at data byte 4 but the file holds 12 data bytes after the header");
  // Out of header order but tiling the data exactly, with an empty tensor between: fine.
  write_safetensors(p, R"({"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"e":{"dtype":"F32","shape":[0],)"
                       R"("data_offsets":[4,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                    std::string(8, '\0'));
  EXPECT_EQ(zs::open_tensor_file(p)->tensors().size(), 3u);
}

// The JSON header is untrusted: a key twice in one object (a JSON parser would keep one of them
// silently) and nesting deeper than 16 levels are refused, at the place they occur.
TEST(Safetensors, HeaderJsonChecks) {
  zs::test::TempDir dir;
  const std::string p = dir.file("json.safetensors");
  auto error = [&](const std::string& header, const std::string& data) {
    write_safetensors(p, header, data);
    return error_text_of<zs::IoError>([&] { zs::open_tensor_file(p); });
  };
  const std::string prefix = "'" + p + "' is not a valid safetensors file: the JSON header: ";
  const std::string w = R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  // The position is that of the repeated key's closing quote: "{" + w + "," then "w".
  EXPECT_CONTAINS(error("{" + w + "," + w + "}", std::string(4, '\0')),
                  prefix + "column " + std::to_string(w.size() + 5) + ": key \"w\" appears twice in one object");
  const std::string two_dtypes = R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})";
  EXPECT_CONTAINS(error(two_dtypes, std::string(4, '\0')),
                  prefix + "column 27: key \"dtype\" appears twice in one object");
  // 16 levels (the header and 15 arrays) are read; the 17th level is refused where it opens.
  const std::string deep = std::string(R"({"__metadata__":{},"x":)") + std::string(100000, '[');
  EXPECT_CONTAINS(error(deep, ""), prefix + "column " + std::to_string(23 + 16) +
                                       ": objects and arrays nested deeper than 16 levels");
  EXPECT_CONTAINS(error(R"({"w":)" + std::string(15, '[') + std::string(15, ']') + "}", ""),
                  "tensor 'w' is not an object");
  // A header over several lines names the line.
  EXPECT_CONTAINS(error("{\n  \"w\": {\"dtype\": \"F32\",\n  \"shape\": [1 2]}}", ""),
                  prefix + "line 3, column 15: syntax error while parsing array - unexpected number literal; "
                  "expected ']'");
}

// A model directory's index.json: malformed, a tensor mapped twice, no weight_map.
TEST(TensorDirectory, IndexJsonErrors) {
  zs::test::TempDir dir;
  {
    zs::SafetensorsWriter w(dir.file("model-00001-of-00001.safetensors"), {{"a", c10::kFloat, {2}}});
    w.write("a", at::ones({2}));
    w.finish();
  }
  const std::string index = dir.file("model.safetensors.index.json");
  auto error = [&](const std::string& text) {
    zs::test::write_file(index, text);
    return error_text_of<zs::IoError>([&] { zs::TensorDirectory::open(dir.path()); });
  };
  const std::string a = R"("a": "model-00001-of-00001.safetensors")";
  zs::test::write_file(index, "{\"weight_map\": {" + a + "}}");
  EXPECT_EQ(zs::TensorDirectory::open(dir.path())->tensors().size(), 1u);
  EXPECT_CONTAINS(error("{\n  \"weight_map\": {\n    " + a + ",\n    " + a + "\n  }\n}\n"),
                  "model index '" + index + "' is not valid JSON: line 4, column 7: key \"a\" appears twice in one "
                  "object");
  const std::string unclosed = "{\"weight_map\": {" + a + "}";
  EXPECT_CONTAINS(error(unclosed), "model index '" + index + "' is not valid JSON: column " +
                                       std::to_string(unclosed.size() + 1) +
                                       ": syntax error while parsing object - unexpected end of input; expected '}'");
  EXPECT_CONTAINS(error("{\"metadata\": {}}"), "model index '" + index + "' has no \"weight_map\" object");
}

}  // namespace
