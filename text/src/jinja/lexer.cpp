// SPDX-License-Identifier: Apache-2.0
#include "jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "jinja/unicode.h"
#include "zeroshard/base/error.h"

namespace zeroshard::text::jinja {

void fail_at(const std::string& source_name, int line, const std::string& message) {
  ZS_THROW(ConfigError, source_name, ":", line, ": ", message);
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The length of the whitespace code point at s[i] (Python's \s), or 0.
size_t space_at(const std::string& s, size_t i) {
  if (i >= s.size()) return 0;
  const unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return unicode::is_space(c) ? 1 : 0;
  size_t n = 1;
  while (i + n < s.size() && (static_cast<unsigned char>(s[i + n]) & 0xC0) == 0x80) ++n;
  return unicode::is_space(unicode::decode(std::string_view(s).substr(i, n))[0]) ? n : 0;
}

std::string rstrip_space(const std::string& s) {
  const std::u32string cps = unicode::decode(s);
  size_t end = cps.size();
  while (end > 0 && unicode::is_space(cps[end - 1])) --end;
  return unicode::encode(std::u32string_view(cps).substr(0, end));
}

// "\r\n" and "\r" become "\n"; one trailing newline goes (Jinja's keep_trailing_newline=False).
std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  Lexer(const std::string& source, const std::string& name) : src_(normalize_newlines(source)), name_(name) {}

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        push(Token::Type::kText, src_.substr(pos_), line_);
        break;
      }
      const char kind = src_[tag + 1];
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      emit_text_before(tag, kind, sign);
      advance_to(tag + 2 + (sign ? 1 : 0));
      if (kind == '#') {
        lex_comment();
      } else if (kind == '%' && at_raw_begin()) {
        lex_raw();
      } else {
        lex_tag(kind);
      }
    }
    push(Token::Type::kEnd, "", line_);
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(int line, const std::string& message) const { fail_at(name_, line, message); }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void advance_to(size_t p) {
    for (; pos_ < p; ++pos_) line_ += src_[pos_] == '\n';
  }
  bool starts_with(const char* s) const { return src_.compare(pos_, std::char_traits<char>::length(s), s) == 0; }
  void skip_space() {
    for (size_t n = space_at(src_, pos_); n > 0; n = space_at(src_, pos_)) advance_to(pos_ + n);
  }
  void push(Token::Type type, std::string text, int line) { tokens_.push_back(Token{type, std::move(text), line}); }

  // Text up to a tag, with the tag's whitespace control: "-" strips all whitespace before it;
  // otherwise a block or comment alone on its line (lstrip_blocks) takes the indentation with it.
  void emit_text_before(size_t tag, char kind, char sign) {
    std::string text = src_.substr(pos_, tag - pos_);
    if (sign == '-') {
      text = rstrip_space(text);
    } else if (kind != '{' && sign != '+') {
      text = lstrip_indentation(std::move(text));
    }
    if (!text.empty()) push(Token::Type::kText, std::move(text), line_);
  }

  std::string lstrip_indentation(std::string text) const {
    const size_t line_start = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    if (line_start == 0 && !line_starting_) return text;
    if (line_start == text.size()) return text;
    for (size_t i = line_start; i < text.size();) {
      const size_t n = space_at(text, i);
      if (n == 0) return text;
      i += n;
    }
    text.resize(line_start);
    return text;
  }

