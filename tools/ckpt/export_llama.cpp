// SPDX-License-Identifier: Apache-2.0
// zeroshard-ckpt export --format hf|peft|gguf of a Llama-family checkpoint (export_llama.h). Under
// mpirun the ranks form a Session: --format hf writes in parallel, the others run on rank 0 while
// the rest wait, so no two processes write the same file.

#include "export_llama.h"

#include <ATen/ops/full.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "zeroshard/base/error.h"
#include "zeroshard/comm/communicator.h"
#include "zeroshard/comm/launch_env.h"
#include "zeroshard/core/session.h"
#include "zeroshard/models/gguf_export.h"
#include "zeroshard/models/hf_export.h"

namespace zs = zeroshard;
namespace zm = zeroshard::models;

namespace zs_ckpt {
namespace {

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

const char* short_name(c10::ScalarType t) { return t == c10::kBFloat16 ? "bf16" : t == c10::kHalf ? "fp16" : "fp32"; }

void export_hf(const LlamaExportArgs& a, zs::Communicator* comm) {
  zm::HfExportOptions o;
  if (!a.dtype.empty()) o.dtype = zm::hf_dtype_from_string(a.dtype);
  if (!a.max_shard_size.empty()) o.max_shard_bytes = zm::parse_shard_size(a.max_shard_size);
  o.merge_lora = a.merge_lora;
  const zm::HfExportReport r = zm::export_hf_directory(a.path, a.out, o, comm);
  const int ranks = comm == nullptr ? 1 : comm->size();
  if (comm == nullptr || comm->rank() == 0) {
    std::printf("wrote %s (Hugging Face directory, %s%s): %lld tensors, %lld bytes in %d file%s, by %d rank%s\n",
                a.out.c_str(), short_name(r.dtype), a.merge_lora ? ", LoRA merged" : "",
                static_cast<long long>(r.tensors), static_cast<long long>(r.total_size), r.files,
                r.files == 1 ? "" : "s", ranks, ranks == 1 ? "" : "s");
  }
}

void export_peft(const LlamaExportArgs& a) {
  zm::PeftExportOptions o;
  if (!a.dtype.empty()) o.dtype = zm::hf_dtype_from_string(a.dtype);
  o.base_model_name_or_path = a.base_model;
  const zm::PeftExportReport r = zm::export_peft_adapter(a.path, a.out, o);
  const std::string targets = r.target_regex.empty() ? "[" + join(r.target_modules) + "]" : "'" + r.target_regex + "'";
  std::printf("wrote %s (PEFT LoRA adapter, %s): %lld layers, r %lld, lora_alpha %g, target_modules %s\n",
              a.out.c_str(), short_name(o.dtype), static_cast<long long>(r.layers), static_cast<long long>(r.rank),
              r.alpha, targets.c_str());
}

// From a Hugging Face directory (its own tokenizer unless --tokenizer) or a checkpoint (LoRA merged;
// the checkpoint records config.json's text but no tokenizer, so only --tokenizer gives one).
void export_gguf(const LlamaExportArgs& a) {
  zm::GgufExportOptions o;
  o.dtype = zm::gguf_dtype_from_string(a.dtype.empty() ? "f32" : a.dtype);
  o.tokenizer = a.tokenizer;
  const bool hf = is_hf_directory(a.path);
  const zm::GgufExportReport r = hf ? zm::export_gguf(a.path, a.out, o) : zm::export_gguf_from_checkpoint(a.path, a.out, o);
  if (r.tokenizer.empty()) {
    std::fprintf(stderr, "zeroshard-ckpt: %s has no tokenizer.json or tokenizer.model%s: %s carries a byte-level "
                 "vocabulary (ids 0-255 are bytes), not the model's tokenizer\n",
                 a.path.c_str(), hf ? "" : " (pass --tokenizer DIR)", a.out.c_str());
  }
  std::printf("wrote %s (GGUF, architecture %s, %s%s): %lld tensors, %lld bytes\n", a.out.c_str(),
              r.architecture.c_str(), a.dtype.empty() ? "f32" : a.dtype.c_str(), hf ? "" : ", LoRA merged",
              static_cast<long long>(r.tensors), static_cast<long long>(r.bytes));
  if (!r.tokenizer.empty()) std::printf("tokenizer from %s\n", r.tokenizer.c_str());
}

}  // namespace

bool is_hf_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path + "/config.json", ec);
}

int export_llama(const LlamaExportArgs& a, char* argv0) {
  std::unique_ptr<zs::Session> session;
  if (zs::detect_launch_env().world_size != 1) {  // started by mpirun (or another launcher)
    char* argv[] = {argv0, nullptr};
    session = std::make_unique<zs::Session>(1, argv);
  }
  zs::Communicator* comm = session ? session->world().get() : nullptr;
  if (a.format == "hf") {
    export_hf(a, comm);
    return 0;
  }
  const bool root = comm == nullptr || comm->rank() == 0;
  std::string error;
  if (root) {
    try {
      a.format == "peft" ? export_peft(a) : export_gguf(a);
    } catch (const zs::Error& e) {
      if (comm == nullptr) throw;
      error = e.message();
    }
  }
  if (comm != nullptr) {  // the other ranks wait, and learn whether it worked
    at::Tensor failed = at::full({1}, error.empty() ? 0.0f : 1.0f);
    comm->broadcast(failed, 0, "zs.ckpt.export")->wait();
    ZS_REQUIRE(failed.item<float>() == 0.0f, zs::CheckpointError, root ? error : "the export failed on rank 0");
  }
  return 0;
}

}  // namespace zs_ckpt
