// SPDX-License-Identifier: Apache-2.0
// zeroshard-data encode / decode: text and token ids with a model's own tokenizer
// (zeroshard/text/tokenizer.h), from the shell.
//
//   zeroshard-data encode --tokenizer DIR [--jsonl] [--field NAME] [--no-special-tokens] [--threads N] [FILE|-]
//       each line of text (or, with --jsonl, each JSON object's "text" string) -> one JSON array of ids
//   zeroshard-data decode --tokenizer DIR [--jsonl] [--skip-special-tokens] [FILE|-]
//       each JSON array of ids -> the text (with --jsonl, as {"text": ...} lines)
//
// Output goes to stdout, one line per input line; errors name the file and line.

#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "subcommand.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"
#include "zeroshard/text/tokenizer.h"

namespace zs = zeroshard;
namespace zt = zeroshard::text;

namespace zeroshard::data_tool {
namespace {

constexpr const char* kProgram = "zeroshard-data";
constexpr size_t kBatchLines = 2048;  // lines encoded together on all threads

// Lines of FILE, or of stdin for "-", with their source name for errors.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : name_(path == "-" ? "<stdin>" : path) {
    if (path != "-") {
      file_ = std::make_unique<std::ifstream>(path, std::ios::binary);
      ZS_REQUIRE(*file_, zs::IoError, path, ": cannot open: ", zs::detail::errno_string(errno));
    }
  }
  bool next(std::string& line) {
    std::istream& in = file_ ? *file_ : std::cin;
    if (!std::getline(in, line)) return false;
    ++line_number_;
    return true;
  }
  std::string where() const { return name_ + ":" + std::to_string(line_number_); }
  std::string where(size_t line_number) const { return name_ + ":" + std::to_string(line_number); }
  size_t line_number() const { return line_number_; }

 private:
  std::string name_;
  std::unique_ptr<std::ifstream> file_;
  size_t line_number_ = 0;
};

std::string ids_json(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(ids[i]);
  }
  out += ']';
  return out;
}

using Json = nlohmann::json;

// One input line as JSON; a malformed line is an Error "WHERE: column C: what was wrong".
Json parse_line(const std::string& line, const std::string& where) {
  try {
    return Json::parse(line);
  } catch (const Json::parse_error& e) {
    ZS_THROW(zs::Error, where, ": column ", e.byte, ": ", zs::json_error_reason(e.what()));
  } catch (const Json::exception& e) {  // a number out of range ("1e999")
    ZS_THROW(zs::Error, where, ": ", zs::json_error_reason(e.what()));
  }
}

// The text to encode from one input line.
std::string text_of(const std::string& line, bool jsonl, const std::string& field, const std::string& where) {
  if (!jsonl) return line;
  const Json v = parse_line(line, where);
  const auto text = v.is_object() ? v.find(field) : v.end();
  ZS_REQUIRE(text != v.end() && text->is_string(), zs::Error, where, ": expected a JSON object with a string \"",
             field, "\"");
  return text->get<std::string>();
}

std::vector<int32_t> ids_of(const std::string& line, const std::string& where) {
  const Json v = parse_line(line, where);
  ZS_REQUIRE(v.is_array(), zs::Error, where, ": expected a JSON array of token ids, got ", v.type_name());
  std::vector<int32_t> ids;
  ids.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const double item = v[i].is_number() ? v[i].get<double>() : -1;
    ZS_REQUIRE(std::nearbyint(item) == item && item >= 0 && item <= 2147483647.0, zs::Error, where, ": item ", i,
               " is not a token id (an integer in [0, 2^31))");
    ids.push_back(static_cast<int32_t>(item));
  }
  return ids;
}

