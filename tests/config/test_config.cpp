// SPDX-License-Identifier: Apache-2.0
// Config: defaults, files, --set overrides, validation, command line, and the docs-vs-schema check.

#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/error_text.h"
#include "zeroshard/config/config.h"
#include "zeroshard/base/error.h"

namespace zeroshard {
namespace {

using ::google::protobuf::util::MessageDifferencer;

const std::string kDataDir = std::string(ZS_SOURCE_DIR) + "/tests/data/config/";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "zs_test_config_" + name;
  std::ofstream(path) << text;
  return path;
}

CommandLine parse(std::vector<const char*> args) {
  return parse_command_line(static_cast<int>(args.size()), args.data());
}

// Sets or unsets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) {
      old_ = old;
      had_ = true;
    }
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_.c_str(), old_.c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_, old_;
  bool had_ = false;
};

TEST(Config, DefaultsComeFromTheSchema) {
  Config c = default_config();
  EXPECT_EQ(c.runtime().device(), config::RuntimeConfig::AUTO);
  EXPECT_EQ(c.runtime().seed(), 1234u);
  EXPECT_DOUBLE_EQ(c.comm().timeout_s(), 600.0);
  EXPECT_TRUE(c.comm().abort_on_timeout());
  EXPECT_FALSE(c.comm().check_signatures());
  EXPECT_EQ(c.logging().level(), "info");
  EXPECT_EQ(c.sharding().strategy(), config::ShardingConfig::FULL_SHARD);
  EXPECT_EQ(c.sharding().auto_wrap_min_params(), 100000000);
  EXPECT_EQ(c.sharding().backward_prefetch(), config::BackwardPrefetch::BACKWARD_PRE);
  EXPECT_EQ(c.sharding().limit_all_gathers(), 2);
  EXPECT_EQ(c.precision().param_dtype(), config::PrecisionConfig::FP32);
  EXPECT_DOUBLE_EQ(c.precision().loss_scale().initial_scale(), 65536.0);
  EXPECT_DOUBLE_EQ(c.precision().loss_scale().backoff_factor(), 0.5);
  EXPECT_EQ(c.precision().loss_scale().growth_interval(), 2000);
  EXPECT_EQ(c.optimizer().type(), config::OptimizerConfig::ADAMW);
  EXPECT_DOUBLE_EQ(c.optimizer().eps(), 1e-8);
  EXPECT_EQ(c.offload().block_size(), 1048576);
  EXPECT_EQ(c.checkpoint().keep_last(), 3);
  // Every default lies inside its own range and satisfies the cross-field rules.
  EXPECT_TRUE(check_config(c).empty()) << check_config(c)[0].message;
  EXPECT_NO_THROW(validate_config(c));
}

TEST(Config, FieldListCoversEveryLeaf) {
  auto fields = list_config_fields();
  auto paths = config_field_paths();
  ASSERT_EQ(fields.size(), paths.size());
  EXPECT_GE(fields.size(), 50u);
  std::set<std::string> unique(paths.begin(), paths.end());
  EXPECT_EQ(unique.size(), paths.size());
  std::map<std::string, ConfigFieldInfo> by_path;
  for (size_t i = 0; i < fields.size(); ++i) {
    EXPECT_EQ(fields[i].path, paths[i]);
    by_path[fields[i].path] = fields[i];
  }
  EXPECT_EQ(by_path["comm.timeout_s"].type, "double");
  EXPECT_EQ(by_path["comm.timeout_s"].default_value, "600");
  EXPECT_EQ(by_path["comm.timeout_s"].allowed, "[0.1, 86400]");
  EXPECT_EQ(by_path["optimizer.eps"].default_value, "1e-8");
  EXPECT_EQ(by_path["optimizer.eps"].allowed, "(0, 1]");
  EXPECT_EQ(by_path["logging.level"].default_value, "\"info\"");
  EXPECT_EQ(by_path["runtime.device"].allowed, "AUTO, CPU, CUDA");
  EXPECT_EQ(by_path["offload.block_size"].allowed, "[4096, 1073741824], multiple of 4096");
  EXPECT_EQ(by_path["precision.loss_scale.hysteresis"].default_value, "2");
}

