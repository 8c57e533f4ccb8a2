// SPDX-License-Identifier: Apache-2.0
#include "zeroshard/base/cli.h"

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "zeroshard/base/error.h"
#include "zeroshard/base/format.h"

namespace zeroshard::cli {
namespace {

// CLI11's formatter with our synopsis in place of its "Usage: NAME [OPTIONS]" line.
class Formatter : public CLI::Formatter {
 public:
  std::string synopsis;
  std::string make_usage(const CLI::App* app, std::string name) const override {
    return synopsis.empty() ? CLI::Formatter::make_usage(app, std::move(name)) : "Usage: " + synopsis + "\n";
  }
};

// The first of CLI11's comma-separated names: the one errors show.
std::string first_name(const std::string& names) { return names.substr(0, names.find(',')); }

std::string range_text(const std::string& lo, const std::string& hi, bool has_lo, bool has_hi) {
  if (has_lo && has_hi) return "between " + lo + " and " + hi;
  return has_lo ? "at least " + lo : "at most " + hi;
}

}  // namespace

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  int64_t v = 0;
  const char* begin = text.data() + (!text.empty() && text[0] == '+' ? 1 : 0);
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, v);
  ZS_REQUIRE(!text.empty() && ptr == end && ec != std::errc::invalid_argument, UsageError, flag, " '", text,
             "' is not an integer");
  ZS_REQUIRE(ec != std::errc::result_out_of_range, UsageError, flag, " '", text, "' is out of range");
  const bool has_lo = min != std::numeric_limits<int64_t>::min(), has_hi = max != std::numeric_limits<int64_t>::max();
  ZS_REQUIRE(v >= min && v <= max, UsageError, flag, " must be ",
             range_text(std::to_string(min), std::to_string(max), has_lo, has_hi), ", got ", v);
  return v;
}

double parse_number(const std::string& flag, const std::string& text, double min, double max) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  ZS_REQUIRE(!text.empty() && !std::isspace(static_cast<unsigned char>(text[0])) && end == text.c_str() + text.size() &&
                 std::isfinite(v),
             UsageError, flag, " '", text, "' is not a number");
  ZS_REQUIRE(v >= min && v <= max, UsageError, flag, " must be ",
             range_text(format_double(min), format_double(max), std::isfinite(min), std::isfinite(max)), ", got ",
             format_double(v));
  return v;
}

int64_t parse_size(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const double v = text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])) ? -1 : std::strtod(text.c_str(), &end);
  const std::string suffix = end == nullptr ? "" : end;
  double unit = 0;
  if (suffix.empty()) unit = 1;
  if (suffix == "K" || suffix == "k") unit = 1024.0;
  if (suffix == "M" || suffix == "m") unit = 1024.0 * 1024;
  if (suffix == "G" || suffix == "g") unit = 1024.0 * 1024 * 1024;
  if (suffix == "T" || suffix == "t") unit = 1024.0 * 1024 * 1024 * 1024;
  const double bytes = v * unit;
  ZS_REQUIRE(v > 0 && unit > 0 && bytes < 9.0e18 && std::nearbyint(bytes) == bytes, UsageError, flag, " '", text,
             "' is not a size in bytes (e.g. 4096, 64K, 1M, 1G)");
  return static_cast<int64_t>(bytes);
}

std::string version_line(const std::string& program) { return program + " (zeroshard " + ZS_VERSION + ")"; }

App::App(std::string program, std::string description)
    : program_(std::move(program)), app_(std::make_unique<CLI::App>(std::move(description), program_)) {
  auto formatter = std::make_shared<Formatter>();
  formatter->column_width(32);
  app_->formatter(formatter);
  app_->set_help_flag("-h,--help", "print this help and exit");
  app_->set_version_flag("--version", version_line(program_), "print the version and exit");
}

App& App::usage(std::string synopsis) {
  synopsis_ = std::move(synopsis);
  std::static_pointer_cast<Formatter>(app_->get_formatter())->synopsis = synopsis_;
  return *this;
}

App& App::footer(std::string text) {
  app_->footer(std::move(text));
  return *this;
}

App& App::prefix_command() {
  prefix_ = true;
  app_->prefix_command();
  return *this;
}

