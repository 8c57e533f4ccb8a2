// SPDX-License-Identifier: Apache-2.0
#pragma once
// Image classification data: an IDX file reader (the MNIST family's format, plain or gzip) and
// Fashion-MNIST from the directory Debian's `dataset-fashion-mnist` package installs.
//
//   zeroshard::ImageSet train = zeroshard::load_fashion_mnist(zeroshard::kFashionMnistDir, /*train=*/true);
//   auto ds = std::make_shared<zeroshard::ImageClassificationDataset>(train, 0.2860, 0.3530);
//   // ds->get(i): data = float [1, 28, 28], (pixel / 255 - mean) / std; target = int64 label
//
// Thread-safety: plain values and immutable tensors; concurrent const calls are safe.

#include <ATen/core/Tensor.h>

#include <string>

#include "zeroshard/train/dataset.h"

namespace zeroshard {

inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistPackage = "dataset-fashion-mnist";
// Mean and standard deviation of Fashion-MNIST's training pixels scaled to [0, 1].
inline constexpr double kFashionMnistMean = 0.2860;
inline constexpr double kFashionMnistStd = 0.3530;

// Reads an IDX file of unsigned bytes (type code 0x08), gzip-compressed or not: returns a uint8
// tensor shaped by the file's dimensions. Throws IoError for a missing or unreadable file (naming
// it), DataError naming the file for a bad magic number, another element type, 0 or more than 4
// dimensions, a dimension of 0 or above 2^31, data shorter than the dimensions say (truncated),
// or bytes after the data.
at::Tensor read_idx_file(const std::string& path);

struct ImageSet {
  at::Tensor images;  // uint8 [N, H, W]
  at::Tensor labels;  // int64 [N], in [0, num_classes)
  int64_t num_classes = 0;
};

// Loads Fashion-MNIST's training (60000) or test (10000) split from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte, each plain or with .gz. A missing file is an
// IoError naming the paths tried and the Debian package that installs them
// (kFashionMnistPackage, into kFashionMnistDir); image/label counts that differ, images that are
// not N x 28 x 28 or labels outside [0, 10) are DataErrors naming the file.
ImageSet load_fashion_mnist(const std::string& dir, bool train);

// Example i: data = float [1, H, W] = (images[i] / 255 - mean) / std, target = int64 labels[i].
class ImageClassificationDataset : public Dataset {
 public:
  ImageClassificationDataset(ImageSet set, double mean, double std);
  int64_t size() const override { return set_.images.size(0); }
  Example get(int64_t index) const override;
  int64_t num_classes() const { return set_.num_classes; }

 private:
  ImageSet set_;
  double mean_;
  double std_;
};

}  // namespace zeroshard