TEST(Config, LoadsTextprotoAndJsonAlike) {
  Config text = load_config_file(kDataDir + "valid.textproto");
  EXPECT_EQ(text.runtime().device(), config::RuntimeConfig::CPU);
  EXPECT_EQ(text.runtime().seed(), 42u);
  EXPECT_DOUBLE_EQ(text.comm().timeout_s(), 30.5);
  EXPECT_FALSE(text.comm().abort_on_timeout());
  EXPECT_EQ(text.sharding().strategy(), config::ShardingConfig::HYBRID_SHARD);
  EXPECT_EQ(text.precision().param_dtype(), config::PrecisionConfig::BF16);
  EXPECT_EQ(text.precision().loss_scale().mode(), config::LossScaleConfig::DYNAMIC);
  EXPECT_DOUBLE_EQ(text.optimizer().lr(), 3e-4);
  EXPECT_EQ(text.offload().nvme_path(), "/tmp/zs-nvme");
  EXPECT_EQ(text.offload().io_backend(), config::OffloadConfig::IO_URING);
  // Unset keys keep their defaults.
  EXPECT_DOUBLE_EQ(text.optimizer().beta1(), 0.9);
  EXPECT_NO_THROW(validate_config(text));

  Config json = load_config_file(kDataDir + "valid.json");
  std::string diff;
  MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(text, json)) << diff;
}

TEST(Config, AcceptsEveryTextExtension) {
  const std::string text = read_text(kDataDir + "valid.textproto");
  for (const char* ext : {".txtpb", ".pbtxt", ".prototxt"}) {
    Config c = load_config_file(write_temp(std::string("ext") + ext, text));
    EXPECT_EQ(c.runtime().seed(), 42u) << ext;
  }
}

TEST(Config, UnknownKeyInTextprotoNamesFileLineKeyAndChoices) {
  const std::string file = kDataDir + "unknown_key.textproto";
  std::string msg = test::message_of<ConfigError>([&] { load_config_file(file); });
  EXPECT_CONTAINS(msg, file + ":4:");
  EXPECT_CONTAINS(msg, "unknown key 'comm.timout'");
  EXPECT_CONTAINS(msg, "did you mean 'comm.timeout_s'");
  EXPECT_CONTAINS(msg, "valid keys in 'comm': timeout_s, abort_on_timeout");

  msg = test::message_of<ConfigError>([&] { load_config_file(kDataDir + "unknown_section.textproto"); });
  EXPECT_CONTAINS(msg, "unknown key 'optimiser'");
  EXPECT_CONTAINS(msg, "did you mean 'optimizer'");
  EXPECT_CONTAINS(msg, "valid top-level keys: runtime, comm");
}

TEST(Config, UnknownKeyInJsonNamesFileKeyAndChoices) {
  const std::string file = kDataDir + "unknown_key.json";
  std::string msg = test::message_of<ConfigError>([&] { load_config_file(file); });
  EXPECT_CONTAINS(msg, file + ":3:");
  EXPECT_CONTAINS(msg, "unknown key 'sharding.limit_allgathers'");
  EXPECT_CONTAINS(msg, "did you mean 'sharding.limit_all_gathers'");
  EXPECT_CONTAINS(msg, "valid keys in 'sharding':");
}

TEST(Config, WrongTypeNamesFileAndField) {
  std::string file = kDataDir + "wrong_type.textproto";
  std::string msg = test::message_of<ConfigError>([&] { load_config_file(file); });
  EXPECT_CONTAINS(msg, file + ":2:");
  EXPECT_CONTAINS(msg, "comm.timeout_s");
  EXPECT_CONTAINS(msg, "double");

  file = kDataDir + "wrong_type.json";
  msg = test::message_of<ConfigError>([&] { load_config_file(file); });
  EXPECT_CONTAINS(msg, file);
  EXPECT_CONTAINS(msg, "sharding.forward_prefetch expects a bool");

  msg = test::message_of<ConfigError>([&] { parse_config_json(R"({"comm": 5})", "inline.json"); });
  EXPECT_CONTAINS(msg, "comm expects an object");
  msg =
      test::message_of<ConfigError>([&] { parse_config_json(R"({"sharding": {"limit_all_gathers": 2.5}})", "x.json"); });
  EXPECT_CONTAINS(msg, "sharding.limit_all_gathers expects an integer");
}

