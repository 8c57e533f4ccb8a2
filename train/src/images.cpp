// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/train/images.h"

#include <ATen/ops/empty.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

namespace zeroshard {
namespace {

// gzread reads gzip files and, transparently, plain ones.
struct GzFile {
  gzFile f = nullptr;
  std::string path;
  explicit GzFile(const std::string& p) : path(p) {
    errno = 0;
    f = gzopen(p.c_str(), "rb");
    if (f == nullptr) {
      ZS_THROW(IoError, "cannot open '", p, "': ", errno != 0 ? detail::errno_string(errno) : "out of memory");
    }
  }
  ~GzFile() {
    if (f != nullptr) gzclose(f);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to n bytes; returns how many were read (fewer only at the end of the data).
  size_t read(void* dst, size_t n) {
    size_t done = 0;
    auto* out = static_cast<unsigned char*>(dst);
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30));
      const int got = gzread(f, out + done, chunk);
      if (got < 0) {
        int err = 0;
        const char* msg = gzerror(f, &err);
        if (err == Z_ERRNO) ZS_THROW(IoError, "error reading '", path, "': ", detail::errno_string(errno));
        ZS_THROW(DataError, "corrupt gzip data in '", path, "': ", msg);
      }
      if (got == 0) break;
      done += static_cast<size_t>(got);
    }
    return done;
  }
};

}  // namespace

at::Tensor read_idx_file(const std::string& path) {
  std::error_code ec;
  ZS_REQUIRE(std::filesystem::exists(path, ec), IoError, "IDX file '", path, "' does not exist");
  GzFile in(path);
  unsigned char header[4];
  ZS_REQUIRE(in.read(header, 4) == 4, DataError, "IDX file '", path, "' is shorter than its 4-byte magic number");
  ZS_REQUIRE(header[0] == 0 && header[1] == 0, DataError, "IDX file '", path, "' has a bad magic number (first bytes ",
             int(header[0]), " ", int(header[1]), ", expected 0 0): not an IDX file");
  if (header[2] != 0x08) {
    char code[8];
    std::snprintf(code, sizeof(code), "0x%02x", header[2]);
    ZS_THROW(DataError, "IDX file '", path, "' holds element type ", code, "; only unsigned bytes (0x08) are supported");
  }
  const int ndim = header[3];
  ZS_REQUIRE(ndim >= 1 && ndim <= 4, DataError, "IDX file '", path, "' declares ", ndim,
             " dimensions; expected 1 to 4");
  std::vector<int64_t> dims;
  int64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    unsigned char b[4];
    ZS_REQUIRE(in.read(b, 4) == 4, DataError, "IDX file '", path, "' ends inside its header (dimension ", d, ")");
    const uint32_t v = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | uint32_t(b[3]);
    ZS_REQUIRE(v > 0 && v < (1u << 31), DataError, "IDX file '", path, "' has dimension ", d, " = ", v,
               "; expected 1 to 2^31-1");
    dims.push_back(static_cast<int64_t>(v));
    total *= static_cast<int64_t>(v);
    ZS_REQUIRE(total <= (int64_t{1} << 40), DataError, "IDX file '", path, "' declares more than 2^40 elements");
  }
  at::Tensor t = at::empty(dims, at::kByte);
  const size_t got = in.read(t.data_ptr<uint8_t>(), static_cast<size_t>(total));
  ZS_REQUIRE(got == static_cast<size_t>(total), DataError, "IDX file '", path, "' is truncated: its header declares ",
             total, " bytes of data but it holds ", got);
  unsigned char extra;
  ZS_REQUIRE(in.read(&extra, 1) == 0, DataError, "IDX file '", path, "' has bytes after the ", total,
             " its header declares");
  return t;
}

namespace {

std::string find_idx(const std::string& dir, const std::string& name) {
  const std::string plain = dir + "/" + name, gz = plain + ".gz";
  std::error_code ec;
  if (std::filesystem::exists(gz, ec)) return gz;
  if (std::filesystem::exists(plain, ec)) return plain;
  ZS_THROW(IoError, "Fashion-MNIST file not found: neither '", gz, "' nor '", plain,
           "' exists. The Debian package '", kFashionMnistPackage, "' installs the four files into ", kFashionMnistDir,
           " (apt-get install ", kFashionMnistPackage, "); or point data.path at a directory holding them");
}

}  // namespace

ImageSet load_fashion_mnist(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_idx(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = find_idx(dir, prefix + "-labels-idx1-ubyte");
  ImageSet set;
  set.images = read_idx_file(images_path);
  at::Tensor labels = read_idx_file(labels_path);
  set.num_classes = 10;
  ZS_REQUIRE(set.images.dim() == 3 && set.images.size(1) == 28 && set.images.size(2) == 28, DataError,
             "Fashion-MNIST images file '", images_path, "' has shape ", set.images.sizes(),
             "; expected [N, 28, 28]");
  ZS_REQUIRE(labels.dim() == 1, DataError, "Fashion-MNIST labels file '", labels_path, "' has shape ", labels.sizes(),
             "; expected [N]");
  ZS_REQUIRE(labels.size(0) == set.images.size(0), DataError, "Fashion-MNIST: '", labels_path, "' holds ",
             labels.size(0), " labels but '", images_path, "' holds ", set.images.size(0), " images");
  const int max_label = labels.max().item<int>();
  ZS_REQUIRE(max_label < set.num_classes, DataError, "Fashion-MNIST labels file '", labels_path, "' holds label ",
             max_label, "; expected 0 to 9");
  set.labels = labels.to(at::kLong);
  return set;
}

ImageClassificationDataset::ImageClassificationDataset(ImageSet set, double mean, double std)
    : set_(std::move(set)), mean_(mean), std_(std) {
  ZS_REQUIRE(set_.images.defined() && set_.images.dim() == 3 && set_.images.scalar_type() == at::kByte, UsageError,
             "ImageClassificationDataset: images must be a uint8 [N, H, W] tensor");
  ZS_REQUIRE(set_.labels.defined() && set_.labels.dim() == 1 && set_.labels.size(0) == set_.images.size(0),
             UsageError, "ImageClassificationDataset: labels must be [N] with N = ", set_.images.size(0));
  ZS_REQUIRE(std > 0, UsageError, "ImageClassificationDataset: std = ", std, " must be > 0");
}

Example ImageClassificationDataset::get(int64_t index) const {
  ZS_REQUIRE(index >= 0 && index < size(), UsageError, "ImageClassificationDataset: index ", index,
             " is outside [0, ", size(), ")");
  at::Tensor x = set_.images.select(0, index).to(at::kFloat).div_(255.0).sub_(mean_).div_(std_).unsqueeze(0);
  return {x, set_.labels.select(0, index)};
}

}  // namespace zeroshard
