// SPDX-License-Identifier: Apache-2.0
// Config files (text format and JSON), validation, printing and the field list, all by protobuf
// reflection over zeroshard.proto: the schema is the only place a key, default or range is written.

#include "zeroshard/config/config.h"
#include "config_rules.h"
#include "schema_text.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/struct.pb.h>
#include <google/protobuf/text_format.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard {
namespace {

namespace pb = ::google::protobuf;
namespace opt = ::zeroshard::config;
using Cpp = pb::FieldDescriptor::CppType;

using schema_text::join_path;

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {  // newline, tab and other controls as octal escapes
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

bool is_integer_type(const pb::FieldDescriptor* f) {
  const Cpp t = f->cpp_type();
  return t == Cpp::CPPTYPE_INT32 || t == Cpp::CPPTYPE_INT64 || t == Cpp::CPPTYPE_UINT32 ||
         t == Cpp::CPPTYPE_UINT64;
}

bool is_numeric(const pb::FieldDescriptor* f) {
  return is_integer_type(f) || f->cpp_type() == Cpp::CPPTYPE_DOUBLE ||
         f->cpp_type() == Cpp::CPPTYPE_FLOAT;
}

// The effective value of a singular leaf as text (default when unset); strings quoted.
std::string leaf_text(const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case Cpp::CPPTYPE_BOOL:
      return r->GetBool(m, f) ? "true" : "false";
    case Cpp::CPPTYPE_INT32:
      return std::to_string(r->GetInt32(m, f));
    case Cpp::CPPTYPE_INT64:
      return std::to_string(r->GetInt64(m, f));
    case Cpp::CPPTYPE_UINT32:
      return std::to_string(r->GetUInt32(m, f));
    case Cpp::CPPTYPE_UINT64:
      return std::to_string(r->GetUInt64(m, f));
    case Cpp::CPPTYPE_DOUBLE:
      return schema_text::format_value(r->GetDouble(m, f));
    case Cpp::CPPTYPE_FLOAT:
      return schema_text::format_value(r->GetFloat(m, f));
    case Cpp::CPPTYPE_ENUM:
      return r->GetEnum(m, f)->name();
    case Cpp::CPPTYPE_STRING:
      return quote(r->GetString(m, f));
    case Cpp::CPPTYPE_MESSAGE:
      break;
  }
  return "";
}

// A numeric leaf's effective value, wide enough for every int64/uint64 bound comparison we make.
long double numeric_value(const pb::Message& m, const pb::FieldDescriptor* f) {
  const pb::Reflection* r = m.GetReflection();
  switch (f->cpp_type()) {
    case Cpp::CPPTYPE_INT32:
      return r->GetInt32(m, f);
    case Cpp::CPPTYPE_INT64:
      return r->GetInt64(m, f);
    case Cpp::CPPTYPE_UINT32:
      return r->GetUInt32(m, f);
    case Cpp::CPPTYPE_UINT64:
      return r->GetUInt64(m, f);
    case Cpp::CPPTYPE_DOUBLE:
      return r->GetDouble(m, f);
    case Cpp::CPPTYPE_FLOAT:
      return r->GetFloat(m, f);
    default:
      return 0;
  }
}

std::string bound_text(const pb::FieldDescriptor* f, double bound) {
  if (is_integer_type(f)) return std::to_string(static_cast<long long>(bound));
  return schema_text::format_value(bound);
}

// "[0.1, 86400]", "(0, 1)", ">= 1", "any"; plus ", multiple of N".
std::string range_text(const pb::FieldDescriptor* f) {
  const pb::FieldOptions& o = f->options();
  bool has_min = o.HasExtension(opt::zs_min), has_max = o.HasExtension(opt::zs_max);
  bool min_open = o.GetExtension(opt::zs_min_open), max_open = o.GetExtension(opt::zs_max_open);
  std::string out;
  if (has_min && has_max) {
    out = std::string(min_open ? "(" : "[") + bound_text(f, o.GetExtension(opt::zs_min)) + ", " +
          bound_text(f, o.GetExtension(opt::zs_max)) + (max_open ? ")" : "]");
  } else if (has_min) {
    out = std::string(min_open ? "> " : ">= ") + bound_text(f, o.GetExtension(opt::zs_min));
  } else if (has_max) {
    out = std::string(max_open ? "< " : "<= ") + bound_text(f, o.GetExtension(opt::zs_max));
  } else {
    out = "any";
  }
  if (o.HasExtension(opt::zs_multiple_of)) {
    out += ", multiple of " + std::to_string(o.GetExtension(opt::zs_multiple_of));
  }
  return out;
}

std::string allowed_text(const pb::FieldDescriptor* f) {
  if (f->cpp_type() == Cpp::CPPTYPE_ENUM) return schema_text::enum_names(f->enum_type());
  if (f->cpp_type() == Cpp::CPPTYPE_BOOL) return "true, false";
  if (f->cpp_type() == Cpp::CPPTYPE_STRING) {
    return f->options().HasExtension(opt::zs_allowed) ? f->options().GetExtension(opt::zs_allowed)
                                                      : "any";
  }
  return range_text(f);
}

// The problem with a numeric leaf's value, or "" when it is within the schema's range.
std::string range_problem(const pb::Message& m, const pb::FieldDescriptor* f,
                          const std::string& path) {
  const pb::FieldOptions& o = f->options();
  long double v = numeric_value(m, f);
  const std::string shown = path + " = " + leaf_text(m, f);
  if (!std::isfinite(static_cast<double>(v))) return shown + " is not a finite number";
  bool bad = false;
  if (o.HasExtension(opt::zs_min)) {
    long double lo = o.GetExtension(opt::zs_min);
    bad |= o.GetExtension(opt::zs_min_open) ? v <= lo : v < lo;
  }
  if (o.HasExtension(opt::zs_max)) {
    long double hi = o.GetExtension(opt::zs_max);
    bad |= o.GetExtension(opt::zs_max_open) ? v >= hi : v > hi;
  }
  if (!bad && o.HasExtension(opt::zs_multiple_of) && is_integer_type(f)) {
    long long step = o.GetExtension(opt::zs_multiple_of);
    bad = step > 0 && static_cast<long long>(v) % step != 0;
  }
  return bad ? shown + " is out of range; allowed: " + range_text(f) : "";
}

// Calls fn(owner, field, path) for every singular leaf, set or default, depth-first.
void for_each_leaf(const pb::Message& m, const std::string& prefix,
                   const std::function<void(const pb::Message&, const pb::FieldDescriptor*,
                                            const std::string&)>& fn) {
  const pb::Descriptor* d = m.GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    if (f->is_repeated()) continue;  // lists (optimizer.param_groups) are checked where they are used
    std::string path = join_path(prefix, f->name());
    if (f->cpp_type() == Cpp::CPPTYPE_MESSAGE) {
      for_each_leaf(m.GetReflection()->GetMessage(m, f), path, fn);
    } else {
      fn(m, f, path);
    }
  }
}

