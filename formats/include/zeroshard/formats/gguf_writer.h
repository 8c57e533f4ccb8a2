// SPDX-License-Identifier: Apache-2.0
#pragma once
// GGUF v3 files (llama.cpp's model format), written tensor by tensor: metadata key/values (every
// GGUF type, arrays included) and tensor declarations first, then each tensor's data at its
// aligned offset, in any order, so host memory stays near the largest tensor. Little-endian;
// tensor dimensions are stored innermost first (PyTorch's shape reversed); data starts at a
// multiple of general.alignment (32, written as a key) and each tensor's offset is one too.
// Tensor types: F32, F16 (round to nearest even) and Q8_0 (blocks of 32 along the innermost
// dimension: an fp16 scale absmax/127 and 32 int8 values rounded half away from zero, as
// llama.cpp's reference quantizer does). The file is written as <path>.tmp and renamed by finish().
//
//   zeroshard::gguf::Writer w("model.gguf");
//   w.add("general.architecture", gguf::Value::string("llama"));
//   w.declare("token_embd.weight", {vocab, hidden}, gguf::TensorType::kQ8_0);
//   w.write("token_embd.weight", embedding);   // any floating dtype, CPU, the declared shape
//   w.finish();
//
// Errors: UsageError for a duplicate key or tensor, a name GGUF cannot hold, a write of an
// undeclared tensor or of the wrong shape, a Q8_0 tensor whose innermost dimension is not a
// multiple of 32, a declaration after the first write; IoError naming the file for I/O failures.
// Thread-safety: one thread at a time.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zeroshard::gguf {

// GGUF's metadata value types (the numbers are the format's).
enum class ValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};
const char* to_string(ValueType t);

// ggml tensor types this writer produces (the numbers are ggml's).
enum class TensorType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8 };
const char* to_string(TensorType t);

// One metadata value: a number of a given GGUF type, a bool, a string, or an array whose elements
// all have one type (arrays may nest).
class Value {
 public:
  static Value uint8(uint8_t v) { return integer(ValueType::kUint8, v); }
  static Value int8(int8_t v) { return integer(ValueType::kInt8, v); }
  static Value uint16(uint16_t v) { return integer(ValueType::kUint16, v); }
  static Value int16(int16_t v) { return integer(ValueType::kInt16, v); }
  static Value uint32(uint32_t v) { return integer(ValueType::kUint32, v); }
  static Value int32(int32_t v) { return integer(ValueType::kInt32, v); }
  static Value uint64(uint64_t v);
  static Value int64(int64_t v) { return integer(ValueType::kInt64, v); }
  static Value float32(float v);
  static Value float64(double v);
  static Value boolean(bool v) { return integer(ValueType::kBool, v ? 1 : 0); }
  static Value string(std::string v);
  // UsageError when an element's type is not `element`.
  static Value array(ValueType element, std::vector<Value> items);
  static Value strings(const std::vector<std::string>& items);
  static Value int32s(const std::vector<int32_t>& items);
  static Value float32s(const std::vector<float>& items);

  ValueType type() const { return type_; }
  ValueType element_type() const { return element_; }  // arrays
  int64_t as_int() const { return int_; }              // integer types and bool
  uint64_t as_uint64() const { return uint_; }         // kUint64
  double as_double() const { return real_; }           // kFloat32, kFloat64
  const std::string& as_string() const { return text_; }
  const std::vector<Value>& items() const { return items_; }

 private:
  static Value integer(ValueType t, int64_t v);
  ValueType type_ = ValueType::kUint8;
  ValueType element_ = ValueType::kUint8;
  int64_t int_ = 0;
  uint64_t uint_ = 0;
  double real_ = 0;
  std::string text_;
  std::vector<Value> items_;
};

// Bytes a tensor of `type` and `shape` (PyTorch order) takes in the file.
int64_t tensor_bytes(TensorType type, const std::vector<int64_t>& shape);
// Q8_0 of `n` floats (a multiple of 32) into `out` (n / 32 * 34 bytes).
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);

class Writer {
 public:
  // IoError naming the file when it cannot be created. `alignment`: a multiple of 8.
  explicit Writer(std::string path, uint32_t alignment = 32);
  ~Writer();  // an unfinished file is removed
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Metadata, kept in the order added. "general.alignment" is written by the writer.
  void add(const std::string& key, Value value);
  // A tensor of `shape` (PyTorch order, 1 to 4 dimensions) stored as `type`.
  void declare(const std::string& name, const std::vector<int64_t>& shape, TensorType type);
  // The data of declared tensor `name`: a CPU tensor of its shape, any floating dtype (converted
  // to fp32, then to the declared type). The first write writes the header.
  void write(const std::string& name, const at::Tensor& t);
  // Checks every declared tensor was written, syncs, renames into place.
  void finish();

  const std::string& path() const { return path_; }
  int64_t bytes_written() const { return bytes_written_; }

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> shape;
    TensorType type;
    int64_t offset = 0;  // from the start of the data section
    int64_t bytes = 0;
    bool written = false;
  };
  void write_header();
  void write_at(const void* p, int64_t bytes, int64_t offset, const std::string& what);

  std::string path_, tmp_;
  uint32_t alignment_;
  int fd_ = -1;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
  int64_t data_start_ = -1;  // set when the header is written
  int64_t data_bytes_ = 0;
  int64_t bytes_written_ = 0;
  bool finished_ = false;
};

}  // namespace zeroshard::gguf
