// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/data/shard_manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "zeroshard/base/error.h"

namespace zeroshard::data {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using nlohmann::ordered_json;

std::string base_name(const std::string& path) { return fs::path(path).filename().string(); }

// The member `key` of `j` as an integer; DataError naming the manifest and the key otherwise.
int64_t integer(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  ZS_REQUIRE(it != j.end() && it->is_number_integer(), DataError, "shard manifest '", where, "': \"", key,
             "\" is missing or not an integer");
  return it->get<int64_t>();
}

std::string text(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  ZS_REQUIRE(it != j.end() && it->is_string(), DataError, "shard manifest '", where, "': \"", key,
             "\" is missing or not a string");
  return it->get<std::string>();
}

// The one *_manifest.json in `folder`.
std::string manifest_in(const std::string& folder) {
  std::vector<std::string> found;
  for (const fs::directory_entry& e : fs::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    const std::string suffix = "_manifest.json";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      found.push_back(e.path().string());
    }
  }
  ZS_REQUIRE(!found.empty(), UsageError, "'", folder, "' holds no *_manifest.json: a set of token shards is "
             "complete once zeroshard-data shards has written its manifest");
  std::sort(found.begin(), found.end());
  ZS_REQUIRE(found.size() == 1, UsageError, "'", folder, "' holds ", found.size(), " shard manifests ('",
             base_name(found[0]), "', '", base_name(found[1]), "'", found.size() > 2 ? ", ..." : "",
             "): name the one to use");
  return found[0];
}

ShardManifest parse(const std::string& path) {
  std::ifstream in(path);
  ZS_REQUIRE(in.good(), IoError, "cannot read shard manifest '", path, "'");
  std::stringstream s;
  s << in.rdbuf();
  json j;
  try {
    j = json::parse(s.str());
  } catch (const json::exception& e) {
    ZS_THROW(DataError, "shard manifest '", path, "' is not valid JSON: ", e.what());
  }
  ZS_REQUIRE(j.is_object(), DataError, "shard manifest '", path, "' is not a JSON object");
  ShardManifest m;
  m.path = path;
  m.format = text(j, "format", path);
  ZS_REQUIRE(m.format == "llmc", DataError, "shard manifest '", path, "': format '", m.format,
             "' is not one zeroshard writes (llmc)");
  m.token_bytes = static_cast<int>(integer(j, "token_bytes", path));
  m.tokenizer = text(j, "tokenizer", path);
  m.vocab_size = integer(j, "vocab_size", path);
  if (j.contains("eos_id")) m.eos_id = integer(j, "eos_id", path);
  m.documents = integer(j, "documents", path);
  m.tokens = integer(j, "tokens", path);
  m.trained_tokens = integer(j, "trained_tokens", path);
  const auto shards = j.find("shards");
  ZS_REQUIRE(shards != j.end() && shards->is_array() && !shards->empty(), DataError, "shard manifest '", path,
             "': \"shards\" is missing or lists no shard");
  for (const json& e : *shards) {
    ZS_REQUIRE(e.is_object(), DataError, "shard manifest '", path, "': an entry of \"shards\" is not an object");
    m.shards.push_back({text(e, "file", path), integer(e, "tokens", path), integer(e, "documents", path),
                        integer(e, "trained_tokens", path)});
  }
  return m;
}

}  // namespace

std::vector<std::string> ShardManifest::shard_paths() const {
  const fs::path folder = fs::path(path).parent_path();
  std::vector<std::string> out;
  for (const Shard& s : shards) out.push_back((folder / s.file).string());
  return out;
}

ShardManifest manifest_of(const BuildResult& r, const std::string& tokenizer, int64_t vocab_size,
                          std::optional<int64_t> eos_id) {
  ShardManifest m;
  m.token_bytes = vocab_size <= 65536 ? 2 : 4;
  m.tokenizer = tokenizer;
  m.vocab_size = vocab_size;
  m.eos_id = eos_id;
  m.documents = r.documents;
  m.tokens = r.tokens;
  m.trained_tokens = r.trained_tokens;
  for (const WrittenShard& s : r.shards) m.shards.push_back({base_name(s.path), s.tokens, s.documents, s.trained_tokens});
  return m;
}

void write_shard_manifest(const ShardManifest& m, const std::string& path) {
  ordered_json files = ordered_json::array();
  for (const ShardManifest::Shard& s : m.shards) {
    files.push_back(ordered_json{
        {"file", s.file}, {"tokens", s.tokens}, {"documents", s.documents}, {"trained_tokens", s.trained_tokens}});
  }
  ordered_json j;
  j["format"] = m.format;
  j["token_bytes"] = m.token_bytes;
  j["tokenizer"] = m.tokenizer;
  j["vocab_size"] = m.vocab_size;
  if (m.eos_id) j["eos_id"] = *m.eos_id;
  j["documents"] = m.documents;
  j["tokens"] = m.tokens;
  j["trained_tokens"] = m.trained_tokens;
  j["shards"] = files;
  std::ofstream out(path);
  out << j.dump() << "\n";
  ZS_REQUIRE(out.good(), IoError, "cannot write '", path, "'");
}

ShardManifest read_shard_manifest(const std::string& folder_or_file) {
  std::error_code ec;
  const std::string path = fs::is_directory(folder_or_file, ec) ? manifest_in(folder_or_file) : folder_or_file;
  ShardManifest m = parse(path);
  for (const std::string& shard : m.shard_paths()) {
    ZS_REQUIRE(fs::is_regular_file(shard, ec), DataError, "shard manifest '", path, "' lists '", base_name(shard),
               "', which is not in '", fs::path(path).parent_path().string(), "'");
  }
  return m;
}

bool is_shard_set(const std::string& path) {
  const std::string suffix = "_manifest.json";
  std::error_code ec;
  return fs::is_directory(path, ec) ||
         (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0);
}

}  // namespace zeroshard::data
