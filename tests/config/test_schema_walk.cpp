// SPDX-License-Identifier: Apache-2.0
// The schema walk: no program ignores a config key. For every leaf key of the schema (read from the
// protobuf descriptor, so a new field joins the walk by itself) and every program that takes a
// config, the key is set to a value other than its default and the program's own config check
// (load_run with the Program it runs under) must either accept it as a key the program acts on or
// refuse it with a ConfigError that names the key. A value the validator refuses on its own is a
// failure of the walk (it would prove nothing about the program): such keys get companion settings
// in kCompanions.
//
// The programs' key lists come from the programs themselves (ZS_PRINT_PROGRAM_KEYS=1, main.h);
// zeroshard-train's depend on the config, so the walk runs its train_program for each model kind
// (the built-in GPT, a Hugging Face directory, a TorchScript file on images and on bytes).

#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "zeroshard/base/error.h"
#include "zeroshard/config/config.h"
#include "zeroshard/config/main.h"
#include "zeroshard/train/train_program.h"
#include "zeroshard.pb.h"

namespace zeroshard {
namespace {

namespace pb = ::google::protobuf;
namespace fs = std::filesystem;

// Every leaf key of the schema ("optimizer.lr"; a repeated field is one key).
void leaf_fields(const pb::Descriptor* d, const std::string& prefix,
                 std::vector<std::pair<std::string, const pb::FieldDescriptor*>>* out) {
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    const std::string path = prefix.empty() ? f->name() : prefix + "." + f->name();
    if (!f->is_repeated() && f->cpp_type() == pb::FieldDescriptor::CPPTYPE_MESSAGE) {
      leaf_fields(f->message_type(), path, out);
    } else {
      out->emplace_back(path, f);
    }
  }
}

// Settings a key needs beside it to pass validation (its own value would otherwise be refused by
// a rule over several keys, which says nothing about the program).
const std::map<std::string, std::vector<std::string>> kCompanions = {
    {"optimizer.nesterov", {"optimizer.momentum=0.5", "optimizer.type=SGD"}},
    {"optimizer.momentum", {"optimizer.type=SGD"}},
    {"precision.frozen_linear", {"lora.rank=4"}},
    {"precision.autocast", {"precision.param_dtype=BF16"}},
    {"offload.params", {"offload.optimizer=CPU"}},
    {"offload.grads", {"offload.optimizer=CPU"}},
    {"offload.keep_param_dtype_shard", {"offload.params=CPU", "offload.optimizer=CPU", "precision.param_dtype=BF16"}},
    {"offload.overlap_step", {"offload.optimizer=CPU"}},
    {"checkpoint.interval_steps", {"checkpoint.dir=walk-checkpoints"}},
    {"checkpoint.keep_last", {"checkpoint.dir=walk-checkpoints"}},
    {"checkpoint.async_save", {"checkpoint.dir=walk-checkpoints"}},
    {"activation_checkpointing.every_n_blocks", {"activation_checkpointing.enabled=true"}},
    {"lora.alpha", {"lora.rank=4"}},
    {"lora.dropout", {"lora.rank=4"}},
    {"lora.targets", {"lora.rank=4"}},
    {"scheduler.step_size", {"scheduler.type=STEP"}},
    {"scheduler.gamma", {"scheduler.type=STEP"}},
    {"sharding.gather_quantization_block", {"sharding.gather_quantization=INT8"}},
    {"sharding.reduce_quantization_block", {"sharding.reduce_quantization=INT8"}},
};
// Values for keys whose generic non-default value the validator refuses (names, lists, shapes).
const std::map<std::string, std::string> kValues = {
    {"model.n_head", "8"},           {"model.d_model", "256"}, {"model.init_rename", "a=b"},
    {"logging.ranks", "0"},          {"logging.level", "debug"},
};

bool in_range(const pb::FieldDescriptor* f, double v) {
  const pb::FieldOptions& o = f->options();
  if (o.HasExtension(config::zs_min)) {
    const double lo = o.GetExtension(config::zs_min);
    if (v < lo || (o.GetExtension(config::zs_min_open) && v == lo)) return false;
  }
  if (o.HasExtension(config::zs_max)) {
    const double hi = o.GetExtension(config::zs_max);
    if (v > hi || (o.GetExtension(config::zs_max_open) && v == hi)) return false;
  }
  if (o.HasExtension(config::zs_multiple_of)) {
    const double m = static_cast<double>(o.GetExtension(config::zs_multiple_of));
    if (std::fmod(v, m) != 0) return false;
  }
  return true;
}

std::string number_text(double v, bool integer) {
  char buf[64];
  if (integer) {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
  } else {
    std::snprintf(buf, sizeof buf, "%.17g", v);
  }
  return buf;
}

// A valid value other than the default, as `--set` takes it; "" for a repeated field (set by file).
std::string other_value(const std::string& key, const pb::FieldDescriptor* f) {
  if (const auto it = kValues.find(key); it != kValues.end()) return it->second;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_BOOL: return f->default_value_bool() ? "false" : "true";
    case pb::FieldDescriptor::CPPTYPE_ENUM: {
      const pb::EnumDescriptor* e = f->enum_type();
      for (int i = 0; i < e->value_count(); ++i) {
        if (e->value(i)->number() != f->default_value_enum()->number()) return e->value(i)->name();
      }
      return "";
    }
    case pb::FieldDescriptor::CPPTYPE_STRING: return "walk-value";
    default: break;
  }
  const bool integer = f->cpp_type() != pb::FieldDescriptor::CPPTYPE_DOUBLE &&
                       f->cpp_type() != pb::FieldDescriptor::CPPTYPE_FLOAT;
  double d = 0;
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32: d = f->default_value_int32(); break;
    case pb::FieldDescriptor::CPPTYPE_INT64: d = static_cast<double>(f->default_value_int64()); break;
    case pb::FieldDescriptor::CPPTYPE_UINT32: d = f->default_value_uint32(); break;
    case pb::FieldDescriptor::CPPTYPE_UINT64: d = static_cast<double>(f->default_value_uint64()); break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE: d = f->default_value_double(); break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT: d = f->default_value_float(); break;
    default: break;
  }
  const pb::FieldOptions& o = f->options();
  const double step = o.HasExtension(config::zs_multiple_of) ? static_cast<double>(o.GetExtension(config::zs_multiple_of)) : 1;
  std::vector<double> candidates = {d + step, d * 2, d / 2, d - step};
  if (!integer) candidates = {d / 2, d + 0.25 * (d == 0 ? 1 : d), d * 2, 0.5, 0.25};
  if (o.HasExtension(config::zs_min)) candidates.push_back(o.GetExtension(config::zs_min));
  if (o.HasExtension(config::zs_max)) candidates.push_back(o.GetExtension(config::zs_max));
  for (double v : candidates) {
    if (integer && v != std::floor(v)) continue;
    if (v != d && in_range(f, v)) return number_text(v, integer);
  }
  return "";
}

