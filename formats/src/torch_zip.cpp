// SPDX-License-Identifier: Apache-2.0
// torch.save and TorchScript/LibTorch zip archives (tensor_file.h). PyTorchStreamReader opens the
// zip and hands over the small pickles (data.pkl, constants.pkl) and where each storage record's
// bytes start; the zip's central directory (zip_directory.h) tells each record's size and whether
// it is stored uncompressed. Tensor data is then read with pread, only the bytes a read() needs.

#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "pickle.h"
#include "source_file.h"
#include "tensor_read.h"
#include "torch_pickle.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_file.h"
#include "zip_directory.h"

namespace zeroshard {
namespace {

using detail::PickledTensor;

struct StoredTensor {
  PickledTensor t;
  int64_t data_start = 0;  // the file offset of the storage record's first byte
  bool contiguous = true;  // row-major with no gaps: a range of elements is a range of bytes
};

bool row_major(const PickledTensor& t) {
  int64_t expected = 1;
  for (size_t d = t.shape.size(); d-- > 0;) {
    if (t.shape[d] != 1 && t.strides[d] != expected) return false;
    expected *= t.shape[d];
  }
  return true;
}

// The storage bytes tensor `t` spans: [0, end) of its record (0 when it has no elements).
int64_t storage_bytes_needed(const PickledTensor& t, const std::string& path) {
  int64_t last = t.storage_offset, numel = 1;
  bool overflow = t.storage_offset < 0;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    overflow |= t.shape[d] < 0 || t.strides[d] < 0;
    int64_t step = 0;
    overflow |= __builtin_mul_overflow(t.shape[d] - 1, t.strides[d], &step) || __builtin_add_overflow(last, step, &last);
    overflow |= __builtin_mul_overflow(numel, t.shape[d], &numel);
  }
  ZS_REQUIRE(!overflow, IoError, "'", path, "': tensor '", t.name, "' has a negative or overflowing offset, size or "
             "stride (the archive is damaged)");
  if (numel == 0) return 0;
  int64_t end = 0;
  ZS_REQUIRE(!__builtin_mul_overflow(last + 1, static_cast<int64_t>(c10::elementSize(t.dtype)), &end), IoError, "'",
             path, "': tensor '", t.name, "' spans more bytes than a file can hold (the archive is damaged)");
  return end;
}

// Storage indices of a strided tensor's elements, in row-major order from a given element.
class StridedIndex {
 public:
  StridedIndex(const PickledTensor& t, int64_t element) : shape_(t.shape), strides_(t.strides), at_(t.shape.size()) {
    index_ = t.storage_offset;
    for (size_t d = shape_.size(); d-- > 0;) {
      at_[d] = element % shape_[d];
      element /= shape_[d];
      index_ += at_[d] * strides_[d];
    }
  }
  int64_t index() const { return index_; }
  void next() {
    for (size_t d = shape_.size(); d-- > 0;) {
      index_ += strides_[d];
      if (++at_[d] < shape_[d]) return;
      index_ -= at_[d] * strides_[d];
      at_[d] = 0;
    }
  }

 private:
  const std::vector<int64_t>& shape_;
  const std::vector<int64_t>& strides_;
  std::vector<int64_t> at_;
  int64_t index_ = 0;
};

// PyTorchStreamReader reads through the SourceFile too. miniz, under it, is C: nothing may be
// thrown through it, so a failed read is kept and returned short; zip_call reports the kept error.
class SourceAdapter final : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit SourceAdapter(detail::SourceFile& file) : file_(file) {}
  size_t size() const override { return static_cast<size_t>(file_.size()); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    try {
      file_.read(buf, static_cast<int64_t>(n), static_cast<int64_t>(pos), "the zip archive");
      return n;
    } catch (const Error& e) {
      if (error_.empty()) error_ = e.message();
      return 0;
    }
  }
  const std::string& path() const { return file_.path(); }
  const std::string& error() const { return error_; }

 private:
  detail::SourceFile& file_;
  mutable std::string error_;
};

// PyTorchStreamReader's errors are c10::Error; ours name the file. A read that failed under it is
// reported with its own error, also where the reader did not notice (it ignores the result of its
// magic-number read).
template <typename Fn>
auto zip_call(const SourceAdapter& src, const char* what, Fn&& fn) {
  try {
    auto result = fn();
    ZS_REQUIRE(src.error().empty(), IoError, src.error());
    return result;
  } catch (const c10::Error& e) {
    ZS_REQUIRE(src.error().empty(), IoError, src.error());
    ZS_THROW(IoError, "'", src.path(), "' is not a readable torch zip archive (", what,
             " failed; is it truncated or damaged?): ", e.what_without_backtrace());
  }
}