TEST(Config, BadEnumListsAllowedNames) {
  std::string msg = test::message_of<ConfigError>([&] { load_config_file(kDataDir + "bad_enum.textproto"); });
  EXPECT_CONTAINS(msg, "sharding.strategy");
  EXPECT_CONTAINS(msg, "ZERO3");
  EXPECT_CONTAINS(msg, "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD");

  msg = test::message_of<ConfigError>([&] { load_config_file(kDataDir + "bad_enum.json"); });
  EXPECT_CONTAINS(msg, "precision.param_dtype expects one of FP32, BF16, FP16");

  Config c;
  msg = test::message_of<ConfigError>([&] { apply_override(c, "offload.io_backend=uring"); });
  EXPECT_CONTAINS(msg, "--set offload.io_backend=uring");
  EXPECT_CONTAINS(msg, "AUTO, IO_URING, LIBAIO, THREADS");
}

TEST(Config, FileErrors) {
  std::string missing = kDataDir + "does_not_exist.textproto";
  std::string msg = test::message_of<ConfigError>([&] { load_config_file(missing); });
  EXPECT_CONTAINS(msg, missing);
  EXPECT_CONTAINS(msg, "cannot read");

  msg = test::message_of<ConfigError>([&] { load_config_file(kDataDir + "wrong_extension.yaml"); });
  EXPECT_CONTAINS(msg, "wrong_extension.yaml");
  EXPECT_CONTAINS(msg, ".textproto");
  EXPECT_CONTAINS(msg, ".json");

  msg = test::message_of<ConfigError>([&] { load_config_file(kDataDir + "syntax_error.json"); });
  EXPECT_CONTAINS(msg, "syntax_error.json");

  msg = test::message_of<ConfigError>([&] { parse_config_textproto("comm { timeout_s: 1 ", "broken.textproto"); });
  EXPECT_CONTAINS(msg, "broken.textproto:1:");
}

TEST(Config, OverridesEachType) {
  Config c;
  apply_override(c, "comm.abort_on_timeout=false");
  EXPECT_FALSE(c.comm().abort_on_timeout());
  apply_override(c, "comm.check_signatures=1");
  EXPECT_TRUE(c.comm().check_signatures());
  apply_override(c, "comm.check_signatures=FALSE");
  EXPECT_FALSE(c.comm().check_signatures());
  EXPECT_TRUE(c.comm().has_check_signatures());
  apply_override(c, "sharding.limit_all_gathers=5");
  EXPECT_EQ(c.sharding().limit_all_gathers(), 5);
  apply_override(c, "sharding.auto_wrap_min_params=5000000000");
  EXPECT_EQ(c.sharding().auto_wrap_min_params(), 5000000000LL);
  apply_override(c, "runtime.seed=18446744073709551615");
  EXPECT_EQ(c.runtime().seed(), std::numeric_limits<uint64_t>::max());
  apply_override(c, "precision.loss_scale.initial_scale=1.5e3");
  EXPECT_DOUBLE_EQ(c.precision().loss_scale().initial_scale(), 1500.0);
  apply_override(c, "precision.param_dtype=bf16");
  EXPECT_EQ(c.precision().param_dtype(), config::PrecisionConfig::BF16);
  apply_override(c, "sharding.backward_prefetch=Backward_Post");
  EXPECT_EQ(c.sharding().backward_prefetch(), config::BackwardPrefetch::BACKWARD_POST);
  apply_override(c, "checkpoint.dir=/data/run=1");  // value is everything after the first '='
  EXPECT_EQ(c.checkpoint().dir(), "/data/run=1");
  apply_override(c, "checkpoint.dir=");
  EXPECT_EQ(c.checkpoint().dir(), "");
  EXPECT_TRUE(c.checkpoint().has_dir());
}

