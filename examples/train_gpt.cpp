// SPDX-License-Identifier: Apache-2.0
// train_gpt: a GPT-style byte-level language model trained with zeroshard on the fortunes corpus,
// then sampled. It is zeroshard-train (zeroshard/train/train_program.h) for the built-in GPT only:
// model.path and data.format are refused here.
//
//   mpirun -n 2 build/bin/train_gpt [--config FILE] [--set key=value ...] [--metrics-out FILE]
//                                   [--tensorboard DIR] [--check-loss-decreases]   (--help lists all)
//
// Everything comes from the config (docs/config.md): model.* (shape), data.* (corpus, loader),
// train.*, optimizer.*, scheduler.*, precision.*, activation_checkpointing.*, sharding.*, lora.*,
// offload.*, checkpoint.*, sample.* (the text generated at the end). The steps:
//   1. read the corpus (a missing one is an error naming the path and the Debian package) and hold
//      out data.val_fraction of every file for validation;
//   2. build the model under a ShardedInit: each block is initialised and sharded as it is built
//      (with lora.rank > 0: each block's LoRA adapters added as it is sharded, the rest frozen);
//   3. evaluate the validation loss, train, evaluate again (and every train.eval_interval);
//   4. generate sample.tokens bytes: every rank runs the sharded forward, rank 0 draws and prints.
// --check-loss-decreases makes the exit status 1 unless the final validation loss is below 90% of
// the initial one (CI uses it).

#include <algorithm>
#include <string>

#include "zeroshard/train/train_program.h"

int main(int argc, char** argv) {
  const auto gpt_only = [](const zeroshard::Config& config) {
    zeroshard::Program program = zeroshard::train_program(config);
    program.name = "train_gpt";
    auto& r = program.reads;
    r.erase(std::remove_if(r.begin(), r.end(), [](const std::string& k) { return k == "model.path" || k == "data.format"; }),
            r.end());
    return program;
  };
  return zeroshard::run_main(argc, argv, gpt_only, zeroshard::train_main);
}