struct Outcome {
  bool accepted = false;
  std::string error;  // ConfigError text when refused
  bool other_error = false;
};

Outcome check(const ProgramOf& program_of, const std::vector<std::string>& base, const std::string& key,
              const std::string& value, const std::string& file) {
  std::vector<std::string> args = {"walk"};
  args.insert(args.end(), base.begin(), base.end());
  if (const auto it = kCompanions.find(key); it != kCompanions.end()) {
    for (const std::string& c : it->second) args.insert(args.end(), {"--set", c});
  }
  if (!file.empty()) {
    args.insert(args.end(), {"--config", file});
  } else {
    args.insert(args.end(), {"--set", key + "=" + value});
  }
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  Outcome out;
  try {
    load_run(static_cast<int>(argv.size()), argv.data(), program_of);
    out.accepted = true;
  } catch (const ConfigError& e) {
    out.error = e.what();
  } catch (const std::exception& e) {
    out.error = e.what();
    out.other_error = true;
  }
  return out;
}

// A program's key list, printed by the program itself.
Program printed_program(const std::string& binary, const std::string& args = "") {
  const std::string cmd = std::string(kPrintProgramKeysEnv) + "=1 " + ZS_BIN_DIR + "/" + binary + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  std::vector<std::string> lines;
  char buf[4096];
  while (p != nullptr && std::fgets(buf, sizeof buf, p) != nullptr) {
    std::string line(buf);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    lines.push_back(line);
  }
  const int status = p == nullptr ? -1 : pclose(p);
  EXPECT_EQ(status, 0) << cmd << " printed:\n" << (lines.empty() ? "" : lines.front());
  if (status != 0) lines.clear();
  Program program{lines.empty() ? binary : lines.front(), {}};
  program.reads.clear();
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i] == kAcceptsFileKeysLine) {
      program.accept_unread_in_file = true;
    } else {
      program.reads.push_back(lines[i]);
    }
  }
  return program;
}

