// SPDX-License-Identifier: Apache-2.0
// zeroshard-train: trains the built-in GPT, a Llama-family Hugging Face model or a TorchScript file
// on text bytes, JSONL, token shards or images, with every config key honoured or refused
// (docs/train.md; the program is zeroshard/train/train_program.h).
//
//   mpirun -n 2 zeroshard-train [--config FILE.textproto|FILE.json] [--deepspeed ds_config.json]
//       [--set key=value ...] [--metrics-out FILE] [--resume[=auto]] ...   (--help lists all)

#include "zeroshard/train/train_program.h"

int main(int argc, char** argv) { return zeroshard::run_main(argc, argv, zeroshard::train_program, zeroshard::train_main); }
