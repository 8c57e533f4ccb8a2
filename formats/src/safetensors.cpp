// SPDX-License-Identifier: Apache-2.0
// safetensors (tensor_file.h): an 8-byte little-endian header length N, N bytes of JSON
// {name: {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {k: v}},
// then the data; offsets are relative to the end of the header, data little-endian, row-major.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "json_text.h"
#include "source_file.h"
#include "tensor_read.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_file.h"

namespace zeroshard {
namespace {

using Json = nlohmann::ordered_json;

struct DtypeName {
  const char* name;
  c10::ScalarType type;
};
constexpr DtypeName kDtypes[] = {
    {"F32", c10::kFloat}, {"BF16", c10::kBFloat16}, {"F16", c10::kHalf},  {"F64", c10::kDouble}, {"I64", c10::kLong},
    {"I32", c10::kInt},   {"I16", c10::kShort},     {"I8", c10::kChar},   {"U8", c10::kByte},    {"BOOL", c10::kBool},
};

// The largest JSON header read (the format's reference reader has the same bound): a length field
// beyond it is damage or a crafted file, not a model.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// The deepest nesting of objects and arrays a header may have (it needs 3: the header, a tensor,
// its shape).
constexpr int kMaxHeaderDepth = 16;
constexpr double kMaxWhole = 9007199254740992.0;  // 2^53

// A JSON number that is a whole number in [0, 2^53] (exactly representable, and far from int64's
// end, so that it converts without overflow): an integer, or a float such as 2.0.
bool whole(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(kMaxWhole);
  if (v.is_number_integer()) return v.get<int64_t>() >= 0 && v.get<int64_t>() <= static_cast<int64_t>(kMaxWhole);
  if (!v.is_number_float()) return false;
  const double d = v.get<double>();
  return d >= 0 && d <= kMaxWhole && d == static_cast<double>(static_cast<int64_t>(d));
}

int64_t whole_value(const Json& v) {
  return v.is_number_float() ? static_cast<int64_t>(v.get<double>()) : v.get<int64_t>();
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The "zeroshard.aliases" metadata: "name=target;name=target".
std::map<std::string, std::string> parse_aliases(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find(';', pos);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq != std::string::npos) out[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
  return out;
}

class SafetensorsFile final : public TensorFile {
 public:
  SafetensorsFile(const std::string& path, std::shared_ptr<IoEngine> io) : path_(path), file_(path, std::move(io)) {
    parse();
  }

  const std::string& path() const override { return path_; }
  const char* format() const override { return "safetensors"; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  std::map<std::string, std::string> metadata() const override { return metadata_; }
  std::map<std::string, std::string> aliases() const override {
    auto it = metadata_.find("zeroshard.aliases");
    return it == metadata_.end() ? std::map<std::string, std::string>{} : parse_aliases(it->second);
  }

  void read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) override {
    const TensorInfo* info = &detail::find_tensor(*this, name);
    detail::check_read(path_, name, info->numel(), info->dtype, begin, count, dst);
    const size_t esize = c10::elementSize(info->dtype);
    const int64_t offset = data_start_ + offsets_.at(name) + begin * static_cast<int64_t>(esize);
    const int64_t bytes = count * static_cast<int64_t>(esize);
    if (info->dtype == dst.scalar_type()) {
      file_.read(dst.data_ptr(), bytes, offset, "tensor '" + name + "'");
    } else {
      const at::Tensor raw = detail::scratch(bytes);
      file_.read(raw.data_ptr(), bytes, offset, "tensor '" + name + "'");
      detail::convert_into(raw.data_ptr(), info->dtype, count, dst);
    }
    bytes_read_ += bytes;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    ZS_THROW(IoError, "'", path_, "' is not a valid safetensors file: ", what);
  }

  void parse() {
    const int64_t size = file_.size();
    ZS_REQUIRE(size >= 8, IoError, "'", path_, "' is not a valid safetensors file: ", size,
               " bytes, shorter than the 8-byte header length");
    unsigned char lenb[8];
    file_.read(lenb, 8, 0, "the header length");
    uint64_t len = 0;
    for (int i = 7; i >= 0; --i) len = (len << 8) | lenb[i];
    if (len > kMaxHeaderBytes) {
      bad("the header length " + std::to_string(len) + " is over the limit of " + std::to_string(kMaxHeaderBytes) +
          " bytes");
    }
    if (len > static_cast<uint64_t>(size - 8)) {
      bad("the header length " + std::to_string(len) + " runs past the end of the file (" + std::to_string(size) +
          " bytes): the file is truncated or not safetensors");
    }
    std::string header(static_cast<size_t>(len), '\0');
    file_.read(header.data(), static_cast<int64_t>(len), 8, "the JSON header");
    data_start_ = 8 + static_cast<int64_t>(len);
    const Json root =
        detail::parse_untrusted_json(header, "'" + path_ + "' is not a valid safetensors file: the JSON header",
                                     kMaxHeaderDepth);
    if (!root.is_object()) bad("the header is not a JSON object");
    const int64_t data_bytes = size - data_start_;
    for (const auto& [name, v] : root.items()) {
      if (name == "__metadata__") {
        if (!v.is_object()) bad("\"__metadata__\" is not an object");
        for (const auto& [k, mv] : v.items()) {
          if (!mv.is_string()) bad("\"__metadata__\" entry '" + k + "' is not a string");
          metadata_[k] = mv.get<std::string>();
        }
        continue;
      }
      infos_.push_back(entry(name, v, data_bytes));
    }
    check_layout(data_bytes);
  }

  // The tensors' byte ranges, in offset order, must tile the data section exactly: no overlap (two
  // names reading each other's bytes), no gap, nothing after the last tensor.
  void check_layout(int64_t data_bytes) const {
    std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> spans;
    for (const TensorInfo& t : infos_) {
      const int64_t begin = offsets_.at(t.name);
      spans.push_back({{begin, begin + nbytes_.at(t.name)}, t.name});
    }
    std::sort(spans.begin(), spans.end());
    int64_t covered = 0;
    std::string previous;
    for (const auto& [span, name] : spans) {
      if (span.first < covered) {
        bad("tensor '" + name + "' at data bytes [" + std::to_string(span.first) + ", " + std::to_string(span.second) +
            ") overlaps tensor '" + previous + "', which ends at " + std::to_string(covered));
      }
      if (span.first > covered) {
        bad("data bytes [" + std::to_string(covered) + ", " + std::to_string(span.first) + ") belong to no tensor" +
            (previous.empty() ? std::string() : " (after tensor '" + previous + "')"));
      }
      covered = span.second;
      previous = name;
    }
    if (covered != data_bytes) {
      bad("the tensors end at data byte " + std::to_string(covered) + " but the file holds " +
          std::to_string(data_bytes) + " data bytes after the header");
    }
  }

  TensorInfo entry(const std::string& name, const Json& v, int64_t data_bytes) {
    if (!v.is_object()) bad("tensor '" + name + "' is not an object");
    const auto dtype_it = v.find("dtype"), shape = v.find("shape"), offs = v.find("data_offsets");
    if (dtype_it == v.end() || !dtype_it->is_string()) bad("tensor '" + name + "' has no dtype string");
    if (shape == v.end() || !shape->is_array()) bad("tensor '" + name + "' has no shape array");
    if (offs == v.end() || !offs->is_array() || offs->size() != 2) {
      bad("tensor '" + name + "' has no data_offsets [begin, end]");
    }
    const std::string& dtype = dtype_it->get_ref<const std::string&>();
    TensorInfo info;
    info.name = name;
    bool known = false;
    for (const DtypeName& d : kDtypes) {
      if (dtype == d.name) info.dtype = d.type, known = true;
    }
    if (!known) bad("tensor '" + name + "' has dtype '" + dtype + "', which zeroshard does not read");
    int64_t want = static_cast<int64_t>(c10::elementSize(info.dtype));  // the tensor's bytes, checked for overflow
    for (const Json& d : *shape) {
      if (!whole(d)) bad("tensor '" + name + "' has a shape entry that is not a whole number >= 0");
      info.shape.push_back(whole_value(d));
    }
    for (int64_t d : info.shape) {
      if (__builtin_mul_overflow(want, d, &want)) {
        bad("tensor '" + name + "' has shape " + shape_text(info.shape) + ", whose " + dtype +
            " byte size overflows 64 bits");
      }
    }
    for (const Json& o : *offs) {
      if (!whole(o)) bad("tensor '" + name + "' has a data offset that is not a whole number >= 0");
    }
    const int64_t begin = whole_value((*offs)[0]), end = whole_value((*offs)[1]);
    if (end < begin) {
      bad("tensor '" + name + "' has data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
          "] that end before they begin");
    }
    if (end - begin != want) {
      bad("tensor '" + name + "' spans bytes [" + std::to_string(begin) + ", " + std::to_string(end) + ") but its " +
          dtype + " shape needs " + std::to_string(want) + " bytes");
    }
    ZS_REQUIRE(end <= data_bytes, IoError, "safetensors file '", path_, "' is truncated: tensor '", name,
               "' ends at data byte ", end, " but the file holds ", data_bytes, " data bytes");
    offsets_[name] = begin;
    nbytes_[name] = want;
    return info;
  }

  std::string path_;
  detail::SourceFile file_;
  int64_t data_start_ = 0;
  std::vector<TensorInfo> infos_;
  std::map<std::string, int64_t> offsets_;
  std::map<std::string, int64_t> nbytes_;
  std::map<std::string, std::string> metadata_;
};

// Writes all `bytes` at `offset` of `fd` (the file `tmp`); IoError naming `what` and the file.
void write_fully(int fd, const char* p, int64_t bytes, int64_t offset, const std::string& tmp, const std::string& what) {
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, static_cast<size_t>(std::min<int64_t>(bytes, int64_t{1} << 30)), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      ZS_THROW(IoError, "writing ", what, " to '", tmp, "' at offset ", offset, " failed: ", detail::errno_string(err),
               err == ENOSPC ? " (disk full)" : "");
    }
    p += n;
    offset += n;
    bytes -= n;
  }
}

// A rename into the directory of `path` is durable once the directory is synced.
void sync_directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int fd = ZS_CHECK_ERRNO(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC), "open of directory '", dir,
                                "' (to sync the rename of '", path, "')");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) ZS_THROW(IoError, "fsync of directory '", dir, "' (the rename of '", path, "'): ", detail::errno_string(err));
}

}  // namespace

