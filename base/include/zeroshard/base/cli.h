// SPDX-License-Identifier: Apache-2.0
#pragma once
// The command lines of zeroshard's programs, on CLI11 (Debian's libcli11-dev, header-only). Every
// program gets the same shape: --help and -h, --version, `--flag value` and `--flag=value` alike,
// the last of a repeated option wins, numbers read in full (`12abc` is not 12) and range-checked,
// and each mistake one UsageError that names the flag and the text given and ends with the
// program's usage line:
//
//   zeroshard::cli::App app("zeroshard-selftest", "Checks every collective on every dtype.");
//   int64_t elements = 100003;
//   app.add_int("--elements", &elements, "elements per collective", 1);
//   if (!app.parse(session.args(), session.rank() == 0)) return 0;  // --help or --version
//
//   -> usage error: --elements 'abc' is not an integer (usage: zeroshard-selftest [OPTIONS];
//      zeroshard-selftest --help lists them)
//
// Values are converted after CLI11 has read the whole line, in the order the options were added,
// so --help wins over a bad value, and an option added earlier (e.g. a preset) is applied before
// the ones after it whatever their order on the line. An unknown option names the nearest known
// one ("did you mean '--elements'?").
//
// `--config FILE` and `--set KEY=VALUE` belong to the config layer: its run_main (or
// zeroshard::parse_command_line, zeroshard/config/config.h) takes them out of argv first and the
// rest comes here; add_config_options lists them in --help. Not thread-safe.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace zeroshard::cli {

class App {
 public:
  // `program` as users type it; `description` is the first paragraph of --help.
  App(std::string program, std::string description);
  App(const App&) = delete;
  App& operator=(const App&) = delete;

  // The synopsis shown by --help and after every usage error, without "usage: "; default
  // "PROGRAM [OPTIONS]" (e.g. "mpirun -n N train_gpt [OPTIONS]").
  App& usage(std::string synopsis);
  // Text after the options in --help.
  App& footer(std::string text);
  // Options end at the first argument that is not one (or at `--`, which is dropped): that
  // argument and all after it are the command to run (rest()), as for zeroshard-launch.
  App& prefix_command();

  // Typed options. `names` is CLI11's list, e.g. "-n,--np"; errors use the first name.
  CLI::Option* add_int(const std::string& names, int64_t* target, const std::string& help,
                       int64_t min = std::numeric_limits<int64_t>::min(),
                       int64_t max = std::numeric_limits<int64_t>::max());
  CLI::Option* add_int(const std::string& names, int* target, const std::string& help,
                       int min = std::numeric_limits<int>::min(), int max = std::numeric_limits<int>::max());
  CLI::Option* add_number(const std::string& names, double* target, const std::string& help,
                          double min = -std::numeric_limits<double>::infinity(),
                          double max = std::numeric_limits<double>::infinity());
  // Bytes: 4096, 64K, 1M, 1G (powers of 1024).
  CLI::Option* add_size(const std::string& names, int64_t* target, const std::string& help);
  CLI::Option* add_choice(const std::string& names, std::string* target, const std::vector<std::string>& choices,
                          const std::string& help);
  CLI::Option* add_text(const std::string& names, std::string* target, const std::string& help,
                        const std::string& value_name = "TEXT");
  // Repeatable: every occurrence appends one value.
  CLI::Option* add_list(const std::string& names, std::vector<std::string>* target, const std::string& help,
                        const std::string& value_name = "TEXT");
  // No value; `--flag=x` is an error.
  CLI::Option* add_flag(const std::string& names, bool* target, const std::string& help);
  // One value handed to `apply` (which throws UsageError, e.g. via fail(), when it is bad).
  CLI::Option* add_custom(const std::string& names, const std::string& value_name, const std::string& help,
                          std::function<void(const std::string&)> apply);
  // A flag that may carry a value as `--name=VALUE` only (the next argument is never taken):
  // `apply` gets nullptr for the bare flag.
  CLI::Option* add_optional(const std::string& names, const std::string& value_name, const std::string& help,
                            std::function<void(const std::string*)> apply);
  // --config FILE and --set KEY=VALUE in --help (the config layer consumes them; see above).
  void add_config_options();
  // A check or conversion across options, run after the values are converted, in the order
  // added; its UsageError gets the usage line like the others.
  void then(std::function<void()> step);

  // Parses `args` (argv[0] first, as Session::args() gives them). Returns true to run the
  // program; false after --help or --version, whose text went to stdout when `print` (pass
  // `rank == 0` in a job, so one rank prints). Throws UsageError for anything else.
  // A UsageError it throws names the caller's line (the program's parse call), not this file's.
  bool parse(const std::vector<std::string>& args, bool print = true, const char* caller_file = __builtin_FILE(),
             int caller_line = __builtin_LINE());
  bool parse(int argc, const char* const* argv, bool print = true, const char* caller_file = __builtin_FILE(),
             int caller_line = __builtin_LINE());

  // With prefix_command(): the command after the options (empty when none was given).
  const std::vector<std::string>& rest() const { return rest_; }
  // Whether the option named `name` (any of its names) was given.
  bool given(const std::string& name) const;

  std::string help() const;
  const std::string& program() const { return program_; }
  // Throws UsageError: `message`, then the usage line and where the options are listed (once).
  [[noreturn]] void fail(const std::string& message) const;

  // CLI11 itself, for what the helpers above do not cover.
  CLI::App& cli() { return *app_; }

 private:
  CLI::Option* add_value(const std::string& names, const std::string& value_name, const std::string& help,
                         std::function<void(const std::string& name, const std::string& text)> convert);
  [[noreturn]] void fail_parse(const CLI::ParseError& e) const;
  std::string nearest_option(const std::string& typed) const;
  std::string hint() const;  // " (usage: ...; PROGRAM --help lists the options)"

  std::string program_;
  const char* caller_file_ = nullptr;  // where parse() was called from, for fail()'s location
  int caller_line_ = 0;
  std::string synopsis_;
  std::unique_ptr<CLI::App> app_;
  bool prefix_ = false;
  // Per value option: its CLI11 option, the raw text, and the conversion into its target.
  struct Pending {
    CLI::Option* option;
    std::string name;
    std::shared_ptr<std::string> text;
    std::function<void(const std::string& name, const std::string& text)> convert;
  };
  std::vector<Pending> pending_;
  std::vector<std::string> rest_;
  std::string config_file_unused_;
  std::string deepspeed_file_unused_;
  std::vector<std::string> config_unused_;
};

// Whole-text conversions with the flag's name in the error (UsageError, without the usage line),
// for values read outside an App: "--elements 'abc' is not an integer",
// "--elements must be at least 1, got 0".
int64_t parse_int(const std::string& flag, const std::string& text,
                  int64_t min = std::numeric_limits<int64_t>::min(),
                  int64_t max = std::numeric_limits<int64_t>::max());
double parse_number(const std::string& flag, const std::string& text,
                    double min = -std::numeric_limits<double>::infinity(),
                    double max = std::numeric_limits<double>::infinity());
int64_t parse_size(const std::string& flag, const std::string& text);

// "PROGRAM (zeroshard X.Y.Z)", what --version prints.
std::string version_line(const std::string& program);

}  // namespace zeroshard::cli
