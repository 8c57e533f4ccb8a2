// SPDX-License-Identifier: Apache-2.0
#include "tensor_file_test_util.h"

#include <ATen/ops/empty.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace zeroshard::test {

std::string tensor_files_dir() {
  const char* dir = std::getenv("ZS_TENSOR_FILES_DIR");
  if (dir == nullptr || *dir == '\0') {
    ADD_FAILURE() << "ZS_TENSOR_FILES_DIR is not set: run this test through CTest (its fixture make_tensor_files "
                     "writes the torch archives), or run tests/python/make_tensor_files.py DIR and set it to DIR";
    return "";
  }
  return dir;
}

at::Tensor read_all(TensorFile& f, const std::string& name, c10::ScalarType as) {
  const TensorInfo* info = f.find(name);
  if (info == nullptr) {
    ADD_FAILURE() << "no tensor '" << name << "' in " << f.path();
    return {};
  }
  at::Tensor out = at::empty(info->shape, at::TensorOptions().dtype(as));
  f.read(name, 0, info->numel(), out);
  return out;
}

at::Tensor read_all(TensorFile& f, const std::string& name) {
  const TensorInfo* info = f.find(name);
  return read_all(f, name, info ? info->dtype : c10::kFloat);
}

at::Tensor read_range(TensorFile& f, const std::string& name, int64_t begin, int64_t count) {
  at::Tensor out = at::empty({count}, at::TensorOptions().dtype(f.find(name)->dtype));
  f.read(name, begin, count, out);
  return out;
}

::testing::AssertionResult same_elements(const at::Tensor& got, const at::Tensor& want) {
  if (got.scalar_type() != want.scalar_type() || got.sizes() != want.sizes()) {
    return ::testing::AssertionFailure() << "got " << got.scalar_type() << " " << got.sizes() << ", want "
                                         << want.scalar_type() << " " << want.sizes();
  }
  const at::Tensor g = got.contiguous().reshape({-1}), w = want.contiguous().reshape({-1});
  const size_t esize = g.element_size();
  const auto* gp = static_cast<const char*>(g.data_ptr());
  const auto* wp = static_cast<const char*>(w.data_ptr());
  int64_t wrong = 0;
  std::ostringstream first;
  for (int64_t i = 0; i < g.numel(); ++i) {
    if (std::memcmp(gp + i * esize, wp + i * esize, esize) == 0) continue;
    if (++wrong <= 5) first << " [" << i << "] " << g[i].item<double>() << " != " << w[i].item<double>() << ";";
  }
  if (wrong == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << wrong << " of " << g.numel() << " elements differ:" << first.str();
}

void copy_file(const std::string& from, const std::string& to) { write_file(to, read_file(from)); }

void truncate_file(const std::string& path, int64_t bytes) {
  ASSERT_EQ(::truncate(path.c_str(), bytes), 0) << path;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "writing " << path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "reading " << path;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace zeroshard::test
