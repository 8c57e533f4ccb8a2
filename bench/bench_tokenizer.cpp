// SPDX-License-Identifier: Apache-2.0
// bench_tokenizer: zeroshard's tokenizer speed on one core (and on all cores through encode_batch)
// over a corpus of JSON lines {"text": ...}. bench_tokenizer.sh runs it beside Hugging Face's
// tokenizers.js on the same files and prints the ratio.
//
//   build/bin/bench_tokenizer --tokenizer DIR --corpus FILE.jsonl [--seconds S] [--threads N]
//
// Prints one JSON line: {"tokenizer", "documents", "bytes", "tokens" (one pass), "load_s",
// "tokens_per_s" (one thread, warm), "batch_tokens_per_s" (encode_batch, --threads)}.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/text/tokenizer.h"

namespace zt = zeroshard::text;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<std::string> read_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in, zeroshard::IoError, path, ": cannot open");
  std::vector<std::string> docs;
  std::string line;
  size_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    nlohmann::json v;
    try {
      v = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      ZS_THROW(zeroshard::ConfigError, path, ":", n, ": ", e.what());
    }
    const auto text = v.is_object() ? v.find("text") : v.end();
    ZS_REQUIRE(text != v.end() && text->is_string(), zeroshard::ConfigError, path, ":", n, ": no \"text\" string");
    docs.push_back(text->get<std::string>());
  }
  return docs;
}

// Tokens per second of `pass` (returns the tokens of one pass), repeated for at least `seconds`.
template <typename Pass>
double rate(double seconds, Pass pass) {
  size_t tokens = 0;
  const double start = now_s();
  double elapsed = 0;
  do {
    tokens += pass();
    elapsed = now_s() - start;
  } while (elapsed < seconds);
  return static_cast<double>(tokens) / elapsed;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir, corpus_path;
  double seconds = 3;
  int threads = 0;
  try {
    zeroshard::cli::App app("bench_tokenizer", "Tokenizer speed on one core and on all cores.");
    app.add_text("--tokenizer", &dir, "tokenizer directory or file", "DIR")->required();
    app.add_text("--corpus", &corpus_path, "JSON lines with a \"text\" string", "FILE")->required();
    app.add_number("--seconds", &seconds, "least time per measurement (default 3)", 0);
    app.add_int("--threads", &threads, "encode_batch threads (default 0: all cores)", 0, 1024);
    if (!app.parse(argc, argv)) return 0;

    const auto docs = read_corpus(corpus_path);
    size_t bytes = 0;
    for (const auto& d : docs) bytes += d.size();
    const double t0 = now_s();
    const auto tok = zt::load_tokenizer(dir);
    const double load_s = now_s() - t0;

    const auto one_pass = [&] {
      size_t n = 0;
      for (const auto& d : docs) n += tok->encode(d).size();
      return n;
    };
    const size_t tokens = one_pass();  // also warms the piece cache, as a long run would be
    const double single = rate(seconds, one_pass);
    const double batch = rate(seconds, [&] {
      size_t n = 0;
      for (const auto& ids : zt::encode_batch(*tok, docs, true, threads)) n += ids.size();
      return n;
    });
    const nlohmann::ordered_json out = {{"tokenizer", dir},          {"documents", docs.size()},
                                        {"bytes", bytes},            {"tokens", tokens},
                                        {"load_s", load_s},          {"tokens_per_s", single},
                                        {"batch_tokens_per_s", batch}};
    std::printf("%s\n", out.dump().c_str());
    return 0;
  } catch (const zeroshard::UsageError& e) {
    std::fprintf(stderr, "bench_tokenizer: usage error: %s\n", e.message().c_str());
    return 2;
  } catch (const zeroshard::Error& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", e.message().c_str());
    return 1;
  }
}
