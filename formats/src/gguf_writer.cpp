// SPDX-License-Identifier: Apache-2.0
// GGUF v3 writer (gguf_writer.h): the header (magic, version, counts), metadata key/values, tensor
// infos, padding to the alignment, then tensor data at aligned offsets written with pwrite.

#include "zeroshard/formats/gguf_writer.h"

#include <ATen/ops/empty.h>
#include <c10/util/Half.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "zeroshard/base/error.h"

namespace zeroshard::gguf {
namespace {

constexpr uint32_t kVersion = 3;
constexpr int64_t kQ8Block = 32;
constexpr int64_t kQ8BlockBytes = 2 + kQ8Block;
constexpr size_t kMaxTensorName = 63;  // ggml keeps names in 64 bytes with a terminating zero

int64_t aligned(int64_t offset, int64_t alignment) { return (offset + alignment - 1) / alignment * alignment; }

// Little-endian serialisation into a byte string.
struct Bytes {
  std::string out;
  template <typename T>
  void raw(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));  // the hosts zeroshard runs on are little-endian
    out.append(b, sizeof(T));
  }
  void text(const std::string& s) {
    raw<uint64_t>(s.size());
    out += s;
  }
  void value(const Value& v);
};

void Bytes::value(const Value& v) {
  switch (v.type()) {
    case ValueType::kUint8: raw<uint8_t>(static_cast<uint8_t>(v.as_int())); break;
    case ValueType::kInt8: raw<int8_t>(static_cast<int8_t>(v.as_int())); break;
    case ValueType::kUint16: raw<uint16_t>(static_cast<uint16_t>(v.as_int())); break;
    case ValueType::kInt16: raw<int16_t>(static_cast<int16_t>(v.as_int())); break;
    case ValueType::kUint32: raw<uint32_t>(static_cast<uint32_t>(v.as_int())); break;
    case ValueType::kInt32: raw<int32_t>(static_cast<int32_t>(v.as_int())); break;
    case ValueType::kFloat32: raw<float>(static_cast<float>(v.as_double())); break;
    case ValueType::kBool: raw<uint8_t>(v.as_int() != 0 ? 1 : 0); break;
    case ValueType::kString: text(v.as_string()); break;
    case ValueType::kUint64: raw<uint64_t>(v.as_uint64()); break;
    case ValueType::kInt64: raw<int64_t>(v.as_int()); break;
    case ValueType::kFloat64: raw<double>(v.as_double()); break;
    case ValueType::kArray:
      raw<uint32_t>(static_cast<uint32_t>(v.element_type()));
      raw<uint64_t>(v.items().size());
      for (const Value& item : v.items()) value(item);
      break;
  }
}

}  // namespace

const char* to_string(ValueType t) {
  switch (t) {
    case ValueType::kUint8: return "uint8";
    case ValueType::kInt8: return "int8";
    case ValueType::kUint16: return "uint16";
    case ValueType::kInt16: return "int16";
    case ValueType::kUint32: return "uint32";
    case ValueType::kInt32: return "int32";
    case ValueType::kFloat32: return "float32";
    case ValueType::kBool: return "bool";
    case ValueType::kString: return "string";
    case ValueType::kArray: return "array";
    case ValueType::kUint64: return "uint64";
    case ValueType::kInt64: return "int64";
    case ValueType::kFloat64: return "float64";
  }
  return "?";
}

const char* to_string(TensorType t) {
  switch (t) {
    case TensorType::kF32: return "F32";
    case TensorType::kF16: return "F16";
    case TensorType::kQ8_0: return "Q8_0";
  }
  return "?";
}

// ---- values ----

Value Value::integer(ValueType t, int64_t v) {
  Value out;
  out.type_ = t;
  out.int_ = v;
  return out;
}

Value Value::uint64(uint64_t v) {
  Value out;
  out.type_ = ValueType::kUint64;
  out.uint_ = v;
  return out;
}

Value Value::float32(float v) {
  Value out;
  out.type_ = ValueType::kFloat32;
  out.real_ = v;
  return out;
}

Value Value::float64(double v) {
  Value out;
  out.type_ = ValueType::kFloat64;
  out.real_ = v;
  return out;
}

Value Value::string(std::string v) {
  Value out;
  out.type_ = ValueType::kString;
  out.text_ = std::move(v);
  return out;
}

Value Value::array(ValueType element, std::vector<Value> items) {
  for (size_t i = 0; i < items.size(); ++i) {
    ZS_REQUIRE(items[i].type() == element, UsageError, "GGUF array of ", to_string(element), ": element ", i, " is ",
               to_string(items[i].type()), " (a GGUF array holds one type)");
  }
  Value out;
  out.type_ = ValueType::kArray;
  out.element_ = element;
  out.items_ = std::move(items);
  return out;
}

