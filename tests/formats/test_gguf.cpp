// SPDX-License-Identifier: Apache-2.0
// The GGUF writer (zeroshard/formats/gguf_writer.h): Q8_0 and F16 rounding on values whose right
// answer is known by hand, the v3 layout byte by byte, every metadata type and the tensor table as
// node-llama-cpp's GGUF reader (a client nobody here wrote, tests/clients) reads them back, and
// every misuse with its exact text. (llama.cpp running exported models is test_llama_clients.)

#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/gguf_vocab.h"
#include "zeroshard/formats/gguf_writer.h"

namespace zs = zeroshard;
namespace gguf = zeroshard::gguf;
namespace fs = std::filesystem;

namespace {

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

template <typename T>
T at_offset(const std::string& b, size_t offset) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof(T));
  return v;
}

std::string usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const zs::UsageError& e) {
    return e.message();
  } catch (const std::exception& e) {
    return std::string("<not a UsageError: ") + e.what() + ">";
  }
  return "<no error>";
}

TEST(Gguf, Q8_0RoundsHalfAwayFromZeroWithAnFp16Scale) {
  std::vector<float> x(96, 0.0f);
  // Block 0: absmax 127, so the scale is exactly 1 and each value is rounded on its own.
  const float b0[] = {127.0f, 2.5f, -2.5f, 0.49f, -0.5f, 126.5f, 1.5f, -127.0f};
  std::copy(std::begin(b0), std::end(b0), x.begin());
  // Block 1: zeros (scale 0). Block 2: absmax 1, scale 1/127 stored as fp16, values x * 127.
  x[64] = 1.0f;
  x[65] = 0.5f;    // 63.5 -> 64
  x[66] = -0.25f;  // -31.75 -> -32
  std::vector<uint8_t> q(3 * 34);
  gguf::quantize_q8_0(x.data(), 96, q.data());
  EXPECT_EQ(at_offset<uint16_t>(std::string(q.begin(), q.end()), 0), 0x3C00);  // fp16 1.0
  const int8_t want0[] = {127, 3, -3, 0, -1, 127, 2, -127};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<int8_t>(q[2 + i]), want0[i]) << i;
  for (int i = 0; i < 34; ++i) EXPECT_EQ(q[34 + i], 0) << i;
  EXPECT_EQ(at_offset<uint16_t>(std::string(q.begin(), q.end()), 68), c10::Half(1.0f / 127.0f).x);
  EXPECT_EQ(static_cast<int8_t>(q[70]), 127);
  EXPECT_EQ(static_cast<int8_t>(q[71]), 64);
  EXPECT_EQ(static_cast<int8_t>(q[72]), -32);
  EXPECT_EQ(usage_error([&] { gguf::quantize_q8_0(x.data(), 40, q.data()); }),
            "Q8_0 quantizes blocks of 32 values, got 40");
}

TEST(Gguf, LayoutIsVersion3WithAlignedData) {
  const std::string path = "gguf-layout.gguf";
  {
    gguf::Writer w(path);
    w.add("general.architecture", gguf::Value::string("llama"));
    w.declare("a", {2, 3}, gguf::TensorType::kF32);                             // 24 bytes
    w.declare("b", {3}, gguf::TensorType::kF16);                                // 6 bytes, at 32
    w.write("b", at::tensor({1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, -2.0f}));  // halfway cases: to even
    w.write("a", at::arange(6, at::kFloat).view({2, 3}));
    w.finish();
  }
  const std::string b = bytes_of(path);
  size_t p = 0;
  ASSERT_EQ(b.substr(0, 4), "GGUF");
  EXPECT_EQ(at_offset<uint32_t>(b, 4), 3u);
  EXPECT_EQ(at_offset<uint64_t>(b, 8), 2u);   // tensors
  EXPECT_EQ(at_offset<uint64_t>(b, 16), 2u);  // keys: general.alignment first, then ours
  p = 24;
  auto text = [&] {
    const uint64_t n = at_offset<uint64_t>(b, p);
    const std::string s = b.substr(p + 8, n);
    p += 8 + n;
    return s;
  };
  EXPECT_EQ(text(), "general.alignment");
  EXPECT_EQ(at_offset<uint32_t>(b, p), 4u);  // uint32
  EXPECT_EQ(at_offset<uint32_t>(b, p + 4), 32u);
  p += 8;
  EXPECT_EQ(text(), "general.architecture");
  EXPECT_EQ(at_offset<uint32_t>(b, p), 8u);  // string
  p += 4;
  EXPECT_EQ(text(), "llama");
  EXPECT_EQ(text(), "a");
  EXPECT_EQ(at_offset<uint32_t>(b, p), 2u);
  EXPECT_EQ(at_offset<uint64_t>(b, p + 4), 3u);  // innermost dimension first
  EXPECT_EQ(at_offset<uint64_t>(b, p + 12), 2u);
  EXPECT_EQ(at_offset<uint32_t>(b, p + 20), 0u);  // F32
  EXPECT_EQ(at_offset<uint64_t>(b, p + 24), 0u);
  p += 32;
  EXPECT_EQ(text(), "b");
  EXPECT_EQ(at_offset<uint32_t>(b, p), 1u);
  EXPECT_EQ(at_offset<uint64_t>(b, p + 4), 3u);
  EXPECT_EQ(at_offset<uint32_t>(b, p + 12), 1u);   // F16
  EXPECT_EQ(at_offset<uint64_t>(b, p + 16), 32u);  // 24 bytes padded to the alignment
  p += 24;
  const size_t data = (p + 31) / 32 * 32;
  for (size_t i = p; i < data; ++i) EXPECT_EQ(b[i], 0) << "padding byte " << i;
  for (int i = 0; i < 6; ++i) EXPECT_EQ(at_offset<float>(b, data + 4 * i), static_cast<float>(i));
  EXPECT_EQ(at_offset<uint16_t>(b, data + 32), 0x3C00);  // 1 + 2^-11 rounds to 1 (even)
  EXPECT_EQ(at_offset<uint16_t>(b, data + 34), 0x3C02);  // 1 + 3 * 2^-11 rounds up to 1 + 2^-9
  EXPECT_EQ(at_offset<uint16_t>(b, data + 36), 0xC000);
  EXPECT_EQ(b.size(), data + 64);
}

