// SPDX-License-Identifier: Apache-2.0
// Untrusted JSON text through nlohmann-json with a nesting limit and duplicate keys refused (json_text.h).

#include "json_text.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard::detail {
namespace {

using Json = nlohmann::ordered_json;

// Reads `text` for nlohmann's parser and counts the bytes it has taken, so that a refusal from the
// parser callback can say where the parser was (its own position is private to it).
class CountingIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  CountingIterator(const char* p, size_t* taken) : p_(p), taken_(taken) {}
  reference operator*() const { return *p_; }
  CountingIterator& operator++() {
    ++p_;
    ++*taken_;
    return *this;
  }
  bool operator==(const CountingIterator& o) const { return p_ == o.p_; }
  bool operator!=(const CountingIterator& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  size_t* taken_;
};

// What the callback refuses, thrown out of the parser.
struct Refusal {
  std::string what;
};

// "column C" or "line L, column C" of the last of the first `taken` bytes of `text`.
std::string position(const std::string& text, size_t taken) {
  const size_t at = std::min(taken == 0 ? 0 : taken - 1, text.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < at; ++i) {
    if (text[i] == '\n') ++line, line_start = i + 1;
  }
  const std::string column = "column " + std::to_string(at - line_start + 1);
  return text.find('\n') == std::string::npos ? column : "line " + std::to_string(line) + ", " + column;
}

}  // namespace

nlohmann::ordered_json parse_untrusted_json(const std::string& text, const std::string& what, int max_depth) {
  size_t taken = 0;
  std::vector<std::set<std::string>> keys;  // of each object being read, innermost last
  const Json::parser_callback_t check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      if (depth >= max_depth) {
        throw Refusal{"objects and arrays nested deeper than " + std::to_string(max_depth) + " levels"};
      }
      if (event == Json::parse_event_t::object_start) keys.emplace_back();
    } else if (event == Json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!keys.back().insert(key).second) throw Refusal{"key \"" + key + "\" appears twice in one object"};
    } else if (event == Json::parse_event_t::object_end) {
      keys.pop_back();
    }
    return true;
  };
  try {
    const CountingIterator begin(text.data(), &taken), end(text.data() + text.size(), &taken);
    return Json::parse(begin, end, check);
  } catch (const Json::parse_error& e) {
    ZS_THROW(IoError, what, ": ", position(text, e.byte), ": ", json_error_reason(e.what()));
  } catch (const Json::exception& e) {  // a number out of range ("1e999")
    ZS_THROW(IoError, what, ": ", position(text, taken), ": ", json_error_reason(e.what()));
  } catch (const Refusal& r) {
    ZS_THROW(IoError, what, ": ", position(text, taken), ": ", r.what);
  }
}

}  // namespace zeroshard::detail