  // After a tag's end marker: "-" strips the whitespace that follows, "+" keeps it, and without a
  // marker one newline goes (trim_blocks) when `trims` (blocks and comments, not {{ }}).
  void after_tag_end(char marker, bool trims) {
    if (marker == '-') {
      skip_space();
    } else if (marker != '+' && trims && pos_ < src_.size() && src_[pos_] == '\n') {
      advance_to(pos_ + 1);
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void lex_comment() {
    const int start_line = line_;
    const size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) fail(start_line, "unterminated comment: '{#' has no '#}'");
    const char marker = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    advance_to(end + 2);
    after_tag_end(marker, true);
  }

  // Whether `{% raw %}` starts here (just after "{%" and its marker).
  bool at_raw_begin() const {
    size_t i = pos_;
    while (space_at(src_, i) > 0) i += space_at(src_, i);
    if (src_.compare(i, 3, "raw") != 0 || (i + 3 < src_.size() && is_name_char(src_[i + 3]))) return false;
    i += 3;
    while (space_at(src_, i) > 0) i += space_at(src_, i);
    if (i < src_.size() && (src_[i] == '-' || src_[i] == '+')) ++i;
    return src_.compare(i, 2, "%}") == 0;
  }

  void lex_raw() {
    const int start_line = line_;
    const size_t close = src_.find("%}", pos_);
    const bool strip_after = src_[close - 1] == '-';
    advance_to(close + 2);
    if (strip_after) skip_space();  // no trim_blocks after {% raw %}, as in Jinja
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
    size_t end_tag = find_tag(pos_);
    size_t after_name = 0;
    char sign = 0;
    for (; end_tag != std::string::npos; end_tag = find_tag(end_tag + 1)) {
      if (src_[end_tag + 1] != '%') continue;
      size_t i = end_tag + 2;
      sign = i < src_.size() && (src_[i] == '-' || src_[i] == '+') ? src_[i++] : 0;
      while (space_at(src_, i) > 0) i += space_at(src_, i);
      if (src_.compare(i, 6, "endraw") == 0) {
        after_name = i + 6;
        break;
      }
    }
    if (end_tag == std::string::npos) fail(start_line, "'{% raw %}' is never closed: expected '{% endraw %}'");
    emit_text_before(end_tag, '%', sign);
    advance_to(after_name);
    skip_space();
    char marker = 0;
    if (pos_ < src_.size() && (src_[pos_] == '-' || src_[pos_] == '+')) marker = src_[pos_];
    if (src_.compare(pos_ + (marker ? 1 : 0), 2, "%}") != 0) fail(line_, "expected '%}' after 'endraw'");
    advance_to(pos_ + (marker ? 3 : 2));
    after_tag_end(marker, true);
  }

  // The tokens of a {{ }} or {% %} tag up to its end marker (not inside brackets, as in Jinja).
  void lex_tag(char kind) {
    const int start_line = line_;
    push(kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", start_line);
    const char* open = kind == '{' ? "{{" : "{%";
    const char* close = kind == '{' ? "}}" : "%}";
    std::string brackets;
    while (true) {
      skip_space();
      if (pos_ >= src_.size()) {
        fail(start_line, std::string("unterminated tag: '") + open + "' has no '" + close + "'");
      }
      if (brackets.empty() && at_tag_end(kind, close)) return;
      lex_token(brackets);
    }
  }

  bool at_tag_end(char kind, const char* close) {
    char marker = 0;
    if ((src_[pos_] == '-' || (src_[pos_] == '+' && kind == '%')) && src_.compare(pos_ + 1, 2, close) == 0) {
      marker = src_[pos_];
    } else if (src_.compare(pos_, 2, close) != 0) {
      return false;
    }
    push(kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", line_);
    advance_to(pos_ + (marker ? 3 : 2));
    after_tag_end(marker, kind == '%');
    return true;
  }

  void lex_token(std::string& brackets) {
    const char c = src_[pos_];
    if (c == '\'' || c == '"') return lex_string();
    if (is_digit(c)) return lex_number();
    if (is_name_start(c)) {
      size_t end = pos_;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      push(Token::Type::kName, src_.substr(pos_, end - pos_), line_);
      advance_to(end);
      return;
    }
    static const char* const kOperators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~",
                                             "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOperators) {
      if (!starts_with(op)) continue;
      track_bracket(op[0], brackets);
      push(Token::Type::kOp, op, line_);
      advance_to(pos_ + std::char_traits<char>::length(op));
      return;
    }
    std::string shown;
    unicode::append_utf8(shown, unicode::decode(std::string_view(src_).substr(pos_, 4))[0]);
    fail(line_, "unexpected character '" + shown + "' in a tag");
  }

  void track_bracket(char c, std::string& brackets) {
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c);
      return;
    }
    if (c != ')' && c != ']' && c != '}') return;
    const char open = c == ')' ? '(' : c == ']' ? '[' : '{';
    if (brackets.empty()) fail(line_, std::string("unexpected '") + c + "'");
    if (brackets.back() != open) {
      const char expected = brackets.back() == '(' ? ')' : brackets.back() == '[' ? ']' : '}';
      fail(line_, std::string("unexpected '") + c + "', expected '" + expected + "'");
    }
    brackets.pop_back();
  }

