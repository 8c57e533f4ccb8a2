// SPDX-License-Identifier: Apache-2.0
// Token ids from files and arguments (token_ids.h).

#include "token_ids.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"

namespace zs_eval {
namespace zs = zeroshard;
namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void check_range(const std::vector<int64_t>& ids, const std::string& where, int64_t vocab) {
  ZS_REQUIRE(!ids.empty(), zs::UsageError, where, " holds no token ids");
  for (size_t i = 0; i < ids.size(); ++i) {
    ZS_REQUIRE(ids[i] >= 0 && ids[i] < vocab, zs::UsageError, where, ": token id ", ids[i], " at position ", i,
               " is outside the model's vocabulary [0, ", vocab, ")");
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), zs::UsageError, "token id file '", path, "' cannot be read (",
             std::filesystem::exists(path) ? "not readable" : "no such file", ")");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<int64_t> from_json(const std::string& path) {
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(read_all(path));
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number out of range ("1e999")
    // nlohmann's text names the line and column: "[json.exception.parse_error.101] parse error at line 1, ...".
    const std::string what = e.what();
    const size_t at = what.find("] ");
    ZS_THROW(zs::UsageError, "token id file '", path, "' is not valid JSON: ",
             at == std::string::npos ? what : what.substr(at + 2));
  }
  ZS_REQUIRE(v.is_array(), zs::UsageError, "token id file '", path, "' is not a JSON array of integers");
  std::vector<int64_t> ids;
  for (size_t i = 0; i < v.size(); ++i) {
    const double x = v[i].is_number() ? v[i].get<double>() : 0.5;
    ZS_REQUIRE(std::fabs(x) < 9.2e18 && x == std::floor(x), zs::UsageError, "token id file '", path,
               "': element ", i, " is not an integer");
    ids.push_back(static_cast<int64_t>(x));
  }
  return ids;
}

std::vector<int64_t> from_bin(const std::string& path, const std::string& dtype) {
  ZS_REQUIRE(dtype == "uint16" || dtype == "uint32", zs::UsageError, "token id file '", path,
             "' is raw binary: say how it is stored with --ids-dtype uint16 or uint32");
  const std::string bytes = read_all(path);
  const size_t width = dtype == "uint16" ? 2 : 4;
  ZS_REQUIRE(bytes.size() % width == 0, zs::UsageError, "token id file '", path, "' has ", bytes.size(),
             " bytes, not a whole number of ", dtype, " values");
  std::vector<int64_t> ids;
  for (size_t i = 0; i < bytes.size(); i += width) {
    uint32_t v = 0;
    for (size_t b = 0; b < width; ++b) v |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[i + b])) << (8 * b);
    ids.push_back(v);
  }
  return ids;
}

}  // namespace

std::vector<int64_t> read_token_ids(const std::string& path, const std::string& bin_dtype, int64_t vocab_size) {
  std::vector<int64_t> ids;
  if (ends_with(path, ".json")) {
    ids = from_json(path);
  } else if (ends_with(path, ".bin")) {
    ids = from_bin(path, bin_dtype);
  } else {
    ZS_THROW(zs::UsageError, "token id file '", path, "' must be a .json array or a .bin of uint16/uint32 values");
  }
  check_range(ids, "token id file '" + path + "'", vocab_size);
  return ids;
}

std::vector<int64_t> token_ids_argument(const std::string& flag, const std::string& text, const std::string& bin_dtype,
                                        int64_t vocab_size) {
  if (text.find_first_not_of("0123456789, ") != std::string::npos) return read_token_ids(text, bin_dtype, vocab_size);
  std::vector<int64_t> ids;
  std::stringstream s(text);
  std::string item;
  while (std::getline(s, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    ids.push_back(zs::cli::parse_int(flag, item, 0));
  }
  check_range(ids, flag + " '" + text + "'", vocab_size);
  return ids;
}

}  // namespace zs_eval
