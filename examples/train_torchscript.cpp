// SPDX-License-Identifier: Apache-2.0
// train_torchscript: a model written in Python, scripted (torch.jit.script(model).save("model.pt"))
// or traced, trained sharded with zeroshard; no Python runs. It is zeroshard-train
// (zeroshard/train/train_program.h, docs/train.md) for TorchScript models, with flags for the
// model's keys:
//
//   mpirun -n 2 build/bin/train_torchscript --model FILE.pt --units PATTERNS [--unit-types NAMES]
//        [--task fashion_mnist|text] [--export FILE.pt] [--config FILE] [--set key=value ...]
//        [--metrics-out FILE] [--check-loss-decreases] [--min-accuracy X] [--resume]
//
//   --model FILE.pt      model.path
//   --units PATTERNS     model.units: comma-separated submodule paths, '*' within one path component
//   --unit-types NAMES   model.unit_types: comma-separated class names ("Block")
//   --task fashion_mnist data.format = IMAGES (the default): images [N, 1, 28, 28] -> logits [N, 10]
//   --task text          data.format = BYTES: byte windows [N, model.seq_len] -> logits [N, T, >= 256]
// --export FILE.pt writes the trained values into a copy of the model file that Python's
// torch.jit.load reads; --min-accuracy X (fashion_mnist): exit 1 unless the final test accuracy is
// at least X. Everything else comes from the config (docs/config.md).

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "zeroshard/train/train_program.h"

namespace {

// The model's flags as the config's keys; every other argument as it was.
std::vector<std::string> translate(int argc, char** argv) {
  const std::vector<std::pair<std::string, std::string>> flags = {
      {"--model", "model.path"}, {"--units", "model.units"}, {"--unit-types", "model.unit_types"}, {"--task", ""}};
  std::vector<std::string> out = {argv[0]};
  bool task = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i], value;
    const std::pair<std::string, std::string>* hit = nullptr;
    for (const auto& f : flags) {
      if (arg == f.first && i + 1 < argc) {
        hit = &f, value = argv[++i];
      } else if (arg.rfind(f.first + "=", 0) == 0) {
        hit = &f, value = arg.substr(f.first.size() + 1);
      }
      if (hit != nullptr) break;
    }
    if (hit == nullptr) {
      out.push_back(arg);
      continue;
    }
    if (hit->first == "--task") {
      if (value != "fashion_mnist" && value != "text") {
        std::fprintf(stderr, "train_torchscript: usage error: --task '%s' is not one of fashion_mnist, text\n",
                     value.c_str());
        std::exit(2);
      }
      task = true;
      out.insert(out.end(), {"--set", std::string("data.format=") + (value == "text" ? "BYTES" : "IMAGES")});
    } else {
      out.insert(out.end(), {"--set", hit->second + "=" + value});
    }
  }
  if (!task) out.insert(out.end(), {"--set", "data.format=IMAGES"});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args = translate(argc, argv);
  std::vector<char*> argp;
  for (std::string& a : args) argp.push_back(a.data());
  argp.push_back(nullptr);
  const auto torchscript_only = [](const zeroshard::Config& config) {
    ZS_REQUIRE(zeroshard::model_kind(config.model().path()) == zeroshard::ModelKind::kTorchScript,
               zeroshard::UsageError, "--model FILE.pt is required: the TorchScript module to train (other models: "
               "zeroshard-train)");
    zeroshard::Program program = zeroshard::train_program(config);
    program.name = "train_torchscript";
    return program;
  };
  return zeroshard::run_main(static_cast<int>(args.size()), argp.data(), torchscript_only, zeroshard::train_main);
}
