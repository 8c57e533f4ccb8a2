// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers for the tensor file tests: the torch archives the make_tensor_files fixture wrote, whole
// and partial reads, element-by-element comparison, raw file edits, and error texts.

#include <ATen/core/Tensor.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "common/error_text.h"
#include "zeroshard/formats/tensor_file.h"

namespace zeroshard::test {

// The directory make_tensor_files.py wrote (ZS_TENSOR_FILES_DIR, set by CTest); empty, with a test
// failure saying how to run, when unset.
std::string tensor_files_dir();

// Every element of tensor `name`, in its stored dtype (or `as`), shaped as stored.
at::Tensor read_all(TensorFile& f, const std::string& name);
at::Tensor read_all(TensorFile& f, const std::string& name, c10::ScalarType as);
// Elements [begin, begin + count) of tensor `name`, flat, in its stored dtype.
at::Tensor read_range(TensorFile& f, const std::string& name, int64_t begin, int64_t count);

// The same dtype and shape and, element by element, the same bytes (NaN-safe, -0.0 != 0.0); the
// failure names the first differing elements.
::testing::AssertionResult same_elements(const at::Tensor& got, const at::Tensor& want);

// File edits for the error tests.
void copy_file(const std::string& from, const std::string& to);
void truncate_file(const std::string& path, int64_t bytes);
void write_file(const std::string& path, const std::string& bytes);
std::string read_file(const std::string& path);

// The what() of the `Err` that `fn` throws; a test failure (and "") when it throws none.
}  // namespace zeroshard::test
