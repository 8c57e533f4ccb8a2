// SPDX-License-Identifier: Apache-2.0
// zeroshard-data shards: text and JSONL files into token shards (llm.c format) with document
// indexes and loss masks, on all cores (docs/data.md).

#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "progress_line.h"
#include "subcommand.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/data/corpus_builder.h"
#include "zeroshard/data/shard_manifest.h"
#include "zeroshard/text/tokenizer.h"

namespace zeroshard::data_tool {
namespace {

struct ShardsArgs {
  std::string tokenizer;
  std::string out;
  std::string prefix = "shard";
  std::string chat_template;
  std::vector<std::string> inputs;
  int64_t seq_len = 0;
  int64_t shard_tokens = 100'000'000;
  int64_t chunk_bytes = int64_t{4} << 20;
  int threads = 0;
  bool no_eos = false;
  std::string progress = "auto";
};

bool parse_args(const std::vector<std::string>& argv, ShardsArgs& a) {
  cli::App app("zeroshard-data shards",
               "Tokenizes text and JSONL files into token shards in llm.c's format (uint16 tokens when the "
               "vocabulary has at most 65536 ids, uint32 above), each with a document index (.docs) and a loss "
               "mask (.mask), and writes PREFIX_manifest.json last. A .jsonl file holds one record per line "
               "({\"text\"}, {\"prompt\", \"completion\"} or {\"messages\"}); any other file is one text document.");
  app.usage("zeroshard-data shards --tokenizer DIR --out DIR [OPTIONS] INPUT...");
  app.add_text("--tokenizer", &a.tokenizer, "tokenizer folder or file, or 'bytes' (ids 0..255 = bytes)", "DIR")
      ->required();
  app.add_text("--out", &a.out, "folder for the shards (created when missing)", "DIR")->required();
  app.add_list("INPUT", &a.inputs, "text or .jsonl files", "INPUT")->allow_extra_args(true)->required();
  app.add_int("--seq-len", &a.seq_len, "report how many samples of this length the shards make", 0);
  app.add_text("--prefix", &a.prefix, "shard file names: PREFIX_000000.bin, ... (default shard)", "NAME");
  app.add_int("--shard-tokens", &a.shard_tokens, "tokens per shard at most (default 100000000)", 1, INT32_MAX);
  app.add_size("--chunk-size", &a.chunk_bytes, "bytes of JSONL per work item (default 4M)");
  app.add_int("--threads", &a.threads, "tokenizing threads (default: one per core)", 0, 4096);
  app.add_text("--chat-template", &a.chat_template, "Jinja chat template file (default: the tokenizer's)", "FILE");
  app.add_flag("--no-eos", &a.no_eos, "append no end-of-text token to documents (tokenizers without one)");
  app.add_choice("--progress", &a.progress, {"auto", "bar", "lines", "none"}, "progress display (default auto)");
  app.then([&] {
    if (a.chunk_bytes < 1) app.fail("--chunk-size must be at least 1 byte");
  });
  return app.parse(argv);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), IoError, "cannot open the chat template '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

data::ChatSpanFn chat_spans(const text::Tokenizer& tok, const ShardsArgs& a) {
  if (!a.chat_template.empty()) return data::template_spans(tok, read_file(a.chat_template), a.chat_template);
  if (tok.chat_template().empty()) return {};
  return data::template_spans(tok, tok.chat_template(), a.tokenizer + " (chat_template)");
}

std::unique_ptr<text::Tokenizer> open_tokenizer(const std::string& name) {
  return name == "bytes" ? text::byte_tokenizer() : text::load_tokenizer(name);
}

void print_summary(const ShardsArgs& a, const data::BuildResult& r, int bytes_per_token, double seconds) {
  const double pct = r.tokens > 0 ? 100.0 * static_cast<double>(r.trained_tokens) / static_cast<double>(r.tokens) : 0;
  std::printf("wrote %zu shard(s) to %s (llm.c format, uint%d tokens): %lld tokens in %lld documents, %lld of them "
              "trained (%.1f%%)\n",
              r.shards.size(), a.out.c_str(), bytes_per_token * 8, static_cast<long long>(r.tokens),
              static_cast<long long>(r.documents), static_cast<long long>(r.trained_tokens), pct);
  if (r.empty_records > 0) {
    std::printf("skipped %lld record(s) that gave no tokens\n", static_cast<long long>(r.empty_records));
  }
  std::printf("read %s in %.2f s: %.1f MB/s, %s tokens/s on %d thread(s)\n", format_bytes(r.bytes_read).c_str(),
              seconds, seconds > 0 ? static_cast<double>(r.bytes_read) / 1e6 / seconds : 0,
              ProgressLine::count(seconds > 0 ? static_cast<double>(r.tokens) / seconds : 0).c_str(), r.threads);
  if (a.seq_len > 0) {
    std::printf("seq_len %lld: %lld packed samples; padded, %lld samples (one per document), %lld of them truncated "
                "(longer than %lld tokens)\n",
                static_cast<long long>(a.seq_len),
                static_cast<long long>(r.tokens > 0 ? (r.tokens - 1) / a.seq_len : 0),
                static_cast<long long>(r.documents), static_cast<long long>(r.longer_than_seq),
                static_cast<long long>(a.seq_len + 1));
  }
}

int run_shards(const std::vector<std::string>& argv) {
  ShardsArgs a;
  if (!parse_args(argv, a)) return 0;
  const std::unique_ptr<text::Tokenizer> tok = open_tokenizer(a.tokenizer);
  ZS_REQUIRE(a.no_eos || tok->eos_id().has_value(), UsageError, "the tokenizer '", a.tokenizer,
             "' has no end-of-text token to put between documents; pass --no-eos to write documents without one "
             "(the document index still separates them)");
  data::EncodeOptions eo;
  if (!a.no_eos) eo.eos_id = tok->eos_id();
  const data::RecordEncoder encoder(*tok, chat_spans(*tok, a), eo);
  data::BuildOptions o;
  o.inputs = a.inputs;
  o.writer = {a.out, a.prefix, tok->vocab_size(), a.shard_tokens};
  o.threads = a.threads;
  o.chunk_bytes = a.chunk_bytes;
  o.seq_len = a.seq_len;
  const int tty = a.progress == "bar" ? 1 : a.progress == "lines" ? 0 : -1;
  ProgressLine progress(stderr, tty);
  const bool show = a.progress != "none";
  const data::BuildResult r = data::build_shards(o, encoder, [&](const data::BuildProgress& p) {
    if (show) progress.update(p);
  });
  progress.finish();
  const double seconds = progress.elapsed();
  const int bytes_per_token = tok->vocab_size() <= 65536 ? 2 : 4;
  const std::optional<int64_t> eos = a.no_eos ? std::nullopt : std::optional<int64_t>(*tok->eos_id());
  data::write_shard_manifest(data::manifest_of(r, a.tokenizer, tok->vocab_size(), eos),
                             a.out + "/" + a.prefix + "_manifest.json");
  print_summary(a, r, bytes_per_token, seconds);
  return 0;
}

[[maybe_unused]] const bool registered = register_subcommand(
    {"shards", "text and JSONL files into token shards (llm.c format) on all cores", run_shards});

}  // namespace
}  // namespace zeroshard::data_tool