std::string record_text(caffe2::serialize::PyTorchStreamReader& zip, const SourceAdapter& src, const std::string& name) {
  return zip_call(src, "reading its records", [&] {
    auto [data, size] = zip.getRecord(name);
    return std::string(static_cast<const char*>(data.get()), size);
  });
}

class TorchZipFile final : public TensorFile {
 public:
  TorchZipFile(const std::string& path, std::shared_ptr<IoEngine> io)
      : file_(path, std::move(io)), path_(path), adapter_(std::make_shared<SourceAdapter>(file_)) {
    load();
  }

  const std::string& path() const override { return path_; }
  const char* format() const override { return format_; }
  const std::vector<TensorInfo>& tensors() const override { return infos_; }
  std::map<std::string, std::string> aliases() const override { return aliases_; }

  void read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) override {
    const TensorInfo& info = detail::find_tensor(*this, name);
    detail::check_read(path_, name, info.numel(), info.dtype, begin, count, dst);
    if (count == 0) return;
    const StoredTensor& s = stored_[static_cast<size_t>(&info - infos_.data())];
    if (s.contiguous) read_range(s, begin, count, dst);
    else gather(s, begin, count, dst);
  }

 private:
  void load();
  std::vector<PickledTensor> unpickle(caffe2::serialize::PyTorchStreamReader& zip);
  void place(const std::vector<PickledTensor>& pickled, caffe2::serialize::PyTorchStreamReader& zip);
  void find_aliases();

  // Elements [begin, begin + count) of a row-major tensor: one byte range.
  void read_range(const StoredTensor& s, int64_t begin, int64_t count, const at::Tensor& dst) {
    const auto esize = static_cast<int64_t>(c10::elementSize(s.t.dtype));
    const int64_t offset = s.data_start + (s.t.storage_offset + begin) * esize, bytes = count * esize;
    const std::string what = "tensor '" + s.t.name + "'";
    if (s.t.dtype == dst.scalar_type()) {
      file_.read(dst.data_ptr(), bytes, offset, what);
    } else {
      const at::Tensor raw = detail::scratch(bytes);
      file_.read(raw.data_ptr(), bytes, offset, what);
      detail::convert_into(raw.data_ptr(), s.t.dtype, count, dst);
    }
    bytes_read_ += bytes;
  }

  // A strided view: the span of storage its elements [begin, begin + count) cover, then a gather.
  void gather(const StoredTensor& s, int64_t begin, int64_t count, const at::Tensor& dst) {
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    StridedIndex it(s.t, begin);
    for (int64_t i = 0; i < count; ++i, it.next()) lo = std::min(lo, it.index()), hi = std::max(hi, it.index());
    const auto esize = static_cast<int64_t>(c10::elementSize(s.t.dtype));
    const at::Tensor span = detail::scratch((hi - lo + 1) * esize), packed = detail::scratch(count * esize);
    const auto* from = static_cast<const char*>(span.data_ptr());
    auto* to = static_cast<char*>(packed.data_ptr());
    file_.read(span.data_ptr(), span.numel(), s.data_start + lo * esize, "tensor '" + s.t.name + "'");
    StridedIndex at(s.t, begin);
    for (int64_t i = 0; i < count; ++i, at.next()) std::copy_n(from + (at.index() - lo) * esize, esize, to + i * esize);
    detail::convert_into(packed.data_ptr(), s.t.dtype, count, dst);
    bytes_read_ += span.numel();
  }

  detail::SourceFile file_;
  std::string path_;
  std::shared_ptr<SourceAdapter> adapter_;
  const char* format_ = "torch";
  std::vector<TensorInfo> infos_;
  std::vector<StoredTensor> stored_;  // parallel to infos_
  std::map<std::string, std::string> aliases_;
};

void TorchZipFile::load() {
  auto zip = zip_call(*adapter_, "opening it", [&] { return std::make_unique<caffe2::serialize::PyTorchStreamReader>(adapter_); });
  if (zip_call(*adapter_, "looking up records", [&] { return zip->hasRecord("byteorder"); })) {
    const std::string order = record_text(*zip, *adapter_, "byteorder");
    ZS_REQUIRE(order == "little", IoError, "'", path_, "' was written on a machine of byte order '", order,
               "' (its byteorder record); zeroshard reads little-endian archives only: load it and save it again on a "
               "little-endian machine");
  }
  place(unpickle(*zip), *zip);
  find_aliases();
}

