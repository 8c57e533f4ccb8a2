// SPDX-License-Identifier: Apache-2.0
// A checkpoint's manifest.pb (checkpoint/checkpoint_manifest.h): read and checked.

#include <filesystem>

#include "fuzz_input.h"
#include "zeroshard/checkpoint/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir = zs_fuzz::work_dir() + "/step-00000001";
  std::filesystem::create_directories(dir);
  zs_fuzz::write_input(data, size, "step-00000001/manifest.pb");
  zs_fuzz::expect_clean([&] { zeroshard::ckpt::read_manifest(dir); });
  return 0;
}
