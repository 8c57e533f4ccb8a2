// SPDX-License-Identifier: Apache-2.0
// A model directory as one TensorFile (tensor_dir.h): find the weights and the index, open every
// shard, check the index against what the shards hold, route each read to its shard.

#include "zeroshard/formats/tensor_dir.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "json_text.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace fs = std::filesystem;
namespace {

// The directory's layouts, in the order they are looked for: {index, single file}.
constexpr std::pair<const char*, const char*> kLayouts[] = {
    {"model.safetensors.index.json", "model.safetensors"},
    {"pytorch_model.bin.index.json", "pytorch_model.bin"},
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), IoError, "cannot read '", path, "'");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// weight_map of an index file, in file order: (tensor, shard file name).
std::vector<std::pair<std::string, std::string>> read_weight_map(const std::string& index) {
  // An index nests 2 levels ({"weight_map": {tensor: file}}); 16 leave room for metadata.
  const nlohmann::ordered_json root =
      detail::parse_untrusted_json(read_text(index), "model index '" + index + "' is not valid JSON", 16);
  const auto map = root.is_object() ? root.find("weight_map") : root.end();
  ZS_REQUIRE(map != root.end() && map->is_object(), IoError, "model index '", index,
             "' has no \"weight_map\" object ({\"weight_map\": {tensor: file}})");
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [tensor, file] : map->items()) {
    ZS_REQUIRE(file.is_string() && !file.get_ref<const std::string&>().empty() &&
                   file.get_ref<const std::string&>().find('/') == std::string::npos,
               IoError, "model index '", index, "' maps tensor '", tensor,
               "' to something that is not a file name in the directory");
    out.emplace_back(tensor, file.get<std::string>());
  }
  ZS_REQUIRE(!out.empty(), IoError, "model index '", index, "' maps no tensors");
  return out;
}

}  // namespace

TensorDirectory::~TensorDirectory() = default;

std::unique_ptr<TensorDirectory> TensorDirectory::open(const std::string& dir, const std::shared_ptr<IoEngine>& io) {
  ZS_REQUIRE(fs::is_directory(dir), IoError, "'", dir, "' is not a directory");
  std::unique_ptr<TensorDirectory> d(new TensorDirectory(dir));
  for (const auto& [index, single] : kLayouts) {
    const std::string index_path = dir + "/" + index;
    if (fs::exists(index_path)) {
      d->index_ = index_path;
      const auto weight_map = read_weight_map(index_path);
      std::vector<std::string> names;
      std::set<std::string> seen;
      for (const auto& [tensor, file] : weight_map) {
        if (seen.insert(file).second) names.push_back(file);
      }
      for (const std::string& f : names) {
        if (fs::exists(dir + "/" + f)) continue;
        size_t mapped = 0;
        std::string example;
        for (const auto& [tensor, file] : weight_map) {
          if (file == f) ++mapped, example = example.empty() ? tensor : example;
        }
        ZS_THROW(IoError, "model index '", index_path, "' names shard file '", f, "', which does not exist in '", dir,
                 "' (", mapped, " tensors are mapped to it, e.g. '", example, "')");
      }
      d->open_files(names, io);
      d->check_against_index(weight_map);
      return d;
    }
    if (fs::exists(dir + "/" + single)) {
      d->open_files({single}, io);
      return d;
    }
  }
  ZS_THROW(IoError, "'", dir,
           "' holds no model weights: expected model.safetensors, model.safetensors.index.json, "
           "pytorch_model.bin or pytorch_model.bin.index.json");
}

void TensorDirectory::open_files(const std::vector<std::string>& names, const std::shared_ptr<IoEngine>& io) {
  names_ = names;
  for (size_t i = 0; i < names.size(); ++i) {
    files_.push_back(open_tensor_file(dir_ + "/" + names[i], io));
    for (const TensorInfo& t : files_.back()->tensors()) {
      auto [it, fresh] = file_index_.emplace(t.name, i);
      ZS_REQUIRE(fresh, IoError, "model directory '", dir_, "': tensor '", t.name, "' is in both '", names[it->second],
                 "' and '", names[i], "'");
      infos_.push_back(t);
    }
  }
}

void TensorDirectory::check_against_index(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  std::map<std::string, std::string> mapped(weight_map.begin(), weight_map.end());
  for (const auto& [tensor, file] : weight_map) {
    auto it = file_index_.find(tensor);
    ZS_REQUIRE(it != file_index_.end() && names_[it->second] == file, IoError, "model index '", index_,
               "' maps tensor '", tensor, "' to '", file, "', which does not hold it",
               it == file_index_.end() ? std::string(" (no shard does)") : " (it is in '" + names_[it->second] + "')");
  }
  for (const TensorInfo& t : infos_) {
    ZS_REQUIRE(mapped.count(t.name), IoError, "model directory '", dir_, "': shard '", names_[file_index_.at(t.name)],
               "' holds tensor '", t.name, "', which the index '", index_, "' does not map");
  }
}

const char* TensorDirectory::format() const { return files_.front()->format(); }

const std::string& TensorDirectory::file_of(const std::string& name) const {
  auto it = file_index_.find(name);
  ZS_REQUIRE(it != file_index_.end(), UsageError, "model directory '", dir_, "' has no tensor '", name, "'");
  return names_[it->second];
}

void TensorDirectory::read(const std::string& name, int64_t begin, int64_t count, const at::Tensor& dst) {
  auto it = file_index_.find(name);
  ZS_REQUIRE(it != file_index_.end(), UsageError, "model directory '", dir_, "' has no tensor '", name, "' (it has ",
             infos_.size(), " tensors)");
  TensorFile& f = *files_[it->second];
  const int64_t before = f.bytes_read();
  f.read(name, begin, count, dst);
  bytes_read_ += f.bytes_read() - before;
}

std::map<std::string, std::string> TensorDirectory::aliases() const {
  std::map<std::string, std::string> out;
  for (const auto& f : files_) {
    for (const auto& kv : f->aliases()) out.insert(kv);
  }
  return out;
}

std::unique_ptr<TensorFile> open_tensor_path(const std::string& path, std::shared_ptr<IoEngine> io) {
  if (fs::is_directory(path)) return TensorDirectory::open(path, io);
  return open_tensor_file(path, std::move(io));
}

}  // namespace zeroshard