TEST(Config, OverrideErrors) {
  Config c;
  std::string msg = test::message_of<ConfigError>([&] { apply_override(c, "comm.timeot_s=3"); });
  EXPECT_CONTAINS(msg, "--set comm.timeot_s=3");
  EXPECT_CONTAINS(msg, "unknown key 'comm.timeot_s'");
  EXPECT_CONTAINS(msg, "did you mean 'comm.timeout_s'");
  EXPECT_CONTAINS(msg, "valid keys in 'comm':");
  // A leaf written without its section: suggested by its full path.
  msg = test::message_of<ConfigError>([&] { apply_override(c, "limit_all_gathers=3"); });
  EXPECT_CONTAINS(msg, "did you mean 'sharding.limit_all_gathers'");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "comm=1"); });
  EXPECT_CONTAINS(msg, "'comm' is a section");
  EXPECT_CONTAINS(msg, "comm.timeout_s");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "comm.timeout_s.x=1"); });
  EXPECT_CONTAINS(msg, "not a section");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "comm.timeout_s=abc"); });
  EXPECT_CONTAINS(msg, "comm.timeout_s expects a number (double), got 'abc'");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "sharding.limit_all_gathers=3000000000"); });
  EXPECT_CONTAINS(msg, "expects an int32");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "sharding.limit_all_gathers=2.5"); });
  EXPECT_CONTAINS(msg, "expects an int32");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "runtime.seed=-1"); });
  EXPECT_CONTAINS(msg, "expects a uint64");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "comm.abort_on_timeout=yes"); });
  EXPECT_CONTAINS(msg, "expects a bool (true, false, 1, 0)");
  msg = test::message_of<ConfigError>([&] { apply_override(c, "comm.timeout_s"); });
  EXPECT_CONTAINS(msg, "expected key=value");
  // A failed override leaves the value as it was.
  EXPECT_DOUBLE_EQ(c.comm().timeout_s(), 600.0);
}

TEST(Config, RangeErrorsNameFieldValueAndRange) {
  Config c = load_config_file(kDataDir + "out_of_range.textproto");
  std::string msg = test::message_of<ConfigError>([&] { validate_config(c); });
  EXPECT_CONTAINS(msg, "comm.timeout_s = -1 is out of range; allowed: [0.1, 86400]");

  Config d;
  apply_override(d, "precision.loss_scale.backoff_factor=1");  // open bound
  msg = test::message_of<ConfigError>([&] { validate_config(d); });
  EXPECT_CONTAINS(msg, "precision.loss_scale.backoff_factor = 1 is out of range; allowed: (0, 1)");
  apply_override(d, "precision.loss_scale.backoff_factor=0.999");
  EXPECT_NO_THROW(validate_config(d));

  apply_override(d, "offload.block_size=10000");
  msg = test::message_of<ConfigError>([&] { validate_config(d); });
  EXPECT_CONTAINS(msg, "multiple of 4096");
  apply_override(d, "offload.block_size=8192");
  apply_override(d, "sharding.limit_all_gathers=17");
  msg = test::message_of<ConfigError>([&] { validate_config(d); });
  EXPECT_CONTAINS(msg, "sharding.limit_all_gathers = 17 is out of range; allowed: [1, 16]");
  apply_override(d, "sharding.limit_all_gathers=16");
  apply_override(d, "optimizer.lr=nan");
  msg = test::message_of<ConfigError>([&] { validate_config(d); });
  EXPECT_CONTAINS(msg, "optimizer.lr = nan is not a finite number");
  apply_override(d, "optimizer.lr=0.1");
  EXPECT_NO_THROW(validate_config(d));
}

// (The rules between keys, one test each: test_config_rules.cpp.)

