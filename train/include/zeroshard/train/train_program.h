// SPDX-License-Identifier: Apache-2.0
#pragma once
// zeroshard-train: one program that trains every model zeroshard builds on every dataset it reads,
// with every key of the config honoured or refused (docs/train.md).
//
//   int main(int argc, char** argv) { return zeroshard::run_main(argc, argv, zeroshard::train_program, zeroshard::train_main); }
//
// The model (model.path):
//   ""                        the built-in GPT (model.n_layer, d_model, ...; LoRA and NF4 by lora.*,
//                             precision.frozen_linear), on text bytes;
//   a Hugging Face directory  a Llama-family model (Llama, Mistral, Qwen2) with its weights, trained
//                             on JSONL records or token shards with its own tokenizer and chat
//                             template (LoRA and NF4 as for the GPT); checkpoints record its config.json
//                             and adapters, so `zeroshard-ckpt export --format hf|peft|gguf` works;
//   a TorchScript file        that module, sharded at model.units / model.unit_types, on Fashion-MNIST
//                             images (logits [N, 10]) or text bytes (logits [N, T, >= 256]).
// The data (data.format, AUTO by default: bytes for the GPT, JSONL or token shards by data.path for a
// Hugging Face model; a TorchScript model needs it set). Language models hold out
// data.val_fraction for validation and generate sample.tokens tokens at the end.
// Which keys a run acts on depends on the model and the data: train_program gives the Program for a
// config, and load_run refuses every key that was set and is not in it (naming the key).

#include <string>

#include "zeroshard/config/main.h"

namespace zeroshard {

enum class ModelKind { kGpt, kHuggingFace, kTorchScript };

// model.path's kind: "" the GPT, a directory with config.json a Hugging Face model, a file a
// TorchScript module. ConfigError naming model.path for a path that is none of them.
ModelKind model_kind(const std::string& path);
// data.format with AUTO resolved for `kind` (JSONL or TOKEN_SHARDS by what data.path is). ConfigError
// naming data.format (or data.path) for data the model cannot train on.
DataFormat resolved_data_format(ModelKind kind, const DataOptions& data);

// The keys zeroshard-train acts on for `config` (its model kind and data format). ConfigError as above.
Program train_program(const Config& config);

// The run, under run_main (its Program: train_program). Collective.
int train_main(Session& s, const Run& run);

}  // namespace zeroshard
