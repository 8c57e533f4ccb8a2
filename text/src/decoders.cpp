// SPDX-License-Identifier: Apache-2.0
#include "decoders.h"

#include "byte_level.h"
#include "json_file.h"
#include "pcre_regex.h"
#include "unicode.h"

namespace zeroshard::text::detail {

namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

// All tokens' bytes as one string; a token with a character outside GPT-2's table (an added
// token such as "<｜end▁of▁sentence｜>") stands for its own UTF-8 bytes.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      if (auto decoded = byte_level_decode(token)) {
        bytes += *decoded;
      } else {
        bytes += token;
      }
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class RawBytesDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) bytes += token;
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = pattern_.replace_all(token, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// Runs of <0xXX> tokens become the text of their bytes, or one U+FFFD per byte when the run is not
// well-formed UTF-8.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_length = 0;
    const auto flush = [&] {
      if (run_length == 0) return;
      if (find_invalid_utf8(run) == std::string::npos) {
        out.push_back(run);
      } else {
        for (size_t k = 0; k < run_length; ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      run.clear();
      run_length = 0;
    };
    for (std::string& token : tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') byte = hex_byte(token[3], token[4]);
      if (byte >= 0) {
        run.push_back(static_cast<char>(byte));
        ++run_length;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }
  static int hex_byte(char hi, char lo) {
    const int h = hex_digit(hi), l = hex_digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& token : tokens) all += token;
    tokens.assign(1, std::move(all));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const size_t n = content_.size();
    for (std::string& token : tokens) {
      size_t begin = 0, end = token.size();
      for (size_t k = 0; k < start_ && end - begin >= n && token.compare(begin, n, content_) == 0; ++k) begin += n;
      for (size_t k = 0; k < stop_ && end - begin >= n && token.compare(end - n, n, content_) == 0; ++k) end -= n;
      token = token.substr(begin, end - begin);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

// The replacement character becomes a space; in the first token it is dropped when the
// pre-tokenizer prepends one.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const Pattern pattern(replacement_);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = pattern.replace_all(tokens[i], i == 0 && drop_in_first_ ? "" : " ");
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

class BpeSuffixDecoder : public Decoder {
 public:
  explicit BpeSuffixDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    const Pattern pattern(suffix_);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = pattern.replace_all(tokens[i], i + 1 == tokens.size() ? "" : " ");
    }
  }

 private:
  std::string suffix_;
};

size_t count(const JsonAt& config, const char* key) {
  const int64_t n = config.integer_or(key, 0);
  if (n < 0) config.at(key).fail("expected a count >= 0, got " + std::to_string(n));
  return static_cast<size_t>(n);
}

constexpr const char* kSupported = "Sequence, ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace, BPEDecoder";

}  // namespace

std::unique_ptr<Decoder> make_raw_bytes_decoder() { return std::make_unique<RawBytesDecoder>(); }

std::unique_ptr<Decoder> make_decoder(const JsonAt& config) {
  const std::string type = config.str("type");
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> steps;
    for (const JsonAt& step : config.items("decoders")) steps.push_back(make_decoder(step));
    return std::make_unique<SequenceDecoder>(std::move(steps));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(parse_pattern(config), config.str("content"));
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    return std::make_unique<StripDecoder>(config.str("content"), count(config, "start"), count(config, "stop"));
  }
  if (type == "Metaspace") {
    std::string scheme = config.str_or("prepend_scheme", "");
    if (scheme.empty()) scheme = config.flag_or("add_prefix_space", true) ? "always" : "never";
    if (scheme != "always" && scheme != "first" && scheme != "never") {
      config.at("prepend_scheme").fail("'" + scheme + "' is not one of always, first, never");
    }
    return std::make_unique<MetaspaceDecoder>(config.str_or("replacement", "\xE2\x96\x81"), scheme != "never");
  }
  if (type == "BPEDecoder") return std::make_unique<BpeSuffixDecoder>(config.str_or("suffix", "</w>"));
  config.unsupported_type(type, kSupported);
}

}  // namespace zeroshard::text::detail
