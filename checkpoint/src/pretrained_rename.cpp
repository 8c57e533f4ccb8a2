// SPDX-License-Identifier: Apache-2.0
// File tensor names to model names for load_pretrained (pretrained_rename.h): prefixes, exact
// pairs, then templates and regular expressions compiled once.

#include "pretrained_rename.h"

#include <cctype>
#include <map>
#include <tuple>

#include "zeroshard/base/error.h"

namespace zeroshard::detail {
namespace {

std::string label_of(const RenamePattern& p) { return p.from + "=" + p.to; }

std::string regex_escaped(char c) {
  static const std::string kSpecial = R"(\^$.|?*+()[]{}/)";
  return kSpecial.find(c) != std::string::npos ? std::string("\\") + c : std::string(1, c);
}

// Splits a template into literal text and {NAME} placeholders; `each` gets (literal, "") or ("", name).
template <typename Fn>
void parse_template(const std::string& text, const std::string& label, const char* side, Fn each) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '}') {
      ZS_THROW(ConfigError, "rename pattern '", label, "': the ", side, " has a '}' without its '{'");
    }
    if (text[i] != '{') {
      each(std::string(1, text[i]), std::string());
      continue;
    }
    const size_t close = text.find('}', i);
    ZS_REQUIRE(close != std::string::npos, ConfigError, "rename pattern '", label, "': the ", side,
               " has a '{' without its '}'");
    const std::string name = text.substr(i + 1, close - i - 1);
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
    for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    ZS_REQUIRE(ok, ConfigError, "rename pattern '", label, "': placeholder '{", name, "}' in the ", side,
               " is not a name (letters, digits and '_', such as {N})");
    each(std::string(), name);
    i = close;
  }
}

// A template as a regular expression (each placeholder one dotted component) and its replacement.
std::pair<std::string, std::string> compile_template(const RenamePattern& p) {
  const std::string label = label_of(p);
  std::map<std::string, int> groups;
  std::string re;
  parse_template(p.from, label, "file name", [&](const std::string& literal, const std::string& name) {
    if (name.empty()) {
      re += regex_escaped(literal[0]);
      return;
    }
    ZS_REQUIRE(!groups.count(name), ConfigError, "rename pattern '", label, "': {", name,
               "} appears twice in the file name");
    const int g = static_cast<int>(groups.size()) + 1;
    groups[name] = g;
    re += "([^.]+)";
  });
  std::string replacement;
  parse_template(p.to, label, "model name", [&](const std::string& literal, const std::string& name) {
    if (name.empty()) {
      replacement += literal == "$" ? "$$" : literal;
      return;
    }
    auto it = groups.find(name);
    ZS_REQUIRE(it != groups.end(), ConfigError, "rename pattern '", label, "': {", name,
               "} in the model name is not in the file name");
    replacement += "$" + std::to_string(it->second);
  });
  return {re, replacement};
}

// Every $n of a regex replacement must name a group of the expression.
void check_replacement(const RenamePattern& p, unsigned groups) {
  for (size_t i = 0; i + 1 < p.to.size(); ++i) {
    if (p.to[i] != '$') continue;
    if (p.to[i + 1] == '$') {
      ++i;
      continue;
    }
    if (!std::isdigit(static_cast<unsigned char>(p.to[i + 1]))) continue;
    size_t end = i + 1;
    while (end < p.to.size() && std::isdigit(static_cast<unsigned char>(p.to[end]))) ++end;
    const unsigned g = static_cast<unsigned>(std::stoul(p.to.substr(i + 1, end - i - 1)));
    ZS_REQUIRE(g >= 1 && g <= groups, ConfigError, "rename pattern '", label_of(p), "': $", g,
               " refers to group ", g, " but the expression has ", groups, " group", groups == 1 ? "" : "s");
    i = end - 1;
  }
}

}  // namespace

NameMapper::NameMapper(const PretrainedOptions& options) : o_(options) {
  for (const RenamePattern& p : options.rename_patterns) {
    const std::string label = label_of(p);
    ZS_REQUIRE(!p.from.empty() && !p.to.empty(), ConfigError, "rename pattern '", label,
               "': both the file name and the model name must be given");
    Compiled c;
    c.label = label;
    std::string expression = p.from;
    c.replacement = p.to;
    if (p.kind == RenamePattern::Kind::kTemplate) std::tie(expression, c.replacement) = compile_template(p);
    try {
      c.re = std::regex(expression, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      ZS_THROW(ConfigError, "rename pattern '", label, "': '", p.from, "' is not a valid regular expression (",
               e.what(), ")");
    }
    if (p.kind == RenamePattern::Kind::kRegex) check_replacement(p, static_cast<unsigned>(c.re.mark_count()));
    patterns_.push_back(std::move(c));
  }
}

std::string NameMapper::map(const std::string& file_name, std::string* rule) const {
  if (rule != nullptr) rule->clear();
  std::string name = file_name;
  if (!o_.strip_prefix.empty() && name.rfind(o_.strip_prefix, 0) == 0) name = name.substr(o_.strip_prefix.size());
  name = o_.add_prefix + name;
  auto it = o_.rename.find(name);
  if (it != o_.rename.end()) return it->second;
  for (const Compiled& c : patterns_) {
    std::smatch m;
    if (!std::regex_match(name, m, c.re)) continue;
    if (rule != nullptr) *rule = c.label;
    return m.format(c.replacement);
  }
  return name;
}

}  // namespace zeroshard::detail
