// SPDX-License-Identifier: Apache-2.0
// load_tokenizer: which file of a model directory holds the tokenizer, and what format it is in.

#include <sys/stat.h>

#include <fstream>

#include "loaders.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text {

namespace {

bool is_file(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string directory_of(const std::string& file) {
  const size_t slash = file.rfind('/');
  return slash == std::string::npos ? "." : file.substr(0, slash);
}

std::string head_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in, IoError, path, ": cannot open: ", ::zeroshard::detail::errno_string(errno));
  std::string head(256, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  return head;
}

std::unique_ptr<Tokenizer> load_file(const std::string& path) {
  const auto config = detail::read_tokenizer_config(directory_of(path) + "/tokenizer_config.json");
  // By content (tokenizer.model may be either binary format), except that a .json file is JSON.
  std::string head = head_of(path);
  if (head.rfind("\xEF\xBB\xBF", 0) == 0) head.erase(0, 3);  // a UTF-8 byte order mark
  const size_t first = head.find_first_not_of(" \t\r\n");
  const bool json_name = path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0;
  if (json_name || (first != std::string::npos && head[first] == '{')) return detail::load_tokenizer_json(path, config);
  if (detail::looks_like_tiktoken(head)) return detail::load_tiktoken(path, config);
  return detail::load_sentencepiece(path, config);
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  struct stat st{};
  ZS_REQUIRE(::stat(path.c_str(), &st) == 0, IoError, path, ": cannot load a tokenizer: ",
             ::zeroshard::detail::errno_string(errno));
  if (!S_ISDIR(st.st_mode)) return load_file(path);
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    const std::string file = path + "/" + name;
    if (is_file(file)) return load_file(file);
  }
  ZS_THROW(ConfigError, path, ": no tokenizer.json or tokenizer.model in this directory");
}

}  // namespace zeroshard::text