// ---- files ----

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ZS_REQUIRE(in.good(), ConfigError, "cannot read config file '", path,
             "': ", detail::errno_string(errno), "; expected a readable .textproto or .json file");
  std::ostringstream os;
  os << in.rdbuf();
  ZS_REQUIRE(!in.bad(), ConfigError, "error reading config file '", path, "'");
  return os.str();
}

// Where in the text-format message the tokenizer was: the enclosing section path and the last key
// seen in it. A small scanner (comments, strings, { } < >) is enough for the files we accept.
struct TextPosition {
  std::vector<std::string> sections;
  std::string key;
};

TextPosition scan_text_position(const std::string& text, int line, int column) {
  size_t end = 0;
  for (int l = 0; l < line && end < text.size(); ++end) {
    if (text[end] == '\n') ++l;
  }
  end = std::min(text.size(), end + static_cast<size_t>(std::max(column, 0)));
  TextPosition pos;
  std::string last_ident;
  for (size_t i = 0; i < end; ++i) {
    char c = text[i];
    if (c == '#') {
      while (i < end && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      for (++i; i < end && text[i] != c; ++i) {
        if (text[i] == '\\') ++i;
      }
      last_ident.clear();
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i;
      while (i < text.size() &&
             (std::isalnum(static_cast<unsigned char>(text[i])) || text[i] == '_'))
        ++i;
      last_ident = text.substr(b, i - b);
      --i;
    } else if (c == ':') {
      if (!last_ident.empty()) pos.key = last_ident;
      last_ident.clear();
    } else if (c == '{' || c == '<') {
      pos.sections.push_back(last_ident);
      pos.key.clear();
      last_ident.clear();
    } else if (c == '}' || c == '>') {
      if (!pos.sections.empty()) pos.sections.pop_back();
      pos.key.clear();
      last_ident.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      last_ident.clear();
    }
  }
  return pos;
}

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out = join_path(out, p);
  return out;
}

// The field at a dotted path from the top of Config, or nullptr.
const pb::FieldDescriptor* find_field(const std::string& path) {
  const pb::Descriptor* d = Config::descriptor();
  const pb::FieldDescriptor* f = nullptr;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (d == nullptr || (f = d->FindFieldByName(part)) == nullptr) return nullptr;
    d = f->message_type();
  }
  return f;
}