class SchemaWalk : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    leaf_fields(Config::descriptor(), "", &fields_);
    dir_ = std::string(ZS_TEST_TMPDIR) + "/schema_walk";
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/hf_model");
    std::ofstream(dir_ + "/hf_model/config.json") << "{}\n";  // model.path's kind is all the walk needs
    std::ofstream(dir_ + "/model.pt") << "walk\n";
    std::ofstream(dir_ + "/param_groups.textproto")
        << "optimizer { param_groups { match: \"*.bias\" weight_decay: 0 } }\n";
  }

  // Walks every key for one program; `name` in messages.
  void walk(const std::string& name, const ProgramOf& program_of, const std::vector<std::string>& base,
            bool accepts_file_keys = false) {
    SCOPED_TRACE(name);
    int acted = 0, refused = 0;
    std::vector<std::string> invalid, unnamed;
    for (const auto& [key, field] : fields_) {
      const bool repeated = field->is_repeated();
      const std::string value = repeated ? "" : other_value(key, field);
      if (!repeated && value.empty()) {
        ADD_FAILURE() << key << ": the walk has no non-default value for it; add one to kValues";
        continue;
      }
      if (repeated && key != "optimizer.param_groups") {
        ADD_FAILURE() << key << ": a list the walk does not know how to set; add a config file for it";
        continue;
      }
      const Outcome o = check(program_of, base, key, value, repeated ? dir_ + "/param_groups.textproto" : "");
      if (o.accepted) {
        ++acted;
        continue;
      }
      const bool names_key = o.error.find(key) != std::string::npos;
      // The program's refusal: load_run's "does not act on KEY", or zeroshard-train's choice of
      // model and data refusing model.path / data.format. Any other error is the validator's or
      // the resolver's, and the walk needs a valid value instead (kValues, kCompanions).
      const bool by_program = !o.other_error && names_key &&
                              (o.error.find(" does not act on ") != std::string::npos ||
                               key == "model.path" || key == "data.format");
      if (by_program) {
        ++refused;
      } else {
        (names_key || o.other_error ? invalid : unnamed)
            .push_back(key + " = " + (repeated ? "(file)" : value) + ": " + o.error);
      }
    }
    for (const std::string& s : invalid) ADD_FAILURE() << "refused for another reason than the program: " << s;
    for (const std::string& s : unnamed) ADD_FAILURE() << "refused without naming the key: " << s;
    EXPECT_GT(acted, 0);
    std::printf("%s: %d keys acted on, %d refused%s\n", name.c_str(), acted, refused,
                accepts_file_keys ? " (keys set in a config file are accepted: it reads other programs' files)" : "");
  }

  static std::vector<std::pair<std::string, const pb::FieldDescriptor*>> fields_;
  static std::string dir_;
};
std::vector<std::pair<std::string, const pb::FieldDescriptor*>> SchemaWalk::fields_;
std::string SchemaWalk::dir_;

TEST_F(SchemaWalk, ZeroshardTrainActsOnOrRefusesEveryKeyForEveryModel) {
  walk("zeroshard-train (the built-in GPT)", train_program, {});
  walk("zeroshard-train (a Hugging Face model)", train_program, {"--set", "model.path=" + dir_ + "/hf_model"});
  walk("zeroshard-train (a TorchScript model on images)", train_program,
       {"--set", "model.path=" + dir_ + "/model.pt", "--set", "data.format=IMAGES"});
  walk("zeroshard-train (a TorchScript model on bytes)", train_program,
       {"--set", "model.path=" + dir_ + "/model.pt", "--set", "data.format=BYTES"});
}

TEST_F(SchemaWalk, EveryOtherProgramActsOnOrRefusesEveryKey) {
  for (const std::string binary : {"train_gpt", "train_fashion_mnist", "train_torchscript", "offload_demo",
                                   "zeroshard-estimate", "zeroshard-eval", "zeroshard-selftest", "zeroshard-train",
                                   "bench_step", "bench_memory", "bench_ckpt", "bench_finetune", "bench_torchscript",
                                   "bench_pretrained", "bench_offload_gpt", "bench_comm"}) {
    // train_torchscript needs its model's file (only its kind is looked at).
    const Program program = printed_program(binary, binary == "train_torchscript" ? "--model " + dir_ + "/model.pt" : "");
    if (program.reads.empty()) continue;  // printed_program failed, naming the program
    walk(binary, [&program](const Config&) { return program; }, {}, program.accept_unread_in_file);
  }
}

TEST_F(SchemaWalk, ZeroshardTrainRefusesAModelOrDataItCannotTrain) {
  const auto refusal = [&](const std::vector<std::string>& base) {
    std::vector<std::string> args = {"walk"};
    args.insert(args.end(), base.begin(), base.end());
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    try {
      load_run(static_cast<int>(argv.size()), argv.data(), ProgramOf(train_program));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(refusal({"--set", "model.path=" + dir_ + "/missing"}).find("model.path '" + dir_ +
                                                                        "/missing': no such file or directory"),
            std::string::npos);
  EXPECT_NE(refusal({"--set", "model.path=" + dir_}).find("is a directory without config.json"), std::string::npos);
  EXPECT_NE(refusal({"--set", "data.format=JSONL"})
                .find("data.format = JSONL does not fit the built-in GPT (model.path empty): the GPT trains on BYTES"),
            std::string::npos);
  EXPECT_NE(refusal({"--set", "model.path=" + dir_ + "/model.pt"}).find("data.format is AUTO: a TorchScript model"),
            std::string::npos);
  EXPECT_NE(refusal({"--set", "model.path=" + dir_ + "/model.pt", "--set", "data.format=IMAGES", "--set",
                     "model.n_layer=4"})
                .find("zeroshard-train does not act on model.n_layer (set by --set model.n_layer=4)"),
            std::string::npos);
  EXPECT_NE(refusal({"--set", "model.path=" + dir_ + "/hf_model", "--set", "model.dropout=0.2"})
                .find("zeroshard-train does not act on model.dropout"),
            std::string::npos);
  EXPECT_NE(refusal({"--set", "model.path=" + dir_ + "/model.pt", "--set", "data.format=IMAGES", "--set",
                     "sample.tokens=3"})
                .find("zeroshard-train does not act on sample.tokens"),
            std::string::npos);
}

}  // namespace
}  // namespace zeroshard
