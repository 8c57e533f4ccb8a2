// SPDX-License-Identifier: Apache-2.0
// `--set key=value` overrides (by protobuf reflection: a new schema field is settable with no code
// change here), command-line splitting, and build_config's precedence chain.

#include <algorithm>
#include <cctype>
#include <functional>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "zeroshard/config/config.h"
#include "schema_text.h"
#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard {
namespace {

namespace pb = ::google::protobuf;
using schema_text::collect_leaf_paths;
using schema_text::join_path;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (true) {
    size_t next = s.find(sep, pos);
    parts.push_back(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (next == std::string::npos) return parts;
    pos = next + 1;
  }
}

bool parse_bool(const std::string& text, bool* out) {
  std::string t = lower(text);
  if (t == "true" || t == "1") {
    *out = true;
  } else if (t == "false" || t == "0") {
    *out = false;
  } else {
    return false;
  }
  return true;
}

// Decimal integer within [lo, hi]; `error` says why not.
bool parse_signed(const std::string& text, int64_t lo, int64_t hi, int64_t* out,
                  std::string* error) {
  if (text.empty()) {
    *error = "empty value";
    return false;
  }
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') {
    *error = "not an integer";
    return false;
  }
  if (errno == ERANGE || v < lo || v > hi) {
    *error = detail::concat("out of the type's range [", lo, ", ", hi, "]");
    return false;
  }
  *out = v;
  return true;
}

bool parse_unsigned(const std::string& text, uint64_t hi, uint64_t* out, std::string* error) {
  if (text.empty() || text[0] == '-') {
    *error = text.empty() ? "empty value" : "negative value for an unsigned field";
    return false;
  }
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0') {
    *error = "not an integer";
    return false;
  }
  if (errno == ERANGE || v > hi) {
    *error = detail::concat("out of the type's range [0, ", hi, "]");
    return false;
  }
  *out = v;
  return true;
}

bool parse_double(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || *end != '\0' || errno == ERANGE) return false;
  *out = v;
  return true;
}

// Reports a value that does not parse (throws): what the key expects, and why when known.
using Fail = std::function<void(const std::string& expected, const std::string& why)>;

// The integer leaf `field` (int32, int64, uint32 or uint64) of `msg` from `text`, range-checked.
void set_integer(pb::Message* msg, const pb::FieldDescriptor* field, const std::string& text, const Fail& fail) {
  const pb::Reflection* r = msg->GetReflection();
  std::string why;
  int64_t s = 0;
  uint64_t u = 0;
  using F = pb::FieldDescriptor;
  switch (field->cpp_type()) {
    case F::CPPTYPE_INT32:
      if (!parse_signed(text, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(), &s, &why)) {
        fail("an int32", why);
      }
      r->SetInt32(msg, field, static_cast<int32_t>(s));
      return;
    case F::CPPTYPE_INT64:
      if (!parse_signed(text, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &s, &why)) {
        fail("an int64", why);
      }
      r->SetInt64(msg, field, s);
      return;
    case F::CPPTYPE_UINT32:
      if (!parse_unsigned(text, std::numeric_limits<uint32_t>::max(), &u, &why)) fail("a uint32", why);
      r->SetUInt32(msg, field, static_cast<uint32_t>(u));
      return;
    case F::CPPTYPE_UINT64:
      if (!parse_unsigned(text, std::numeric_limits<uint64_t>::max(), &u, &why)) fail("a uint64", why);
      r->SetUInt64(msg, field, u);
      return;
    default:
      ZS_CHECK(false, "set_integer on the non-integer key ", field->full_name());
  }
}

// The enum leaf `field` of `msg` from `text`, by value name, case-insensitive.
void set_enum(pb::Message* msg, const pb::FieldDescriptor* field, const std::string& text, const Fail& fail) {
  const pb::EnumDescriptor* e = field->enum_type();
  for (int i = 0; i < e->value_count(); ++i) {
    if (lower(e->value(i)->name()) == lower(text)) {
      msg->GetReflection()->SetEnum(msg, field, e->value(i));
      return;
    }
  }
  fail("one of " + schema_text::enum_names(e), "");
}

