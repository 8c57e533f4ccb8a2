// SPDX-License-Identifier: Apache-2.0
#pragma once
// Tiny Llama-family models for the tests, written in Hugging Face's layout: config.json and the
// weights as safetensors (one file, or shards with model.safetensors.index.json) by SafetensorsWriter.

#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "zeroshard/models/llama_config.h"

namespace zs_llama_test {

using State = std::vector<std::pair<std::string, at::Tensor>>;

// A small model of the family: GQA (4 heads, 2 key/value heads), rope_theta 500000 unless set.
struct TinySpec {
  std::string model_type = "llama";
  int64_t vocab = 320, hidden = 64, intermediate = 96, layers = 3, heads = 4, kv_heads = 2;
  int64_t max_positions = 256;
  double rope_theta = 500000, rms_eps = 1e-5;
  bool tied = false, attention_bias = false, mlp_bias = false;
  std::string rope_scaling = "null";  // JSON
  std::string extra;                  // more JSON members, e.g. "\"sliding_window\": 64"
  std::string config_json() const;
  zeroshard::models::LlamaConfig config() const;
};

// Random weights under Hugging Face's names: q, k and the head N(0, 0.25) (attention sharp enough
// that a wrong rotation shows), the rest N(0, 0.1), embeddings N(0, 0.5), norms 1 + N(0, 0.1),
// biases N(0, 0.1). Deterministic in `seed`.
State random_state(const zeroshard::models::LlamaConfig& c, uint64_t seed);

// Writes `dir` (created) with config.json and `state` stored as `dtype`: one model.safetensors
// when `shards` is 1, else model-0000k-of-0000n.safetensors and the index.
void write_hf_dir(const std::string& dir, const std::string& config_json, const State& state, int shards,
                  c10::ScalarType dtype = c10::kFloat);

// Ids in [0, 256) (the byte-level vocabulary), deterministic in `seed`.
std::vector<int64_t> random_ids(int64_t n, uint64_t seed);

// The per-head inverse of the q/k row permutation the GGUF export applies (a GGUF written from
// the result holds Hugging Face's rows unpermuted: the no-permutation control).
at::Tensor unpermute_rows(const at::Tensor& w, int64_t heads);

}  // namespace zs_llama_test