const char* safetensors_dtype(c10::ScalarType t) {
  for (const DtypeName& d : kDtypes) {
    if (d.type == t) return d.name;
  }
  ZS_THROW(UsageError, "safetensors has no dtype for ", c10::toString(t));
}

std::unique_ptr<TensorFile> open_safetensors_file(const std::string& path, std::shared_ptr<IoEngine> io) {
  return std::make_unique<SafetensorsFile>(path, std::move(io));
}

// ---- writer ----

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorInfo> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tmp_(path_ + ".tmp") {
  Json header = Json::object();
  if (!metadata.empty()) {
    Json& meta = header["__metadata__"] = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  int64_t offset = 0;
  for (TensorInfo& t : tensors) {
    ZS_REQUIRE(t.name != "__metadata__", UsageError, "SafetensorsWriter '", path_,
               "': a tensor cannot be named \"__metadata__\" (the format reserves it)");
    ZS_REQUIRE(index_.count(t.name) == 0, UsageError, "SafetensorsWriter '", path_, "': tensor '", t.name,
               "' declared twice");
    Entry e;
    e.bytes = t.numel() * static_cast<int64_t>(c10::elementSize(t.dtype));
    e.offset = offset;
    Json& j = header[t.name] = Json::object();
    j["dtype"] = safetensors_dtype(t.dtype);
    j["shape"] = t.shape;
    j["data_offsets"] = {offset, offset + e.bytes};
    offset += e.bytes;
    e.info = std::move(t);
    index_[e.info.name] = entries_.size();
    entries_.push_back(std::move(e));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const Json::type_error& e) {
    ZS_THROW(UsageError, "SafetensorsWriter '", path_, "': a tensor name or metadata string is not UTF-8, which "
             "the JSON header must be (", e.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned (the format allows padding)
  data_start_ = 8 + static_cast<int64_t>(text.size());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int e = errno;
    ZS_THROW(IoError, "cannot create '", tmp_, "' (for '", path_, "'): ", detail::errno_string(e));
  }
  unsigned char lenb[8];
  uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) lenb[i] = static_cast<unsigned char>(len >> (8 * i));
  std::string head(reinterpret_cast<const char*>(lenb), 8);
  head += text;
  try {
    write_fully(fd_, head.data(), static_cast<int64_t>(head.size()), 0, tmp_, "the header");
  } catch (...) {  // the destructor does not run for a constructor that throws
    ::close(fd_);
    ::unlink(tmp_.c_str());
    throw;
  }
}


SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(tmp_.c_str());
}