// Sets the leaf `field` of `msg` from `text`; throws ConfigError naming `where` and `path`.
void set_leaf(pb::Message* msg, const pb::FieldDescriptor* field, const std::string& raw,
              const std::string& path, const std::string& where) {
  const pb::Reflection* r = msg->GetReflection();
  const std::string text =
      field->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING ? raw : trim(raw);
  const Fail fail = [&](const std::string& expected, const std::string& why) {
    ZS_THROW(ConfigError, where, ": ", path, " expects ", expected, ", got '", text, "'",
             why.empty() ? "" : " (" + why + ")");
  };
  switch (field->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL: {
      bool v = false;
      if (!parse_bool(text, &v)) fail("a bool (true, false, 1, 0)", "");
      r->SetBool(msg, field, v);
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_INT32:
    case pb::FieldDescriptor::CPPTYPE_INT64:
    case pb::FieldDescriptor::CPPTYPE_UINT32:
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      set_integer(msg, field, text, fail);
      return;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
    case pb::FieldDescriptor::CPPTYPE_FLOAT: {
      double v = 0;
      if (!parse_double(text, &v)) fail(std::string("a number (") + field->type_name() + ")", "");
      if (field->cpp_type() == pb::FieldDescriptor::CPPTYPE_DOUBLE) {
        r->SetDouble(msg, field, v);
      } else {
        r->SetFloat(msg, field, static_cast<float>(v));
      }
      return;
    }
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      set_enum(msg, field, text, fail);
      return;
    case pb::FieldDescriptor::CPPTYPE_STRING:
      r->SetString(msg, field, text);
      return;
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      break;
  }
  ZS_THROW(ConfigError, where, ": '", path, "' is a section, not a key; set one of its keys");
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

// Whether `path` was written in `root`: every section on the way and the leaf itself are set.
bool path_is_set(const pb::Message& root, const std::string& path) {
  const pb::Message* m = &root;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    const pb::FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(part);
    if (f == nullptr) return false;
    if (f->is_repeated()) return m->GetReflection()->FieldSize(*m, f) > 0;  // a list: one key
    if (!m->GetReflection()->HasField(*m, f)) return false;
    if (f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      m = &m->GetReflection()->GetMessage(*m, f);
    }
  }
  return true;
}

// The dotted paths of every key set in `m` (a repeated field counts as one key), depth-first.
void collect_set_paths(const pb::Message& m, const std::string& prefix, std::vector<std::string>* out) {
  std::vector<const pb::FieldDescriptor*> fields;
  m.GetReflection()->ListFields(m, &fields);
  for (const pb::FieldDescriptor* f : fields) {
    const std::string path = join_path(prefix, f->name());
    if (!f->is_repeated() && f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      collect_set_paths(m.GetReflection()->GetMessage(m, f), path, out);
    } else {
      out->push_back(path);
    }
  }
}

// Every key of the schema in schema order: the leaves, and each list as one key.
std::vector<std::string> config_key_paths() {
  std::vector<std::string> paths;
  std::function<void(const pb::Descriptor*, const std::string&)> walk = [&](const pb::Descriptor* d,
                                                                            const std::string& prefix) {
    for (int i = 0; i < d->field_count(); ++i) {
      const pb::FieldDescriptor* f = d->field(i);
      const std::string path = join_path(prefix, f->name());
      if (!f->is_repeated() && f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
        walk(f->message_type(), path);
      } else {
        paths.push_back(path);
      }
    }
  };
  walk(Config::descriptor(), "");
  return paths;
}

}  // namespace

void apply_override(Config& cfg, const std::string& assignment) {
  const std::string where = "--set " + assignment;
  size_t eq = assignment.find('=');
  ZS_REQUIRE(eq != std::string::npos, ConfigError, where,
             ": expected key=value, e.g. --set comm.timeout_s=30");
  const std::string key = trim(assignment.substr(0, eq));
  const std::string value = assignment.substr(eq + 1);
  ZS_REQUIRE(!key.empty(), ConfigError, where, ": empty key; expected key=value");

  pb::Message* msg = &cfg;
  std::string prefix;
  const std::vector<std::string> parts = split(key, '.');
  for (size_t i = 0; i < parts.size(); ++i) {
    const pb::Descriptor* desc = msg->GetDescriptor();
    const std::string name = trim(parts[i]);
    const pb::FieldDescriptor* field = desc->FindFieldByName(name);
    if (field == nullptr) {
      ZS_THROW(ConfigError, where, ": ", schema_text::unknown_key_message(desc, prefix, name));
    }
    const std::string path = join_path(prefix, name);
    ZS_REQUIRE(!field->is_repeated(), ConfigError, where, ": '", path,
               "' is a list and cannot be set with --set; use a config file");
    const bool is_message = field->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE;
    if (i + 1 == parts.size()) {
      if (is_message) {
        std::vector<std::string> keys;
        collect_leaf_paths(field->message_type(), path, &keys);
        std::string list;
        for (size_t k = 0; k < keys.size(); ++k) list += (k ? ", " : "") + keys[k];
        ZS_THROW(ConfigError, where, ": '", path,
                 "' is a section, not a key; set one of its keys: ", list);
      }
      set_leaf(msg, field, value, path, where);
      return;
    }
    ZS_REQUIRE(is_message, ConfigError, where, ": '", path, "' is a ", field->type_name(),
               " key, not a section, so '", key, "' does not exist");
    msg = msg->GetReflection()->MutableMessage(msg, field);
    prefix = path;
  }
}