TEST(Config, ParseCommandLine) {
  CommandLine cl =
      parse({"prog", "--config", "a.textproto", "--steps", "10", "--set", "comm.timeout_s=5",
             "--set=optimizer.lr=0.1", "data.bin", "--", "--set", "x"});
  EXPECT_EQ(cl.config_path, "a.textproto");
  EXPECT_EQ(cl.overrides, (std::vector<std::string>{"comm.timeout_s=5", "optimizer.lr=0.1"}));
  EXPECT_EQ(cl.rest,
            (std::vector<std::string>{"prog", "--steps", "10", "data.bin", "--", "--set", "x"}));

  cl = parse({"prog", "--config=b.json"});
  EXPECT_EQ(cl.config_path, "b.json");
  EXPECT_TRUE(cl.overrides.empty());
  EXPECT_EQ(cl.rest, (std::vector<std::string>{"prog"}));

  EXPECT_CONTAINS(test::message_of<UsageError>([] {
                    parse({"prog", "--config"});
                  }),
                  "--config needs a value");
  EXPECT_CONTAINS(test::message_of<UsageError>([] { parse({"prog", "--set"}); }), "--set needs a value");
  EXPECT_CONTAINS(test::message_of<UsageError>([] {
                    parse({"prog", "--set", "--config", "a.json"});
                  }),
                  "--set needs a value");
  EXPECT_CONTAINS(test::message_of<UsageError>([] { parse({"prog", "--config="}); }), "non-empty");
  EXPECT_CONTAINS(test::message_of<UsageError>([] {
                    parse({"prog", "--config=a.json", "--config", "b.json"});
                  }),
                  "--config given twice");
  EXPECT_CONTAINS(test::message_of<UsageError>([] {
                    parse({"prog", "--set", "comm.timeout_s"});
                  }),
                  "expected key=value");
}

TEST(Config, BuildConfigPrecedence) {
  ScopedEnv no_env("ZS_CONFIG", nullptr);
  CommandLine cl;
  cl.config_path = kDataDir + "valid.textproto";  // timeout_s 30.5, seed 42
  cl.overrides = {"comm.timeout_s=10", "runtime.device=AUTO", "comm.timeout_s=20"};
  Config c = build_config(cl);
  EXPECT_DOUBLE_EQ(c.comm().timeout_s(), 20.0);                  // last --set wins
  EXPECT_EQ(c.runtime().device(), config::RuntimeConfig::AUTO);  // --set beats the file
  EXPECT_EQ(c.runtime().seed(), 42u);                            // file beats the default
  EXPECT_EQ(c.checkpoint().keep_last(), 2);
  EXPECT_DOUBLE_EQ(c.optimizer().beta1(), 0.9);  // default

  EXPECT_DOUBLE_EQ(build_config(CommandLine{}).comm().timeout_s(), 600.0);
}

TEST(Config, BuildConfigReadsZsConfigOnlyWithoutConfigFlag) {
  ScopedEnv env("ZS_CONFIG", (kDataDir + "valid.json").c_str());
  EXPECT_EQ(build_config(CommandLine{}).runtime().seed(), 42u);
  CommandLine cl;
  cl.config_path = kDataDir + "out_of_range.textproto";
  std::string msg = test::message_of<ConfigError>([&] { build_config(cl); });  // --config wins over ZS_CONFIG
  EXPECT_CONTAINS(msg, "comm.timeout_s = -1");
  ScopedEnv missing("ZS_CONFIG", (kDataDir + "nope.json").c_str());
  EXPECT_CONTAINS(test::message_of<ConfigError>([&] { build_config(CommandLine{}); }), "nope.json");
}

TEST(Config, BuildConfigSaysWhereBadValuesCameFrom) {
  ScopedEnv no_env("ZS_CONFIG", nullptr);
  CommandLine cl;
  cl.config_path = kDataDir + "out_of_range.textproto";
  cl.overrides = {"comm.backend=NCCL", "runtime.device=CPU"};
  std::string msg = test::message_of<ConfigError>([&] { build_config(cl); });
  EXPECT_CONTAINS(msg, "2 problems");
  EXPECT_CONTAINS(msg, "comm.timeout_s from config file " + cl.config_path);
  EXPECT_CONTAINS(msg, "comm.backend from --set comm.backend=NCCL");
  EXPECT_CONTAINS(msg, "runtime.device from --set runtime.device=CPU");
}