CLI::Option* App::add_value(const std::string& names, const std::string& value_name, const std::string& help,
                            std::function<void(const std::string&, const std::string&)> convert) {
  auto text = std::make_shared<std::string>();
  CLI::Option* o = app_->add_option(names, *text, help)->type_name(value_name);
  o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  pending_.push_back({o, first_name(names), text, std::move(convert)});
  return o;
}

CLI::Option* App::add_int(const std::string& names, int64_t* target, const std::string& help, int64_t min,
                          int64_t max) {
  return add_value(names, "N", help, [=](const std::string& name, const std::string& text) {
    *target = parse_int(name, text, min, max);
  });
}

CLI::Option* App::add_int(const std::string& names, int* target, const std::string& help, int min, int max) {
  const int64_t lo = min == std::numeric_limits<int>::min() ? std::numeric_limits<int64_t>::min() : min;
  const int64_t hi = max == std::numeric_limits<int>::max() ? std::numeric_limits<int64_t>::max() : max;
  return add_value(names, "N", help, [=](const std::string& name, const std::string& text) {
    const int64_t v = parse_int(name, text, lo, hi);
    ZS_REQUIRE(v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max(), UsageError, name, " '",
               text, "' is out of range");
    *target = static_cast<int>(v);
  });
}

CLI::Option* App::add_number(const std::string& names, double* target, const std::string& help, double min,
                             double max) {
  return add_value(names, "X", help, [=](const std::string& name, const std::string& text) {
    *target = parse_number(name, text, min, max);
  });
}

CLI::Option* App::add_size(const std::string& names, int64_t* target, const std::string& help) {
  return add_value(names, "BYTES", help, [=](const std::string& name, const std::string& text) {
    *target = parse_size(name, text);
  });
}

CLI::Option* App::add_choice(const std::string& names, std::string* target, const std::vector<std::string>& choices,
                             const std::string& help) {
  std::string list;
  for (const std::string& c : choices) list += (list.empty() ? "" : "|") + c;
  return add_value(names, list, help, [=](const std::string& name, const std::string& text) {
    for (const std::string& c : choices) {
      if (c == text) {
        *target = text;
        return;
      }
    }
    std::string allowed;
    for (const std::string& c : choices) allowed += (allowed.empty() ? "" : ", ") + c;
    ZS_THROW(UsageError, name, " '", text, "' is not one of ", allowed);
  });
}

CLI::Option* App::add_text(const std::string& names, std::string* target, const std::string& help,
                           const std::string& value_name) {
  return add_value(names, value_name, help, [=](const std::string&, const std::string& text) { *target = text; });
}

CLI::Option* App::add_list(const std::string& names, std::vector<std::string>* target, const std::string& help,
                           const std::string& value_name) {
  return app_->add_option(names, *target, help)->type_name(value_name)->allow_extra_args(false);
}

CLI::Option* App::add_flag(const std::string& names, bool* target, const std::string& help) {
  auto text = std::make_shared<std::string>();
  CLI::Option* o = app_->add_flag(names, *text, help);
  o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // CLI11 stores "true" for a bare flag and the text after '=' otherwise.
  pending_.push_back({o, first_name(names), text, [=](const std::string& name, const std::string& value) {
                        ZS_REQUIRE(value == "true", UsageError, name, " takes no value (got '", name, "=", value, "')");
                        *target = true;
                      }});
  return o;
}

CLI::Option* App::add_custom(const std::string& names, const std::string& value_name, const std::string& help,
                             std::function<void(const std::string&)> apply) {
  return add_value(names, value_name, help,
                   [apply = std::move(apply)](const std::string&, const std::string& text) { apply(text); });
}

CLI::Option* App::add_optional(const std::string& names, const std::string& value_name, const std::string& help,
                               std::function<void(const std::string*)> apply) {
  auto text = std::make_shared<std::string>();
  CLI::Option* o = app_->add_flag(names, *text, help)->type_name(value_name);
  o->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  pending_.push_back({o, first_name(names), text, [apply = std::move(apply)](const std::string&, const std::string& v) {
                        apply(v == "true" ? nullptr : &v);
                      }});
  return o;
}

void App::then(std::function<void()> step) {
  pending_.push_back({nullptr, "", nullptr, [step = std::move(step)](const std::string&, const std::string&) { step(); }});
}