std::vector<PickledTensor> TorchZipFile::unpickle(caffe2::serialize::PyTorchStreamReader& zip) {
  if (!zip_call(*adapter_, "looking up records", [&] { return zip.hasRecord("data.pkl"); })) {
    const auto names = zip_call(*adapter_, "listing records", [&] { return zip.getAllRecords(); });
    std::string shown;
    for (size_t i = 0; i < names.size() && i < 8; ++i) shown += (i ? ", " : "") + names[i];
    ZS_THROW(IoError, "'", path_, "' is a zip archive without a data.pkl record, so not a torch.save or TorchScript "
             "archive (its records: ", shown, names.size() > 8 ? ", ..." : "", ")");
  }
  const std::string where = "'" + path_ + "': data.pkl";
  const detail::PickleRef root = detail::read_pickle(record_text(zip, *adapter_, "data.pkl"), where);
  if (root->is(detail::PickleValue::Kind::kObject) && root->text.rfind("__torch__.", 0) == 0) format_ = "torchscript";
  std::vector<PickledTensor> out = detail::pickled_tensors(root, "", "data", where);
  // TorchScript: tensors the code refers to as CONSTANTS.c<i> (e.g. captured by torch.jit.trace).
  if (format_ == std::string("torchscript") &&
      zip_call(*adapter_, "looking up records", [&] { return zip.hasRecord("constants.pkl"); })) {
    const std::string cwhere = "'" + path_ + "': constants.pkl";
    const detail::PickleRef constants = detail::read_pickle(record_text(zip, *adapter_, "constants.pkl"), cwhere);
    for (size_t i = 0; i < constants->items.size(); ++i) {
      auto c = detail::pickled_tensors(constants->items[i], "CONSTANTS.c" + std::to_string(i), "constants", cwhere);
      out.insert(out.end(), c.begin(), c.end());
    }
  }
  return out;
}

// Each tensor's storage record: where its bytes start (PyTorchStreamReader), its size and method
// (the central directory), checked to hold every byte the tensor spans.
void TorchZipFile::place(const std::vector<PickledTensor>& pickled, caffe2::serialize::PyTorchStreamReader& zip) {
  const std::vector<detail::ZipRecord> directory = detail::read_zip_directory(file_);
  const std::string folder = directory.empty() ? "" : directory[0].name.substr(0, directory[0].name.find('/') + 1);
  std::map<std::string, const detail::ZipRecord*> by_name;
  for (const auto& r : directory) by_name[r.name] = &r;
  std::set<std::string> names;
  for (const PickledTensor& t : pickled) {
    ZS_REQUIRE(names.insert(t.name).second, IoError, "'", path_, "' holds two tensors named '", t.name, "'");
    auto it = by_name.find(folder + t.record);
    ZS_REQUIRE(it != by_name.end(), IoError, "'", path_, "': tensor '", t.name, "' refers to storage record '",
               folder + t.record, "', which the archive does not have (it is damaged or incomplete)");
    const detail::ZipRecord& r = *it->second;
    ZS_REQUIRE(r.method == 0, IoError, "'", path_, "': storage record '", r.name, "' of tensor '", t.name,
               "' is compressed (zip method ", r.method, "); torch archives keep storages uncompressed: save the "
               "model again with torch.save instead of re-zipping the archive");
    const int64_t needed = storage_bytes_needed(t, path_);
    ZS_REQUIRE(needed <= r.size, IoError, "'", path_, "': tensor '", t.name, "' needs ", needed,
               " bytes of storage record '", r.name, "', which holds only ", r.size,
               " bytes (the archive is truncated or damaged)");
    StoredTensor s;
    s.t = t;
    s.contiguous = row_major(t);
    s.data_start = static_cast<int64_t>(zip_call(*adapter_, "locating a storage", [&] { return zip.getRecordOffset(t.record); }));
    stored_.push_back(std::move(s));
    infos_.push_back(TensorInfo{t.name, t.dtype, t.shape});
  }
}

// Tied tensors: the same storage record, offset, shape and strides as an earlier tensor.
void TorchZipFile::find_aliases() {
  std::map<std::tuple<std::string, int64_t, std::vector<int64_t>, std::vector<int64_t>>, std::string> first;
  for (const StoredTensor& s : stored_) {
    auto [it, inserted] = first.emplace(std::make_tuple(s.t.record, s.t.storage_offset, s.t.shape, s.t.strides), s.t.name);
    if (!inserted) aliases_[s.t.name] = it->second;
  }
}

}  // namespace

std::unique_ptr<TensorFile> open_torch_zip_file(const std::string& path, std::shared_ptr<IoEngine> io) {
  return std::make_unique<TorchZipFile>(path, std::move(io));
}

}  // namespace zeroshard