TEST(Config, TextprotoPrintsEveryLeafAndRoundTrips) {
  Config c = load_config_file(kDataDir + "valid.textproto");
  apply_override(c, "optimizer.lr=0.00030000000000000003");
  apply_override(c, "checkpoint.dir=odd \"dir\"\\x");
  const std::string text = to_textproto(c);
  size_t leaf_lines = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    leaf_lines += line.find(':') != std::string::npos;
  EXPECT_EQ(leaf_lines, config_field_paths().size());
  EXPECT_CONTAINS(text, "  timeout_s: 30.5\n");
  EXPECT_CONTAINS(text, "  keep_last: 2\n");
  EXPECT_CONTAINS(text, "  beta1: 0.9\n");  // a default, printed too

  Config back = parse_config_textproto(text, "printed");
  // `back` has every field set, `c` only some: compare effective values.
  MessageDifferencer differ;
  differ.set_message_field_comparison(MessageDifferencer::EQUIVALENT);
  std::string diff;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(c, back)) << diff;
  EXPECT_EQ(to_textproto(back), text);
}

// ---- the documentation test: docs/config.md must list exactly the schema's keys ----

struct DocRow {
  std::string type, default_value, allowed, meaning;
  int line = 0;
};

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::string strip_backticks(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '`'), s.end());
  return s;
}

// Rows `| `key` | type | default | allowed | meaning |` of docs/config.md, keyed by key.
std::map<std::string, DocRow> read_doc_rows(const std::string& path,
                                            std::vector<std::string>* dups) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::map<std::string, DocRow> rows;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream ss(line.substr(1));
    for (std::string cell; std::getline(ss, cell, '|');) cells.push_back(trim(cell));
    if (cells.size() != 5) continue;  // the rules table has two columns
    const std::string& key_cell = cells[0];
    if (key_cell.size() < 3 || key_cell.back() != '`' ||
        key_cell.find('`', 1) != key_cell.size() - 1) {
      continue;
    }
    std::string key = strip_backticks(key_cell);
    if (rows.count(key)) dups->push_back(key);
    rows[key] = {cells[1], strip_backticks(cells[2]), strip_backticks(cells[3]), cells[4], line_no};
  }
  return rows;
}

TEST(ConfigDocs, DocsMatchSchema) {
  const std::string doc = std::string(ZS_SOURCE_DIR) + "/docs/config.md";
  std::vector<std::string> dups;
  std::map<std::string, DocRow> rows = read_doc_rows(doc, &dups);
  EXPECT_TRUE(dups.empty()) << "keys documented twice in " << doc << ", e.g. " << dups[0];
  ASSERT_FALSE(rows.empty()) << "no key rows found in " << doc;

  std::set<std::string> schema_keys;
  for (const ConfigFieldInfo& f : list_config_fields()) {
    schema_keys.insert(f.path);
    auto it = rows.find(f.path);
    if (it == rows.end()) {
      ADD_FAILURE() << f.path << " is in the schema but not documented in " << doc;
      continue;
    }
    const DocRow& row = it->second;
    EXPECT_EQ(row.default_value, f.default_value)
        << doc << ":" << row.line << ": documented default of " << f.path
        << " differs from the schema";
    EXPECT_EQ(row.type, f.type) << doc << ":" << row.line << ": type of " << f.path;
    EXPECT_EQ(row.allowed, f.allowed) << doc << ":" << row.line << ": allowed values of " << f.path;
    EXPECT_FALSE(row.meaning.empty())
        << doc << ":" << row.line << ": " << f.path << " has no meaning";
  }
  for (const auto& [key, row] : rows) {
    EXPECT_TRUE(schema_keys.count(key))
        << doc << ":" << row.line << ": documents '" << key << "', which is not in the schema";
  }
}

}  // namespace
}  // namespace zeroshard