void App::add_config_options() {
  const std::string group = "Config (docs/config.md; later --set wins)";
  app_->add_option("--config", config_file_unused_, "a config file: .textproto or .json (else $ZS_CONFIG)")
      ->type_name("FILE")
      ->group(group);
  app_->add_option("--deepspeed", deepspeed_file_unused_,
                   "a DeepSpeed ds_config.json, read as config keys (docs/deepspeed.md)")
      ->type_name("FILE")
      ->group(group);
  app_->add_option("--set", config_unused_, "one config key, e.g. --set train.steps=100 (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->group(group);
}

bool App::given(const std::string& name) const {
  const CLI::Option* o = app_->get_option_no_throw(name);
  return o != nullptr && o->count() > 0;
}

std::string App::help() const { return app_->help(); }

std::string App::hint() const {
  return " (usage: " + (synopsis_.empty() ? program_ + " [OPTIONS]" : synopsis_) + "; " + program_ +
         " --help lists the options)";
}

void App::fail(const std::string& message) const {
  const std::string h = hint();
  const bool has_hint = message.size() >= h.size() && message.compare(message.size() - h.size(), h.size(), h) == 0;
  if (caller_file_ != nullptr) throw UsageError(message + (has_hint ? "" : h), caller_file_, caller_line_);
  ZS_THROW(UsageError, message, has_hint ? "" : h);
}

std::string App::nearest_option(const std::string& typed) const {
  std::string best;
  size_t best_d = std::string::npos;
  for (const CLI::Option* o : app_->get_options()) {
    std::vector<std::string> names;
    for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : o->get_snames()) names.push_back("-" + s);
    for (const std::string& n : names) {
      const size_t d = edit_distance(typed, n);
      if (d < best_d) best_d = d, best = n;
    }
  }
  return !best.empty() && is_close_spelling(typed, best, best_d) ? best : std::string();
}

void App::fail_parse(const CLI::ParseError& e) const {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && !app_->remaining().empty()) {
    const std::string first = app_->remaining().front();
    if (first.size() > 1 && first[0] == '-') {
      const std::string name = first.substr(0, first.find('='));
      const std::string near = nearest_option(name);
      fail("unknown option '" + name + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?"));
    }
    fail("unexpected argument '" + first + "'");
  }
  // CLI11: "--elements: 1 required N missing".
  const size_t colon = what.find(": ");
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr && colon != std::string::npos &&
      what.size() > 8 && what.compare(what.size() - 8, 8, " missing") == 0) {
    std::string name = what.substr(0, colon);
    for (const Pending& p : pending_) {
      if (p.option != nullptr && p.option->check_name(name)) name = p.name;  // the name errors use
    }
    fail(name + " needs a value");
  }
  fail(what);
}

bool App::parse(const std::vector<std::string>& args, bool print, const char* caller_file, int caller_line) {
  std::vector<const char*> argv;
  argv.push_back(args.empty() ? program_.c_str() : args[0].c_str());
  for (size_t i = 1; i < args.size(); ++i) argv.push_back(args[i].c_str());
  return parse(static_cast<int>(argv.size()), argv.data(), print, caller_file, caller_line);
}

bool App::parse(int argc, const char* const* argv, bool print, const char* caller_file, int caller_line) {
  caller_file_ = caller_file;
  caller_line_ = caller_line;
  try {
    app_->parse(argc, argv);
  } catch (const UsageError& e) {
    // From a value's conversion or a check across options: located at the caller, like fail()'s.
    throw UsageError(e.message(), caller_file_, caller_line_);
  } catch (const CLI::CallForHelp&) {
    if (print) std::fputs(help().c_str(), stdout);
    return false;
  } catch (const CLI::CallForVersion& e) {
    if (print) std::printf("%s\n", e.what());
    return false;
  } catch (const CLI::ParseError& e) {
    fail_parse(e);
  }
  if (prefix_) {
    rest_ = app_->remaining();
    if (!rest_.empty() && rest_[0].size() > 1 && rest_[0][0] == '-' && rest_[0] != "--") {
      const std::string name = rest_[0].substr(0, rest_[0].find('='));
      const std::string near = nearest_option(name);
      fail("unknown option '" + name + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?"));
    }
    if (!rest_.empty() && rest_[0] == "--") rest_.erase(rest_.begin());
  }
  for (const Pending& p : pending_) {
    if (p.option != nullptr && p.option->count() == 0) continue;
    try {
      p.convert(p.name, p.text ? *p.text : std::string());
    } catch (const UsageError& e) {
      fail(e.message());
    }
  }
  return true;
}

}  // namespace zeroshard::cli