Value Value::strings(const std::vector<std::string>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (const std::string& s : items) v.push_back(string(s));
  return array(ValueType::kString, std::move(v));
}

Value Value::int32s(const std::vector<int32_t>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (int32_t x : items) v.push_back(int32(x));
  return array(ValueType::kInt32, std::move(v));
}

Value Value::float32s(const std::vector<float>& items) {
  std::vector<Value> v;
  v.reserve(items.size());
  for (float x : items) v.push_back(float32(x));
  return array(ValueType::kFloat32, std::move(v));
}

// ---- tensor data ----

int64_t tensor_bytes(TensorType type, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  switch (type) {
    case TensorType::kF32: return 4 * n;
    case TensorType::kF16: return 2 * n;
    case TensorType::kQ8_0: return n / kQ8Block * kQ8BlockBytes;
  }
  return 0;
}

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  ZS_REQUIRE(n % kQ8Block == 0, UsageError, "Q8_0 quantizes blocks of ", kQ8Block, " values, got ", n);
  for (int64_t b = 0; b < n / kQ8Block; ++b, x += kQ8Block, out += kQ8BlockBytes) {
    float amax = 0.0f;
    for (int64_t j = 0; j < kQ8Block; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t scale = c10::Half(d).x;  // round to nearest even, as numpy's and ggml's conversions
    std::memcpy(out, &scale, 2);
    for (int64_t j = 0; j < kQ8Block; ++j) {
      out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));  // half away from zero
    }
  }
}

// ---- writer ----

Writer::Writer(std::string path, uint32_t alignment)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), alignment_(alignment) {
  ZS_REQUIRE(alignment_ > 0 && alignment_ % 8 == 0, UsageError, "GGUF writer '", path_, "': alignment ", alignment_,
             " is not a positive multiple of 8");
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int e = errno;
    ZS_THROW(IoError, "cannot create '", tmp_, "' (for '", path_, "'): ", detail::errno_string(e));
  }
}

Writer::~Writer() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(tmp_.c_str());
}

void Writer::add(const std::string& key, Value value) {
  ZS_REQUIRE(data_start_ < 0, UsageError, "GGUF writer '", path_, "': key '", key,
             "' added after the first tensor write");
  ZS_REQUIRE(!key.empty() && key.size() < 65536 &&
                 std::all_of(key.begin(), key.end(), [](char c) { return c > ' ' && c < 127; }),
             UsageError, "GGUF writer '", path_, "': key '", key, "' is not 1 to 65535 printable ASCII characters");
  ZS_REQUIRE(key != "general.alignment", UsageError, "GGUF writer '", path_,
             "': general.alignment is written by the writer (its constructor takes the alignment)");
  for (const auto& kv : metadata_) {
    ZS_REQUIRE(kv.first != key, UsageError, "GGUF writer '", path_, "': key '", key, "' added twice");
  }
  metadata_.emplace_back(key, std::move(value));
}

void Writer::declare(const std::string& name, const std::vector<int64_t>& shape, TensorType type) {
  ZS_REQUIRE(data_start_ < 0, UsageError, "GGUF writer '", path_, "': tensor '", name,
             "' declared after the first tensor write");
  ZS_REQUIRE(!name.empty() && name.size() <= kMaxTensorName, UsageError, "GGUF writer '", path_, "': tensor name '",
             name, "' must have 1 to ", kMaxTensorName, " bytes (ggml's limit)");
  ZS_REQUIRE(index_.count(name) == 0, UsageError, "GGUF writer '", path_, "': tensor '", name, "' declared twice");
  ZS_REQUIRE(!shape.empty() && shape.size() <= 4, UsageError, "GGUF writer '", path_, "': tensor '", name, "' has ",
             shape.size(), " dimensions; GGUF holds 1 to 4");
  for (int64_t d : shape) {
    ZS_REQUIRE(d > 0, UsageError, "GGUF writer '", path_, "': tensor '", name, "' has a dimension ", d,
               " (must be > 0)");
  }
  ZS_REQUIRE(type != TensorType::kQ8_0 || shape.back() % kQ8Block == 0, UsageError, "GGUF writer '", path_,
             "': tensor '", name, "' cannot be Q8_0: its innermost dimension ", shape.back(), " is not a multiple of ",
             kQ8Block, " (store it as F16 or F32)");
  Tensor t;
  t.name = name;
  t.shape = shape;
  t.type = type;
  t.bytes = tensor_bytes(type, shape);
  t.offset = data_bytes_;
  data_bytes_ = aligned(data_bytes_ + t.bytes, alignment_);
  index_[name] = tensors_.size();
  tensors_.push_back(std::move(t));
}