  void lex_number() {
    const int line = line_;
    const size_t start = pos_;
    auto digits = [&](size_t i) {  // \d+(_\d+)*
      if (i >= src_.size() || !is_digit(src_[i])) return i;
      while (i < src_.size() && (is_digit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1])))) ++i;
      return i;
    };
    size_t end = digits(start);
    bool is_float = false;
    const bool after_dot = start > 0 && src_[start - 1] == '.';  // foo.0.1 is foo[0][1]
    if (!after_dot && end + 1 < src_.size() && src_[end] == '.' && is_digit(src_[end + 1])) {
      end = digits(end + 1);
      is_float = true;
    }
    if (!after_dot && end < src_.size() && (src_[end] == 'e' || src_[end] == 'E')) {
      size_t e = end + 1;
      if (e < src_.size() && (src_[e] == '+' || src_[e] == '-')) ++e;
      if (digits(e) > e) {
        end = digits(e);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = start; i < end; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    advance_to(end);
    Token t{is_float ? Token::Type::kFloat : Token::Type::kInt, text, line};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(line, "integer literal " + text + " is out of range");
    }
    tokens_.push_back(std::move(t));
  }

  void lex_string() {
    const int line = line_;
    const char quote = src_[pos_];
    size_t i = pos_ + 1;
    while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
    if (i >= src_.size()) fail(line, "unterminated string literal");
    std::string value = unescape(src_.substr(pos_ + 1, i - pos_ - 1), line);
    advance_to(i + 1);
    push(Token::Type::kString, std::move(value), line);
  }

  // Python's string escapes; an unknown one stays as written (\q is backslash, q).
  std::string unescape(const std::string& s, int line) const {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out += s[i];
        continue;
      }
      const char e = s[++i];
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x': unicode::append_utf8(out, hex_escape(s, i, 2, line)); break;
        case 'u': unicode::append_utf8(out, hex_escape(s, i, 4, line)); break;
        case 'U': unicode::append_utf8(out, hex_escape(s, i, 8, line)); break;
        case 'N': fail(line, "the \\N{name} escape is not supported in string literals");
        default:
          if (e >= '0' && e <= '7') {
            char32_t c = 0;
            size_t n = 0;
            for (; n < 3 && i < s.size() && s[i] >= '0' && s[i] <= '7'; ++n, ++i) c = c * 8 + (s[i] - '0');
            --i;
            unicode::append_utf8(out, c);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    return out;
  }

  // The code point of the `digits` hex digits after s[i] (the escape letter); i ends on the last.
  char32_t hex_escape(const std::string& s, size_t& i, int digits, int line) const {
    char32_t c = 0;
    for (int k = 0; k < digits; ++k) {
      const int h = i + 1 < s.size() ? hex_value(s[i + 1]) : -1;
      if (h < 0) fail(line, "truncated \\" + std::string(1, s[i - k]) + " escape in a string literal");
      c = c * 16 + static_cast<char32_t>(h);
      ++i;
    }
    if ((c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) fail(line, "string literal escape is not a valid code point");
    return c;
  }

  std::string src_;
  const std::string& name_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;  // the last tag ended a line (lstrip_blocks applies to text without '\n')
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(const std::string& source, const std::string& source_name) {
  return Lexer(source, source_name).run();
}

}  // namespace zeroshard::text::jinja
