// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the libFuzzer harnesses share: the input written to a file of this process (the parsers
// read files), and the rule that a zeroshard error is a correct answer to bad bytes while anything
// else (a crash, a sanitizer report, another exception) is a finding.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "zeroshard/base/error.h"

namespace zs_fuzz {

// A folder of this process under /dev/shm (or the temp folder), created once, removed at exit.
inline const std::string& work_dir() {
  // Never destroyed: the exit handler reads it after static destructors may have run.
  static const std::string* dir = [] {
    const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto* d = new std::string((base / ("zs-fuzz-" + std::to_string(::getpid()))).string());
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(*dir, ignored);
    });
    return d;
  }();
  return *dir;
}

// Writes the input to `name` in work_dir() and returns its path.
inline std::string write_input(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = work_dir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data),
                                                               static_cast<std::streamsize>(size));
  return path;
}

// Runs `fn`; a zeroshard::Error (the parser refusing the bytes with a message) is the expected
// outcome for bad input and is swallowed (printed under ZS_FUZZ_VERBOSE=1). It must name
// something: an empty message is a finding.
template <typename Fn>
void expect_clean(Fn&& fn) {
  try {
    fn();
  } catch (const zeroshard::Error& e) {
    if (std::string(e.what()).empty()) __builtin_trap();
    static const bool verbose = std::getenv("ZS_FUZZ_VERBOSE") != nullptr;
    if (verbose) std::fprintf(stderr, "refused: %s\n", e.what());
  }
}

}  // namespace zs_fuzz
