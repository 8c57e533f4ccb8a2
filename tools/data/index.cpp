// SPDX-License-Identifier: Apache-2.0
// zeroshard-data index: document indexes (.docs) for token shards made elsewhere, whose documents
// end with an end-of-text token; then they pack by index and pad (docs/data.md).

#include <algorithm>
#include <cstdio>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "subcommand.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/data/token_shards.h"

namespace zeroshard::data_tool {
namespace {

struct IndexArgs {
  std::vector<std::string> files;
  std::string format = "llmc";
  int64_t eos_id = -1;
};

bool parse_args(const std::vector<std::string>& argv, IndexArgs& a) {
  cli::App app("zeroshard-data index",
               "Writes X.docs next to each token file X.bin: a document ends after every --eos-id token (and at "
               "the end of the file). Refuses to replace an existing index.");
  app.usage("zeroshard-data index --eos-id ID [OPTIONS] FILE...");
  app.add_list("FILE", &a.files, "token files or patterns", "FILE")->allow_extra_args(true)->required();
  app.add_int("--eos-id", &a.eos_id, "the end-of-text token id", 0, INT32_MAX)->required();
  app.add_choice("--format", &a.format, {"llmc", "uint16", "uint32"}, "token file format (default llmc)");
  return app.parse(argv);
}

// Document starts of `f`: 0 and every offset after an EOS (but not the file's end).
std::vector<int64_t> starts_of(const data::ShardFile& f, int32_t eos) {
  std::vector<int64_t> starts;
  if (f.num_tokens() > 0) starts.push_back(0);
  constexpr int64_t kWindow = int64_t{1} << 20;
  std::vector<int32_t> ids(static_cast<size_t>(std::min(kWindow, std::max<int64_t>(f.num_tokens(), 1))));
  for (int64_t at = 0; at < f.num_tokens(); at += kWindow) {
    const int64_t n = std::min(kWindow, f.num_tokens() - at);
    f.read(at, n, ids.data(), 0);
    for (int64_t k = 0; k < n; ++k) {
      if (ids[k] == eos && at + k + 1 < f.num_tokens()) starts.push_back(at + k + 1);
    }
  }
  return starts;
}

int run_index(const std::vector<std::string>& argv) {
  IndexArgs a;
  if (!parse_args(argv, a)) return 0;
  const data::TokenFormat format = data::parse_token_format(a.format, "--format");
  for (const std::string& path : data::TokenShards::expand(a.files)) {
    const data::ShardFile f(path, format);
    const std::string docs = data::docs_path_for(path);
    struct stat st {};
    ZS_REQUIRE(::stat(docs.c_str(), &st) != 0, IoError, "'", docs, "' exists already; remove it to index '", path,
               "' again");
    const std::vector<int64_t> starts = starts_of(f, static_cast<int32_t>(a.eos_id));
    data::write_doc_index(docs, f.num_tokens(), starts);
    std::printf("%s: %zu documents\n", docs.c_str(), starts.size());
  }
  return 0;
}

[[maybe_unused]] const bool registered =
    register_subcommand({"index", "document indexes (.docs) of shards whose documents end with an EOS token",
                         run_index});

}  // namespace
}  // namespace zeroshard::data_tool