CommandLine parse_command_line(int argc, const char* const* argv) {
  CommandLine cl;
  bool config_seen = false;
  // `flag` is "--config" or "--set"; returns its value from "--flag=value" or the next argument.
  auto take_value = [&](int* i, const std::string& arg, const std::string& flag) {
    std::string value;
    if (arg.size() > flag.size()) {
      value = arg.substr(flag.size() + 1);
    } else {
      ZS_REQUIRE(*i + 1 < argc && argv[*i + 1] != nullptr && !starts_with(argv[*i + 1], "--"),
                 UsageError, flag,
                 " needs a value: ", flag == "--set" ? "--set key=value" : flag + " FILE");
      value = argv[++*i];
    }
    ZS_REQUIRE(!value.empty(), UsageError, flag, " needs a non-empty value");
    return value;
  };
  int i = 0;
  for (; i < argc; ++i) {
    const std::string arg = argv[i] ? argv[i] : "";
    if (i == 0) {
      cl.rest.push_back(arg);
    } else if (arg == "--") {
      break;
    } else if (arg == "--config" || starts_with(arg, "--config=")) {
      std::string path = take_value(&i, arg, "--config");
      ZS_REQUIRE(!config_seen, UsageError, "--config given twice ('", cl.config_path, "' and '",
                 path, "'); merge the files or use --set for single keys");
      config_seen = true;
      cl.config_path = path;
    } else if (arg == "--deepspeed" || starts_with(arg, "--deepspeed=")) {
      std::string path = take_value(&i, arg, "--deepspeed");
      ZS_REQUIRE(cl.deepspeed_path.empty(), UsageError, "--deepspeed given twice ('", cl.deepspeed_path, "' and '",
                 path, "')");
      cl.deepspeed_path = path;
    } else if (arg == "--set" || starts_with(arg, "--set=")) {
      std::string assignment = take_value(&i, arg, "--set");
      ZS_REQUIRE(assignment.find('=') != std::string::npos, UsageError, "--set ", assignment,
                 ": expected key=value, e.g. --set comm.timeout_s=30");
      cl.overrides.push_back(assignment);
    } else {
      cl.rest.push_back(arg);
    }
  }
  for (; i < argc; ++i) cl.rest.push_back(argv[i] ? argv[i] : "");
  return cl;
}

std::string ConfigOrigin::of(const std::string& path) const {
  std::string from;
  for (const std::string& a : overrides) {
    if (trim(a.substr(0, a.find('='))) == path) from = "--set " + a;
  }
  for (auto it = from_deepspeed.rbegin(); from.empty() && it != from_deepspeed.rend(); ++it) {
    if (trim(it->assignment.substr(0, it->assignment.find('='))) == path) {
      from = "DeepSpeed config " + deepspeed_file + " (" + it->deepspeed_key + ")";
    }
  }
  if (from.empty() && path_is_set(from_file, path)) from = "config file " + file;
  return from.empty() ? "default" : from;
}

std::vector<std::string> ConfigOrigin::set_keys() const {
  std::vector<std::string> keys;
  collect_set_paths(from_file, "", &keys);
  for (const std::string& a : overrides) keys.push_back(trim(a.substr(0, a.find('='))));
  for (const DeepSpeedSetting& s : from_deepspeed) keys.push_back(trim(s.assignment.substr(0, s.assignment.find('='))));
  std::vector<std::string> ordered;
  for (const std::string& path : config_key_paths()) {
    if (std::find(keys.begin(), keys.end(), path) != keys.end()) ordered.push_back(path);
  }
  return ordered;
}

Config build_config(const CommandLine& cl, ConfigOrigin* origin_out) {
  ConfigOrigin origin;
  origin.file = cl.config_path;
  if (origin.file.empty()) {
    const char* env = std::getenv("ZS_CONFIG");
    if (env != nullptr && *env != '\0') origin.file = env;
  }
  if (!origin.file.empty()) origin.from_file = load_config_file(origin.file);
  origin.overrides = cl.overrides;
  Config cfg = origin.from_file;
  if (!cl.deepspeed_path.empty()) {
    origin.deepspeed_file = cl.deepspeed_path;
    origin.from_deepspeed = load_deepspeed_config(cl.deepspeed_path);
    for (const DeepSpeedSetting& s : origin.from_deepspeed) apply_override(cfg, s.assignment);
  }
  for (const std::string& assignment : cl.overrides) apply_override(cfg, assignment);

  auto problems = check_config(cfg);
  if (problems.empty()) {
    if (origin_out != nullptr) *origin_out = std::move(origin);
    return cfg;
  }
  // Say where each value involved came from: the last --set of that key, else the file.
  auto where = [&](const ConfigProblem& p) {
    std::string out;
    for (const std::string& path : p.paths) out += (out.empty() ? " (" : "; ") + path + " from " + origin.of(path);
    return out.empty() ? out : out + ")";
  };
  ZS_THROW(ConfigError, schema_text::format_problems(problems, where));
}

std::vector<std::string> config_field_paths() {
  std::vector<std::string> paths;
  collect_leaf_paths(Config::descriptor(), "", &paths);
  return paths;
}

}  // namespace zeroshard
