// SPDX-License-Identifier: Apache-2.0
// Messages built from the config schema's descriptors. See schema_text.h.

#include "schema_text.h"

#include <limits>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard::schema_text {

namespace pb = ::google::protobuf;

namespace {

// The nearest valid key for `name` typed inside `message` at `prefix`: first a close sibling
// name, then any leaf anywhere in the schema whose last component matches or is close (for a key
// put in the wrong section). Empty when nothing is close.
std::string suggest_key(const pb::Descriptor* message, const std::string& prefix,
                        const std::string& name) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (int i = 0; i < message->field_count(); ++i) {
    const std::string& candidate = message->field(i)->name();
    size_t d = edit_distance(name, candidate, /*ignore_case=*/true);
    if (d < best_distance && is_close_spelling(name, candidate, d)) {
      best = join_path(prefix, candidate);
      best_distance = d;
    }
  }
  if (!best.empty()) return best;
  std::vector<std::string> leaves;
  collect_leaf_paths(Config::descriptor(), "", &leaves);
  for (const std::string& leaf : leaves) {
    std::string last = leaf.substr(leaf.rfind('.') + 1);
    size_t d = edit_distance(name, last, /*ignore_case=*/true);
    if (d < best_distance && is_close_spelling(name, last, d)) {
      best = leaf;
      best_distance = d;
    }
  }
  return best;
}

}  // namespace

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

void collect_leaf_paths(const pb::Descriptor* message, const std::string& prefix,
                        std::vector<std::string>* out) {
  for (int i = 0; i < message->field_count(); ++i) {
    const pb::FieldDescriptor* f = message->field(i);
    if (f->is_repeated()) continue;  // lists (optimizer.param_groups) come from config files only
    std::string path = join_path(prefix, f->name());
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      collect_leaf_paths(f->message_type(), path, out);
    } else {
      out->push_back(path);
    }
  }
}

std::string enum_names(const pb::EnumDescriptor* e) {
  std::string out;
  for (int i = 0; i < e->value_count(); ++i) {
    if (i > 0) out += ", ";
    out += e->value(i)->name();
  }
  return out;
}

std::string unknown_key_message(const pb::Descriptor* message, const std::string& prefix,
                                const std::string& name) {
  std::string out = "unknown key '" + join_path(prefix, name) + "'";
  std::string suggestion = suggest_key(message, prefix, name);
  if (!suggestion.empty()) out += " (did you mean '" + suggestion + "'?)";
  out += prefix.empty() ? "; valid top-level keys: " : "; valid keys in '" + prefix + "': ";
  for (int i = 0; i < message->field_count(); ++i) {
    if (i > 0) out += ", ";
    out += message->field(i)->name();
  }
  return out;
}

std::string format_value(double v) {
  std::string s = format_double(v);  // shortest round trip, e.g. "1e-08"
  const size_t e = s.find('e');
  if (e == std::string::npos) return s;
  const std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
  const std::string sign = exponent[0] == '-' ? "-" : "";
  const size_t digits = exponent.find_first_not_of("+-0");
  return mantissa + "e" + sign + (digits == std::string::npos ? "0" : exponent.substr(digits));
}

std::string format_problems(const std::vector<ConfigProblem>& problems,
                            const std::function<std::string(const ConfigProblem&)>& suffix) {
  std::string out;
  if (problems.size() > 1) out = detail::concat(problems.size(), " problems:\n  ");
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i > 0) out += "\n  ";
    out += problems[i].message + suffix(problems[i]);
  }
  return out;
}

}  // namespace zeroshard::schema_text