// Every metadata type, nested arrays, the tokenizer keys and a tensor table, read back by
// node-llama-cpp's GGUF parser.
TEST(Gguf, NodeLlamaCppReadsEveryValueType) {
  const std::string modules = ZS_CLIENTS_MODULES;
  ASSERT_TRUE(fs::exists(modules + "/node-llama-cpp/package.json"))
      << "node-llama-cpp is missing from '" << modules << "': run scripts/install-clients.sh " << ZS_BUILD_DIR;
  const std::string path = fs::absolute("gguf-types.gguf").string();
  {
    gguf::Writer w(path);
    w.add("t.u8", gguf::Value::uint8(200));
    w.add("t.i8", gguf::Value::int8(-100));
    w.add("t.u16", gguf::Value::uint16(60000));
    w.add("t.i16", gguf::Value::int16(-30000));
    w.add("t.u32", gguf::Value::uint32(4000000000u));
    w.add("t.i32", gguf::Value::int32(-2000000000));
    w.add("t.f32", gguf::Value::float32(0.1f));
    w.add("t.bool", gguf::Value::boolean(true));
    w.add("t.str", gguf::Value::string("h\xc3\xa9llo"));
    w.add("t.u64", gguf::Value::uint64(123456789012345ull));
    w.add("t.i64", gguf::Value::int64(-123456789012345ll));
    w.add("t.f64", gguf::Value::float64(0.1));
    w.add("t.ints", gguf::Value::int32s({1, -2, 3}));
    w.add("t.nested",
          gguf::Value::array(gguf::ValueType::kArray, {gguf::Value::strings({"a", "b"}), gguf::Value::strings({})}));
    gguf::Vocabulary v = gguf::byte_level_vocabulary(258);
    v.eos_id = 257;
    v.write_to(w);
    w.declare("x.weight", {64, 32}, gguf::TensorType::kQ8_0);
    w.declare("y", {5}, gguf::TensorType::kF32);
    w.write("x.weight", at::zeros({64, 32}));
    w.write("y", at::zeros({5}));
    w.finish();
  }
  const std::string out = fs::absolute("gguf-types.json").string();
  const std::string cmd = "node " + std::string(ZS_SOURCE_DIR) + "/tests/models/llama_cpp_nll.mjs --modules " +
                          modules + " --info " + path + " > " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const nlohmann::json j = nlohmann::json::parse(bytes_of(out));
  auto number = [](const nlohmann::json& v) { return v.get<double>(); };
  EXPECT_EQ(number(j.at("version")), 3);
  const nlohmann::json& t = j.at("metadata").at("t");
  auto num = [&](const char* k) { return number(t.at(k)); };
  EXPECT_EQ(num("u8"), 200);
  EXPECT_EQ(num("i8"), -100);
  EXPECT_EQ(num("u16"), 60000);
  EXPECT_EQ(num("i16"), -30000);
  EXPECT_EQ(num("u32"), 4000000000.0);
  EXPECT_EQ(num("i32"), -2000000000.0);
  EXPECT_EQ(num("f32"), static_cast<double>(0.1f));
  EXPECT_TRUE(t.at("bool").get<bool>());
  EXPECT_EQ(t.at("str").get<std::string>(), "h\xc3\xa9llo");
  EXPECT_EQ(num("u64"), 123456789012345.0);
  EXPECT_EQ(num("i64"), -123456789012345.0);
  EXPECT_EQ(num("f64"), 0.1);
  ASSERT_EQ(t.at("ints").size(), 3u);
  EXPECT_EQ(number(t.at("ints")[1]), -2);
  const nlohmann::json& nested = t.at("nested");
  ASSERT_EQ(nested.size(), 2u);
  EXPECT_EQ(nested[0][1].get<std::string>(), "b");
  EXPECT_TRUE(nested[1].empty());
  const nlohmann::json& tok = j.at("metadata").at("tokenizer").at("ggml");
  EXPECT_EQ(tok.at("model").get<std::string>(), "gpt2");
  ASSERT_EQ(tok.at("tokens").size(), 258u);
  EXPECT_EQ(tok.at("tokens")[32].get<std::string>(), "\xc4\xa0");  // ' ' is GPT-2's 'Ġ' (U+0120)
  EXPECT_EQ(tok.at("tokens")[65].get<std::string>(), "A");
  EXPECT_EQ(tok.at("tokens")[257].get<std::string>(), "<|unused_257|>");
  EXPECT_EQ(number(tok.at("token_type")[257]), 5);  // unused
  EXPECT_TRUE(tok.at("merges").empty());
  EXPECT_EQ(number(tok.at("eos_token_id")), 257);
  EXPECT_EQ(number(j.at("metadata").at("general").at("alignment")), 32);
  const nlohmann::json& tensors = j.at("tensors");
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_EQ(tensors[0].at("name").get<std::string>(), "x.weight");
  EXPECT_EQ(number(tensors[0].at("dims")[0]), 32);
  EXPECT_EQ(number(tensors[0].at("dims")[1]), 64);
  EXPECT_EQ(number(tensors[0].at("type")), 8);          // Q8_0
  EXPECT_EQ(number(tensors[1].at("offset")), 64 * 34);  // 2176, already a multiple of 32
  EXPECT_EQ(number(tensors[1].at("type")), 0);
}