// Picks TYPE and NAME out of protobuf's `Message type "TYPE" has no field named "NAME".`
bool parse_unknown_field(const std::string& message, std::string* type, std::string* name) {
  const std::string head = "Message type \"", mid = "\" has no field named \"";
  size_t a = message.find(head);
  if (a == std::string::npos) return false;
  a += head.size();
  size_t b = message.find(mid, a);
  if (b == std::string::npos) return false;
  size_t c = message.find('"', b + mid.size());
  if (c == std::string::npos) return false;
  *type = message.substr(a, b - a);
  *name = message.substr(b + mid.size(), c - b - mid.size());
  return true;
}

// Collects the first text-format error as "FILE:LINE:COL: message", with the field path and, for
// unknown keys, the valid keys of that section.
class TextErrorCollector : public pb::io::ErrorCollector {
 public:
  TextErrorCollector(const std::string& text, const std::string& source)
      : text_(text), source_(source) {}

  void AddError(int line, pb::io::ColumnNumber column, const std::string& message) override {
    if (!first_.empty()) return;
    std::string where = detail::concat(source_, ":", line + 1, ":", column + 1, ": ");
    TextPosition pos = scan_text_position(text_, line, column);
    std::string type_name, field_name;
    if (parse_unknown_field(message, &type_name, &field_name)) {
      const pb::Descriptor* d =
          pb::DescriptorPool::generated_pool()->FindMessageTypeByName(type_name);
      if (d != nullptr) {
        first_ = where + schema_text::unknown_key_message(d, join(pos.sections), field_name);
        return;
      }
    }
    if (pos.key.empty()) {
      first_ = where + message;
      return;
    }
    const std::string path = join_path(join(pos.sections), pos.key);
    first_ = where + "in '" + path + "': " + message;
    const pb::FieldDescriptor* f = find_field(path);
    if (f != nullptr && f->cpp_type() == Cpp::CPPTYPE_ENUM) {
      first_ += " Allowed: " + schema_text::enum_names(f->enum_type());
    }
  }

  const std::string& first() const { return first_; }

 private:
  const std::string& text_;
  std::string source_;
  std::string first_;
};

std::string value_kind(const pb::Value& v) {
  switch (v.kind_case()) {
    case pb::Value::kNullValue:
      return "null";
    case pb::Value::kNumberValue:
      return "number " + schema_text::format_value(v.number_value());
    case pb::Value::kStringValue:
      return "string " + quote(v.string_value());
    case pb::Value::kBoolValue:
      return v.bool_value() ? "true" : "false";
    case pb::Value::kStructValue:
      return "an object";
    case pb::Value::kListValue:
      return "a list";
    default:
      return "nothing";
  }
}

// "FILE:LINE:COL" of the quoted key when it occurs exactly once in the text, else "FILE".
std::string json_location(const std::string& text, const std::string& source,
                          const std::string& key) {
  const std::string needle = "\"" + key + "\"";
  size_t at = text.find(needle);
  if (at == std::string::npos || text.find(needle, at + 1) != std::string::npos) return source;
  size_t line_start = text.rfind('\n', at);
  line_start = line_start == std::string::npos ? 0 : line_start + 1;
  int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + at, '\n'));
  return detail::concat(source, ":", line, ":", at - line_start + 1);
}

// Walks the JSON document against the schema before the real parse, so that unknown keys and
// wrong value types are reported with their dotted path and the valid choices.
void check_json_object(const pb::Struct& obj, const pb::Descriptor* d, const std::string& prefix,
                       const std::string& text, const std::string& source) {
  for (const auto& field : obj.fields()) {
    const std::string& key = field.first;  // not structured bindings: the lambda below captures them
    const pb::Value& value = field.second;
    const pb::FieldDescriptor* f = d->FindFieldByName(key);
    for (int i = 0; f == nullptr && i < d->field_count(); ++i) {
      if (d->field(i)->json_name() == key) f = d->field(i);
    }
    if (f == nullptr) {
      ZS_THROW(ConfigError, json_location(text, source, key), ": ",
               schema_text::unknown_key_message(d, prefix, key));
    }
    const std::string path = join_path(prefix, f->name());
    if (value.kind_case() == pb::Value::kNullValue) continue;  // null: leave the default
    auto fail = [&](const std::string& expected) {
      ZS_THROW(ConfigError, json_location(text, source, key), ": ", path, " expects ", expected,
               ", got ", value_kind(value));
    };
    const bool is_number = value.kind_case() == pb::Value::kNumberValue;
    const bool is_string = value.kind_case() == pb::Value::kStringValue;
    switch (f->cpp_type()) {
      case Cpp::CPPTYPE_MESSAGE:
        if (value.kind_case() != pb::Value::kStructValue) fail("an object (a section)");
        check_json_object(value.struct_value(), f->message_type(), path, text, source);
        break;
      case Cpp::CPPTYPE_BOOL:
        if (value.kind_case() != pb::Value::kBoolValue) fail("a bool (true or false)");
        break;
      case Cpp::CPPTYPE_STRING:
        if (!is_string) fail("a string");
        break;
      case Cpp::CPPTYPE_DOUBLE:
      case Cpp::CPPTYPE_FLOAT:
        if (!is_number && !is_string) fail(std::string("a number (") + f->type_name() + ")");
        break;
      case Cpp::CPPTYPE_ENUM: {
        if (!is_string) fail("a string, one of " + schema_text::enum_names(f->enum_type()));
        if (f->enum_type()->FindValueByName(value.string_value()) == nullptr) {
          fail("one of " + schema_text::enum_names(f->enum_type()));
        }
        break;
      }
      default: {  // integers
        if (!is_number && !is_string) fail(std::string("an integer (") + f->type_name() + ")");
        if (is_number && value.number_value() != std::floor(value.number_value())) {
          fail(std::string("an integer (") + f->type_name() + ")");
        }
        break;
      }
    }
  }
}

