// SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers of the data tests: files of bytes, llm.c shards with any header, the reference script.

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "zeroshard/base/error.h"

namespace zeroshard::test {

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

template <typename T>
std::string token_bytes(const std::vector<int64_t>& tokens) {
  std::string out(tokens.size() * sizeof(T), '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto v = static_cast<T>(tokens[i]);
    std::memcpy(&out[i * sizeof(T)], &v, sizeof(T));
  }
  return out;
}

// An llm.c header: magic, version, count, then zeros to 1024 bytes.
inline std::string llmc_header(int32_t magic, int32_t version, int32_t count) {
  std::string h(1024, '\0');
  const int32_t fields[3] = {magic, version, count};
  std::memcpy(&h[0], fields, sizeof(fields));
  return h;
}

// Runs `command`, returns its stdout (stderr goes to the test log) and sets *status.
inline std::string run_command(const std::string& command, int* status) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  *status = pclose(p);
  return out;
}

}  // namespace zeroshard::test
