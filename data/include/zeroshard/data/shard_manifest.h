// SPDX-License-Identifier: Apache-2.0
#pragma once
// PREFIX_manifest.json: what a set of token shards written by build_shards (zeroshard-data shards)
// holds, written last so that its presence marks a complete set. Training programs take the set
// by its folder or its manifest and check that it was tokenized as the model's tokenizer would.
//
//   {"format":"llmc","token_bytes":2,"tokenizer":"Llama-3.2-1B","vocab_size":128256,"eos_id":128001,
//    "documents":..,"tokens":..,"trained_tokens":..,"shards":[{"file":"shard_000000.bin","tokens":..,
//    "documents":..,"trained_tokens":..}, ...]}
//
// Errors name the file and what is wrong: DataError for a manifest that is malformed, lists no
// shard, or names a shard file that is missing; UsageError for a folder without exactly one
// manifest.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zeroshard/data/corpus_builder.h"

namespace zeroshard::data {

struct ShardManifest {
  struct Shard {
    std::string file;  // the .bin file's name, in the manifest's folder
    int64_t tokens = 0;
    int64_t documents = 0;
    int64_t trained_tokens = 0;
  };
  std::string format = "llmc";
  int token_bytes = 2;
  std::string tokenizer;            // as given to the tool: a folder, a file or "bytes"
  int64_t vocab_size = 0;           // the tokenizer's
  std::optional<int64_t> eos_id;    // the id between documents; none when built without
  int64_t documents = 0;
  int64_t tokens = 0;
  int64_t trained_tokens = 0;
  std::vector<Shard> shards;
  std::string path;                 // the manifest file (read_shard_manifest)

  // The shards' .bin paths, in order.
  std::vector<std::string> shard_paths() const;
};

// The manifest of a build's result (token_bytes from the vocabulary: 2 up to 65536 ids, else 4).
ShardManifest manifest_of(const BuildResult& r, const std::string& tokenizer, int64_t vocab_size,
                          std::optional<int64_t> eos_id);

// Writes `m` to `path` (IoError naming it when it cannot).
void write_shard_manifest(const ShardManifest& m, const std::string& path);

// Reads `folder_or_file`: a manifest, or a folder holding exactly one *_manifest.json.
ShardManifest read_shard_manifest(const std::string& folder_or_file);

// Whether `path` names a shard set (a folder, or a file ending in _manifest.json) rather than a
// text or JSONL file.
bool is_shard_set(const std::string& path);

}  // namespace zeroshard::data
