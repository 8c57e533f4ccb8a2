// SPDX-License-Identifier: Apache-2.0
#include "pcre_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>

#include "json_file.h"
#include "unicode.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text::detail {

namespace {

constexpr const char* kWordClassBody = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  const int n = pcre2_get_error_message(code, buffer, sizeof(buffer));
  return n < 0 ? "PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<const char*>(buffer));
}

// Per-thread match scratch: one ovector pair (only the whole match is read) and a JIT stack that
// grows to 64 MiB, for patterns such as \s+(?!\S) over long runs of whitespace.
struct Scratch {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  Scratch() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~Scratch() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

std::string oniguruma_to_pcre2(const std::string& p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') {
        out += "\\p{White_Space}";
      } else if (e == 'S') {
        out += "\\P{White_Space}";
      } else if (e == 'w') {
        out += in_class ? std::string(kWordClassBody) : std::string("[") + kWordClassBody + "]";
      } else if (e == 'W' && !in_class) {
        out += std::string("[^") + kWordClassBody + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

std::string regex_quote(std::string_view text) {
  std::string out;
  out.reserve(text.size() * 2);
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where)
    : pattern_(pattern), where_(where), code_(std::make_unique<Code>()) {
  const std::string translated = oniguruma_to_pcre2(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  ZS_REQUIRE(code_->code != nullptr, ConfigError, where, ": regex '", pattern, "' does not compile at offset ",
             offset, " (of the PCRE2 form '", translated, "'): ", pcre2_message(error));
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  Scratch& s = scratch();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    const int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, s.data,
                                                s.context)
                              : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, s.data,
                                            s.context);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    ZS_REQUIRE(rc >= 0, UsageError, where_, ": regex '", pattern_, "' failed on a text of ", text.size(),
               " bytes: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {  // an empty match: look again one character further
      if (begin >= text.size()) return;
      start = begin + utf8_length(static_cast<unsigned char>(text[begin]));
    }
  }
}

void Pattern::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  if (regex_) {
    regex_->find_all(text, out);
    return;
  }
  if (literal_.empty()) return;
  for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size())) {
    out.emplace_back(at, at + literal_.size());
  }
}

std::string Pattern::replace_all(std::string_view text, std::string_view content) const {
  thread_local std::vector<std::pair<size_t, size_t>> matches;
  matches.clear();
  find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t done = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.substr(done, begin - done));
    out.append(content);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

Pattern parse_pattern(const JsonAt& at) {
  const JsonAt pattern = at.at("pattern");
  if (auto literal = pattern.find("String")) return Pattern(literal->as_str());
  if (auto regex = pattern.find("Regex")) {
    return Pattern(std::make_shared<const Regex>(regex->as_str(), pattern.file() + ": " + regex->path()));
  }
  pattern.fail("expected {\"String\": ...} or {\"Regex\": ...}, got " + pattern.value().dump());
}

}  // namespace zeroshard::text::detail
