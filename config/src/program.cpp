// SPDX-License-Identifier: Apache-2.0
// Program: which config keys a program acts on, and the key lists of the library's parts
// (main.h). load_run refuses a key that was set but is in none of a program's lists.

#include <algorithm>
#include <string>
#include <vector>

#include "zeroshard/config/main.h"

namespace zeroshard {

Program::Program(std::string program_name, std::initializer_list<std::vector<std::string>> key_lists)
    : name(std::move(program_name)), reads(keys::session()) {
  for (const auto& list : key_lists) {
    for (const std::string& key : list) {
      if (!acts_on(key)) reads.push_back(key);  // once, and not under a section already listed
    }
  }
}

bool Program::acts_on(const std::string& path) const {
  return std::any_of(reads.begin(), reads.end(), [&](const std::string& r) {
    return path == r || (path.size() > r.size() && path.compare(0, r.size(), r) == 0 && path[r.size()] == '.');
  });
}

namespace keys {

const std::vector<std::string>& session() {
  static const std::vector<std::string> k = {"runtime", "comm", "logging.level", "logging.ranks", "memory"};
  return k;
}

const std::vector<std::string>& engine() {
  static const std::vector<std::string> k = {
      "sharding",          "precision.param_dtype", "precision.reduce_dtype", "precision.buffer_dtype",
      "precision.output_dtype", "precision.cast_forward_inputs", "precision.autocast", "offload.params",
      "offload.grads",     "offload.keep_param_dtype_shard", "offload.nvme_path", "offload.pin_memory",
      "offload.block_size", "offload.queue_depth", "offload.io_backend"};
  return k;
}

const std::vector<std::string>& adapters() {
  static const std::vector<std::string> k = {"lora", "precision.frozen_linear"};
  return k;
}

const std::vector<std::string>& trainer() {
  static const std::vector<std::string> k = {
      "optimizer",          "scheduler",          "precision.loss_scale", "offload.optimizer",
      "offload.nvme_path",  "offload.pin_memory", "offload.block_size",   "offload.queue_depth",
      "offload.io_backend", "offload.buffer_count", "offload.nvme_generations", "offload.overlap_step", "checkpoint",
      "train",              "data.num_workers",   "data.prefetch_batches", "data.shuffle",
      "data.limit_train_samples", "data.limit_eval_samples", "data.pin_memory", "logging.progress",
      "logging.tensorboard_dir", "model.init_from", "model.init_strict",
      "model.init_strip_prefix", "model.init_add_prefix", "model.init_rename"};
  return k;
}

const std::vector<std::string>& all() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> out;
    const auto* d = Config::descriptor();
    for (int i = 0; i < d->field_count(); ++i) out.push_back(d->field(i)->name());
    return out;
  }();
  return k;
}

}  // namespace keys

}  // namespace zeroshard