std::string extension_of(const std::string& path) {
  size_t slash = path.rfind('/');
  size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) return "";
  return path.substr(dot);
}

}  // namespace

Config default_config() { return Config(); }

Config parse_config_textproto(const std::string& text, const std::string& source_name) {
  Config cfg;
  TextErrorCollector errors(text, source_name);
  pb::TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &cfg)) {
    ZS_THROW(ConfigError,
             errors.first().empty() ? source_name + ": cannot parse text format" : errors.first());
  }
  return cfg;
}

Config parse_config_json(const std::string& text, const std::string& source_name) {
  pb::Struct document;
  pb::util::Status st = pb::util::JsonStringToMessage(text, &document);
  ZS_REQUIRE(st.ok(), ConfigError, source_name, ": cannot parse JSON: ", st.message());
  check_json_object(document, Config::descriptor(), "", text, source_name);
  Config cfg;
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  st = pb::util::JsonStringToMessage(text, &cfg, options);
  ZS_REQUIRE(st.ok(), ConfigError, source_name, ": ", st.message());
  return cfg;
}

Config load_config_file(const std::string& path) {
  const std::string ext = extension_of(path);
  const bool is_text =
      ext == ".textproto" || ext == ".txtpb" || ext == ".pbtxt" || ext == ".prototxt";
  const bool is_json = ext == ".json";
  ZS_REQUIRE(is_text || is_json, ConfigError, "config file '", path, "' has extension '", ext,
             "'; expected .textproto, .txtpb, .pbtxt, .prototxt (protobuf text format) or .json");
  const std::string text = read_file(path);
  return is_text ? parse_config_textproto(text, path) : parse_config_json(text, path);
}

std::vector<ConfigProblem> check_config(const Config& cfg) {
  std::vector<ConfigProblem> problems;
  for_each_leaf(cfg, "",
                [&](const pb::Message& m, const pb::FieldDescriptor* f, const std::string& path) {
                  if (!is_numeric(f)) return;
                  std::string problem = range_problem(m, f, path);
                  if (!problem.empty()) problems.push_back({{path}, problem});
                });
  config_rules::check_cross_field(cfg, &problems);
  return problems;
}

void validate_config(const Config& cfg) {
  auto problems = check_config(cfg);
  if (problems.empty()) return;
  ZS_THROW(ConfigError,
           schema_text::format_problems(problems, [](const ConfigProblem&) { return ""; }));
}

std::string to_textproto(const Config& cfg) {
  std::string out;
  std::function<void(const pb::Message&, int)> print = [&](const pb::Message& m, int depth) {
    const pb::Descriptor* d = m.GetDescriptor();
    const std::string indent(2 * depth, ' ');
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      if (f->is_repeated()) continue;
      if (f->cpp_type() == Cpp::CPPTYPE_MESSAGE) {
        out += indent + f->name() + " {\n";
        print(m.GetReflection()->GetMessage(m, f), depth + 1);
        out += indent + "}\n";
      } else {
        out += indent + f->name() + ": " + leaf_text(m, f) + "\n";
      }
    }
  };
  print(cfg, 0);
  return out;
}

std::vector<ConfigFieldInfo> list_config_fields() {
  std::vector<ConfigFieldInfo> fields;
  const Config defaults;
  for_each_leaf(defaults, "",
                [&](const pb::Message& m, const pb::FieldDescriptor* f, const std::string& path) {
                  fields.push_back({path, f->type_name(), leaf_text(m, f), allowed_text(f)});
                });
  return fields;
}

}  // namespace zeroshard