void SafetensorsWriter::write(const std::string& name, const at::Tensor& t) {
  ZS_REQUIRE(!finished_, UsageError, "SafetensorsWriter '", path_, "': tensor '", name, "' written after finish()");
  auto it = index_.find(name);
  ZS_REQUIRE(it != index_.end(), UsageError, "SafetensorsWriter '", path_, "': tensor '", name, "' was not declared");
  Entry& e = entries_[it->second];
  ZS_REQUIRE(!e.written, UsageError, "SafetensorsWriter '", path_, "': tensor '", name, "' written twice");
  ZS_REQUIRE(t.device().is_cpu() && t.scalar_type() == e.info.dtype && t.sizes().vec() == e.info.shape, UsageError,
             "SafetensorsWriter '", path_, "': tensor '", name, "' was declared ", c10::toString(e.info.dtype), " ",
             c10::IntArrayRef(e.info.shape), " on cpu, got ", c10::toString(t.scalar_type()), " ", t.sizes(), " on ",
             t.device().str());
  const at::Tensor c = t.contiguous();
  write_fully(fd_, static_cast<const char*>(c.data_ptr()), e.bytes, data_start_ + e.offset, tmp_, "tensor '" + name + "'");
  e.written = true;
  bytes_written_ += e.bytes;
}

void SafetensorsWriter::finish() {
  ZS_REQUIRE(!finished_, UsageError, "SafetensorsWriter '", path_, "': finish() called twice");
  for (const Entry& e : entries_) {
    ZS_REQUIRE(e.written, UsageError, "SafetensorsWriter '", path_, "': tensor '", e.info.name,
               "' was declared but never written");
  }
  ZS_CHECK_ERRNO(::fsync(fd_), "fsync of '", tmp_, "'");
  const int fd = fd_;
  fd_ = -1;  // closed below even when close() reports an error: never closed twice (the number may be reused)
  ZS_CHECK_ERRNO(::close(fd), "close of '", tmp_, "'");
  ZS_CHECK_ERRNO(::rename(tmp_.c_str(), path_.c_str()), "rename of '", tmp_, "' to '", path_, "'");
  finished_ = true;
  sync_directory_of(path_);
}

}  // namespace zeroshard