int run_encode(const std::vector<std::string>& args) {
  std::string tokenizer_path, input = "-", field = "text";
  bool jsonl = false, no_special = false;
  int threads = 0;
  zs::cli::App app(std::string(kProgram) + " encode", "Encodes text into token ids, one JSON array per line.");
  app.usage(std::string(kProgram) + " encode --tokenizer DIR [OPTIONS] [FILE|-]");
  app.add_text("--tokenizer", &tokenizer_path, "a model directory (tokenizer.json or tokenizer.model) or the file",
               "DIR")->required();
  app.add_flag("--jsonl", &jsonl, "input lines are JSON objects; encode their --field string");
  app.add_text("--field", &field, "the string field of --jsonl input (default text)", "NAME");
  app.add_flag("--no-special-tokens", &no_special, "leave out BOS/EOS and other tokens the post-processor adds");
  app.add_int("--threads", &threads, "encoding threads (default 0: all cores)", 0, 1024);
  app.add_text("FILE", &input, "input file, - for stdin (default)", "FILE");
  if (!app.parse(args)) return 0;

  const auto tokenizer = zt::load_tokenizer(tokenizer_path);
  LineReader reader(input);
  std::vector<std::string> texts;
  std::string line;
  bool more = true;
  while (more) {
    texts.clear();
    const size_t first_line = reader.line_number() + 1;
    while (texts.size() < kBatchLines && (more = reader.next(line))) {
      texts.push_back(text_of(line, jsonl, field, reader.where()));
    }
    if (texts.empty()) break;
    std::vector<std::vector<int32_t>> ids;
    try {
      ids = zt::encode_batch(*tokenizer, texts, !no_special, threads);
    } catch (const zs::Error& e) {
      // Name the line: encode the batch's lines one by one up to the failing one.
      for (size_t i = 0; i < texts.size(); ++i) {
        try {
          tokenizer->encode(texts[i], !no_special);
        } catch (const zs::Error& inner) {
          ZS_THROW(zs::Error, reader.where(first_line + i), ": ", inner.message());
        }
      }
      throw;
    }
    for (const auto& row : ids) std::fputs((ids_json(row) + "\n").c_str(), stdout);
  }
  return 0;
}

int run_decode(const std::vector<std::string>& args) {
  std::string tokenizer_path, input = "-";
  bool jsonl = false, skip_special = false;
  zs::cli::App app(std::string(kProgram) + " decode", "Decodes JSON arrays of token ids into text, line by line.");
  app.usage(std::string(kProgram) + " decode --tokenizer DIR [OPTIONS] [FILE|-]");
  app.add_text("--tokenizer", &tokenizer_path, "a model directory (tokenizer.json or tokenizer.model) or the file",
               "DIR")->required();
  app.add_flag("--jsonl", &jsonl, "write {\"text\": ...} lines (text with newlines stays one line)");
  app.add_flag("--skip-special-tokens", &skip_special, "leave special tokens (BOS, EOS, ...) out of the text");
  app.add_text("FILE", &input, "input file, - for stdin (default)", "FILE");
  if (!app.parse(args)) return 0;

  const auto tokenizer = zt::load_tokenizer(tokenizer_path);
  LineReader reader(input);
  std::string line;
  while (reader.next(line)) {
    std::string text;
    try {
      text = tokenizer->decode(ids_of(line, reader.where()), skip_special);
    } catch (const zs::UsageError& e) {  // an id outside the vocabulary
      ZS_THROW(zs::Error, reader.where(), ": ", e.message());
    }
    // Bytes that are not UTF-8 (a token that is part of a character) become U+FFFD in JSON.
    const std::string out =
        jsonl ? Json{{"text", text}}.dump(-1, ' ', false, Json::error_handler_t::replace) : text;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fputc('\n', stdout);
  }
  return 0;
}

const bool registered = register_subcommand(
                            {"encode", "text lines (or JSONL \"text\" fields) -> JSON arrays of token ids", run_encode}) &&
                        register_subcommand({"decode", "JSON arrays of token ids -> text lines", run_decode});

}  // namespace
}  // namespace zeroshard::data_tool
