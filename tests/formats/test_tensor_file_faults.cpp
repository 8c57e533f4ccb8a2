// SPDX-License-Identifier: Apache-2.0
// The tensor file readers read through an IoEngine, so a FaultInjectingIo reaches them: a read that
// fails as a failing disk's would, at open (the sniff, the header, the zip directory read by
// LibTorch's zip reader) or at a tensor read, is an IoError naming the file and what was being
// read, with the engine's own text; once the fault is gone the same reader reads the right values.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/serialize/output-archive.h>

#include <memory>

#include "io/aio_test_util.h"
#include "io/tensor_file_test_util.h"
#include "zeroshard/base/error.h"
#include "zeroshard/formats/tensor_dir.h"
#include "zeroshard/io/fault_io.h"

namespace zs = zeroshard;
using zs::test::error_text_of;
using zs::test::same_elements;

namespace {

std::shared_ptr<zs::FaultInjectingIo> faulty() {
  return std::make_shared<zs::FaultInjectingIo>(zs::make_io_engine(zs::IoOptions{}));
}

// "a": 1000 fp32, "b": [3, 5] bf16.
std::string write_safetensors(const zs::test::TempDir& dir, const at::Tensor& a, const at::Tensor& b) {
  const std::string path = dir.file("model.safetensors");
  zs::SafetensorsWriter w(path, {{"a", c10::kFloat, {1000}}, {"b", c10::kBFloat16, {3, 5}}});
  w.write("a", a);
  w.write("b", b);
  w.finish();
  return path;
}

}  // namespace

TEST(TensorFileFaults, AFailedTensorReadNamesTheFileAndTheTensorAndTheReaderRecovers) {
  zs::test::TempDir dir;
  const at::Tensor a = at::randn({1000}), b = at::randn({3, 5}).to(at::kBFloat16);
  const std::string path = write_safetensors(dir, a, b);
  auto io = faulty();
  auto f = zs::open_tensor_file(path, io);
  io->fail_read_number(1);
  at::Tensor part = at::empty({100}, at::kFloat);
  const std::string err = error_text_of<zs::IoError>([&] { f->read("a", 200, 100, part); });
  EXPECT_CONTAINS(err, "reading tensor 'a' from '" + path + "' at offset ");
  EXPECT_CONTAINS(err, "failed: read of 400 bytes at offset ");
  EXPECT_CONTAINS(err, "Input/output error (errno 5)");
  EXPECT_CONTAINS(err, "(injected by FaultInjectingIo)");
  EXPECT_EQ(io->injected(), 1);
  // Nothing of the reader is broken: the next reads (through the same engine) are right.
  f->read("a", 200, 100, part);
  EXPECT_TRUE(same_elements(part, a.narrow(0, 200, 100)));
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "b"), b));
}

TEST(TensorFileFaults, AFailedHeaderReadFailsTheOpenNamingWhatWasRead) {
  zs::test::TempDir dir;
  const std::string path = write_safetensors(dir, at::randn({1000}), at::randn({3, 5}).to(at::kBFloat16));
  auto io = faulty();
  // Reads at open: the format sniff (1), the header length (2), the JSON header (3).
  io->fail_read_number(3, EIO);
  std::string err = error_text_of<zs::IoError>([&] { zs::open_tensor_file(path, io); });
  EXPECT_CONTAINS(err, "reading the JSON header from '" + path + "' at offset 8 failed: ");
  EXPECT_CONTAINS(err, "(injected by FaultInjectingIo)");
  io->clear();
  io->short_reads(4);  // the sniff reads 9 bytes: cut to 4, as a file truncated under the reader
  err = error_text_of<zs::IoError>([&] { zs::open_tensor_file(path, io); });
  EXPECT_CONTAINS(err, "reading the first bytes from '" + path + "' at offset 0 failed: ");
  EXPECT_CONTAINS(err, "is shorter than expected: read 4 of 9 bytes at offset 0");
  io->clear();
  EXPECT_EQ(zs::open_tensor_file(path, io)->tensors().size(), 2u);
}

TEST(TensorFileFaults, ATorchArchiveReadThroughLibTorchsZipReaderReportsTheEnginesError) {
  zs::test::TempDir dir;
  const at::Tensor w = at::randn({64, 8});
  torch::serialize::OutputArchive archive;
  archive.write("weight", w);
  const std::string path = dir.file("model.pt");
  archive.save_to(path);
  auto io = faulty();
  io->fail_read_number(2);  // after the sniff: the first read of LibTorch's zip reader (its magic number,
                            // whose result it does not check)
  const std::string err = error_text_of<zs::IoError>([&] { zs::open_tensor_file(path, io); });
  EXPECT_CONTAINS(err, "reading the zip archive from '" + path + "' at offset 0 failed: read of 8 bytes");
  EXPECT_CONTAINS(err, "(injected by FaultInjectingIo)");
  io->clear();
  auto f = zs::open_tensor_file(path, io);
  EXPECT_TRUE(same_elements(zs::test::read_all(*f, "weight"), w));
  // A storage read that fails names the tensor.
  io->fail_reads();
  const std::string read_err = error_text_of<zs::IoError>([&] { zs::test::read_all(*f, "weight"); });
  EXPECT_CONTAINS(read_err, "reading tensor 'weight' from '" + path + "' at offset ");
}

TEST(TensorFileFaults, AModelDirectoryReadsEveryShardThroughTheEngineItWasGiven) {
  zs::test::TempDir dir;
  write_safetensors(dir, at::randn({1000}), at::randn({3, 5}).to(at::kBFloat16));
  auto io = faulty();
  auto d = zs::TensorDirectory::open(dir.path(), io);
  io->fail_reads(EIO);
  at::Tensor part = at::empty({10}, at::kFloat);
  const std::string err = error_text_of<zs::IoError>([&] { d->read("a", 0, 10, part); });
  EXPECT_CONTAINS(err, "reading tensor 'a' from '" + dir.file("model.safetensors") + "' at offset ");
  EXPECT_GE(io->injected(), 1);
}
