// SPDX-License-Identifier: Apache-2.0
// zeroshard-data inspect: a token file's header, sidecars and first tokens; with --verify, every
// token read and checked against the vocabulary in bounded windows (docs/data.md).

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "subcommand.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/data/token_shards.h"

namespace zeroshard::data_tool {
namespace {

struct InspectArgs {
  std::vector<std::string> files;
  std::string format = "llmc";
  int64_t tokens = 16;
  int64_t vocab = 0;
  bool verify = false;
};

bool parse_args(const std::vector<std::string>& argv, InspectArgs& a) {
  cli::App app("zeroshard-data inspect",
               "Prints each token file's format, token count, document index and loss mask, and its first "
               "tokens. --verify reads every token (a window of at most 16 MiB at a time) and checks it against "
               "--vocab.");
  app.usage("zeroshard-data inspect [OPTIONS] FILE...");
  app.add_list("FILE", &a.files, "token files or patterns", "FILE")->allow_extra_args(true)->required();
  app.add_choice("--format", &a.format, {"llmc", "uint16", "uint32"}, "token file format (default llmc)");
  app.add_int("--tokens", &a.tokens, "first tokens to print (default 16)", 0, 1 << 20);
  app.add_int("--vocab", &a.vocab, "vocabulary size: ids at or above it are errors", 0);
  app.add_flag("--verify", &a.verify, "read every token; print their count, largest id and sum");
  return app.parse(argv);
}

std::string describe(const data::ShardFile& f) {
  char buf[160];
  if (f.has_header()) {
    std::snprintf(buf, sizeof(buf), "llm.c token shard, magic %d version %d, uint%d tokens", f.magic(), f.version(),
                  f.bytes_per_token() * 8);
  } else {
    std::snprintf(buf, sizeof(buf), "headerless uint%d tokens", f.bytes_per_token() * 8);
  }
  return buf;
}

void verify(const data::TokenShards& s, size_t i) {
  const data::ShardFile& f = s.file(i);
  constexpr int64_t kWindow = int64_t{1} << 20;
  std::vector<int32_t> ids(static_cast<size_t>(std::min(kWindow, std::max<int64_t>(f.num_tokens(), 1))));
  int64_t largest = -1;
  uint64_t sum = 0;
  for (int64_t at = 0; at < f.num_tokens(); at += kWindow) {
    const int64_t n = std::min(kWindow, f.num_tokens() - at);
    f.read(at, n, ids.data(), s.options().vocab_size);
    for (int64_t k = 0; k < n; ++k) largest = std::max<int64_t>(largest, ids[k]), sum += static_cast<uint64_t>(ids[k]);
  }
  std::printf("  verified: %lld tokens%s, largest id %lld, sum of ids %llu\n", static_cast<long long>(f.num_tokens()),
              s.options().vocab_size > 0 ? (" below " + std::to_string(s.options().vocab_size)).c_str() : "",
              static_cast<long long>(largest), static_cast<unsigned long long>(sum));
}

void print_file(const data::TokenShards& s, size_t i, const InspectArgs& a) {
  const data::ShardFile& f = s.file(i);
  std::printf("%s: %s\n", f.path().c_str(), describe(f).c_str());
  std::printf("  tokens: %lld (%lld bytes after %lld header bytes)\n", static_cast<long long>(f.num_tokens()),
              static_cast<long long>(f.num_tokens() * f.bytes_per_token()), static_cast<long long>(f.data_offset()));
  if (s.has_doc_index()) {
    const data::DocIndexFile docs(data::docs_path_for(f.path()), f.num_tokens());
    std::printf("  documents: %lld (%s)\n", static_cast<long long>(docs.num_documents()), docs.path().c_str());
  }
  if (s.has_loss_mask()) std::printf("  loss mask: %s\n", data::mask_path_for(f.path()).c_str());
  const int64_t n = std::min(a.tokens, f.num_tokens());
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n));
    f.read(0, n, ids.data(), s.options().vocab_size);
    std::printf("  first %lld tokens:", static_cast<long long>(n));
    for (int32_t id : ids) std::printf(" %d", id);
    std::printf("\n");
  }
  if (a.verify) verify(s, i);
}

int run_inspect(const std::vector<std::string>& argv) {
  InspectArgs a;
  if (!parse_args(argv, a)) return 0;
  const data::TokenShards shards(a.files, {data::parse_token_format(a.format, "--format"), a.vocab});
  for (size_t i = 0; i < shards.num_files(); ++i) print_file(shards, i, a);
  if (shards.num_files() > 1) {
    std::printf("%zu files, %lld tokens\n", shards.num_files(), static_cast<long long>(shards.num_tokens()));
  }
  return 0;
}

[[maybe_unused]] const bool registered =
    register_subcommand({"inspect", "token files: header, document index, loss mask, first tokens", run_inspect});

}  // namespace
}  // namespace zeroshard::data_tool