void Writer::write_header() {
  Bytes b;
  b.out.append("GGUF", 4);
  b.raw<uint32_t>(kVersion);
  b.raw<uint64_t>(tensors_.size());
  b.raw<uint64_t>(metadata_.size() + 1);
  b.text("general.alignment");
  b.raw<uint32_t>(static_cast<uint32_t>(ValueType::kUint32));
  b.raw<uint32_t>(alignment_);
  for (const auto& [key, value] : metadata_) {
    b.text(key);
    b.raw<uint32_t>(static_cast<uint32_t>(value.type()));
    b.value(value);
  }
  for (const Tensor& t : tensors_) {
    b.text(t.name);
    b.raw<uint32_t>(static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) b.raw<uint64_t>(static_cast<uint64_t>(t.shape[d]));
    b.raw<uint32_t>(static_cast<uint32_t>(t.type));
    b.raw<uint64_t>(static_cast<uint64_t>(t.offset));
  }
  data_start_ = aligned(static_cast<int64_t>(b.out.size()), alignment_);
  b.out.resize(static_cast<size_t>(data_start_), '\0');
  write_at(b.out.data(), data_start_, 0, "the header");
  // The file's full length now, so the padding after the last tensor is there whatever the order
  // of the writes.
  ZS_CHECK_ERRNO(::ftruncate(fd_, data_start_ + data_bytes_), "ftruncate of '", tmp_, "'");
}

void Writer::write_at(const void* p, int64_t bytes, int64_t offset, const std::string& what) {
  const char* c = static_cast<const char*>(p);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd_, c, static_cast<size_t>(std::min<int64_t>(bytes, int64_t{1} << 30)), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ZS_THROW(IoError, "writing ", what, " to '", tmp_, "' at offset ", offset,
               " failed: ", detail::errno_string(err));
    }
    c += n;
    offset += n;
    bytes -= n;
    bytes_written_ += n;
  }
}

void Writer::write(const std::string& name, const at::Tensor& t) {
  ZS_REQUIRE(!finished_, UsageError, "GGUF writer '", path_, "': tensor '", name, "' written after finish()");
  auto it = index_.find(name);
  ZS_REQUIRE(it != index_.end(), UsageError, "GGUF writer '", path_, "': tensor '", name, "' was not declared");
  Tensor& e = tensors_[it->second];
  ZS_REQUIRE(!e.written, UsageError, "GGUF writer '", path_, "': tensor '", name, "' written twice");
  ZS_REQUIRE(t.defined() && t.device().is_cpu() && t.is_floating_point() && t.sizes().vec() == e.shape, UsageError,
             "GGUF writer '", path_, "': tensor '", name, "' was declared ", c10::IntArrayRef(e.shape),
             "; write() needs a floating CPU tensor of that shape, got ",
             t.defined() ? c10::toString(t.scalar_type()) : "an undefined tensor", " ",
             t.defined() ? t.sizes() : c10::IntArrayRef{}, t.defined() ? " on " + t.device().str() : "");
  if (data_start_ < 0) write_header();
  const at::Tensor f = t.to(at::kFloat).contiguous();
  at::Tensor out;
  switch (e.type) {
    case TensorType::kF32: out = f; break;
    case TensorType::kF16: out = f.to(at::kHalf); break;
    case TensorType::kQ8_0:
      out = at::empty({e.bytes}, at::TensorOptions().dtype(at::kByte));
      quantize_q8_0(f.data_ptr<float>(), f.numel(), out.data_ptr<uint8_t>());
      break;
  }
  write_at(out.data_ptr(), e.bytes, data_start_ + e.offset, "tensor '" + name + "'");
  e.written = true;
}

void Writer::finish() {
  ZS_REQUIRE(!finished_, UsageError, "GGUF writer '", path_, "': finish() called twice");
  for (const Tensor& t : tensors_) {
    ZS_REQUIRE(t.written, UsageError, "GGUF writer '", path_, "': tensor '", t.name,
               "' was declared but never written");
  }
  if (data_start_ < 0) write_header();  // a file of metadata only
  ZS_CHECK_ERRNO(::fsync(fd_), "fsync of '", tmp_, "'");
  ZS_CHECK_ERRNO(::close(fd_), "close of '", tmp_, "'");
  fd_ = -1;
  ZS_CHECK_ERRNO(::rename(tmp_.c_str(), path_.c_str()), "rename of '", tmp_, "' to '", path_, "'");
  finished_ = true;
}

}  // namespace zeroshard::gguf