TEST(Gguf, MisuseIsAUsageErrorNamingTheFileAndTensor) {
  const std::string path = "gguf-misuse.gguf";
  {
    gguf::Writer w(path);
    w.add("k", gguf::Value::uint32(1));
    EXPECT_EQ(usage_error([&] { w.add("k", gguf::Value::uint32(2)); }),
              "GGUF writer 'gguf-misuse.gguf': key 'k' added twice");
    EXPECT_EQ(usage_error([&] { w.add("general.alignment", gguf::Value::uint32(64)); }),
              "GGUF writer 'gguf-misuse.gguf': general.alignment is written by the writer (its constructor takes the "
              "alignment)");
    EXPECT_EQ(usage_error([&] {
                w.declare("q", {4, 48}, gguf::TensorType::kQ8_0);
              }),
              "GGUF writer 'gguf-misuse.gguf': tensor 'q' cannot be Q8_0: its innermost dimension 48 is not a multiple "
              "of 32 (store it as F16 or F32)");
    EXPECT_EQ(usage_error([&] { w.declare(std::string(64, 'n'), {4}, gguf::TensorType::kF32); }),
              "GGUF writer 'gguf-misuse.gguf': tensor name '" + std::string(64, 'n') +
                  "' must have 1 to 63 bytes (ggml's limit)");
    EXPECT_EQ(usage_error([&] { gguf::Value::array(gguf::ValueType::kInt32, {gguf::Value::uint32(1)}); }),
              "GGUF array of int32: element 0 is uint32 (a GGUF array holds one type)");
    w.declare("w", {2, 2}, gguf::TensorType::kF32);
    w.declare("v", {2}, gguf::TensorType::kF32);
    EXPECT_EQ(usage_error([&] { w.write("nope", at::zeros({2})); }),
              "GGUF writer 'gguf-misuse.gguf': tensor 'nope' was not declared");
    EXPECT_EQ(usage_error([&] { w.write("w", at::zeros({4})); }),
              "GGUF writer 'gguf-misuse.gguf': tensor 'w' was declared [2, 2]; write() needs a floating CPU tensor of "
              "that shape, got Float [4] on cpu");
    w.write("w", at::zeros({2, 2}));
    EXPECT_EQ(usage_error([&] { w.declare("late", {2}, gguf::TensorType::kF32); }),
              "GGUF writer 'gguf-misuse.gguf': tensor 'late' declared after the first tensor write");
    EXPECT_EQ(usage_error([&] { w.finish(); }),
              "GGUF writer 'gguf-misuse.gguf': tensor 'v' was declared but never written");
    EXPECT_TRUE(fs::exists(path + ".tmp"));
  }
  EXPECT_FALSE(fs::exists(path + ".tmp")) << "an unfinished file is removed";
  EXPECT_FALSE(fs::exists(path));
  EXPECT_EQ(usage_error([] { gguf::byte_level_vocabulary(100); }),
            "a byte-level vocabulary needs at least 256 ids (one per byte), the model has 100");
}

}  // namespace
