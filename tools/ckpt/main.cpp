// SPDX-License-Identifier: Apache-2.0
// zeroshard-ckpt: inspect, verify and convert zeroshard checkpoints (no MPI, no engine).
//
//   zeroshard-ckpt info PATH                       the manifest, readably
//   zeroshard-ckpt verify PATH                     every file's size and CRC-32C, every section's
//   zeroshard-ckpt consolidate PATH OUT [--dtype float32|bfloat16]
//                                                  full unsharded state dict for torch::load
//   zeroshard-ckpt export PATH OUT [--format torch|safetensors] [--dtype bfloat16|float32] [--merge-lora]
//                                                  weights for inference (default bf16; safetensors
//                                                  when OUT ends in .safetensors) + OUT.config.txt;
//                                                  --merge-lora folds LoRA adapters into the weights
//   zeroshard-ckpt export HF_DIR|PATH OUT.gguf --format gguf [--dtype f32|f16|q8_0]
//                                                  a Hugging Face Llama-family directory, or a checkpoint
//                                                  of such a model (LoRA merged), as one GGUF file for
//                                                  llama.cpp (default f32)
//   [mpirun -n N] zeroshard-ckpt export PATH OUT_DIR --format hf [--dtype bf16|fp16|fp32]
//                 [--max-shard-size 5GB] [--merge-lora]
//                                                  a checkpoint of a Llama-family model as a Hugging Face
//                                                  directory, written by the ranks in parallel
//   zeroshard-ckpt export PATH OUT_DIR --format peft [--dtype fp32] [--base-model NAME]
//                                                  its LoRA adapters as a PEFT adapter directory
//
// PATH is a step directory (step-N) or a checkpoint root (its `latest`). Exit code 0 on success,
// 1 with a one-line error otherwise, 2 for a bad command line.

#include <c10/util/Exception.h>
#include <google/protobuf/text_format.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "zeroshard/checkpoint/checkpoint_format.h"
#include "zeroshard/base/cli.h"
#include "zeroshard/base/error.h"
#include "zeroshard/config/config.h"
#include "zeroshard/config/resolve.h"
#include "export_llama.h"

namespace zs = zeroshard;

namespace {

struct Args {
  std::string command, path, out, dtype, format, max_shard_size, base_model;
  bool merge_lora = false;
  std::string tokenizer;
};

// One spelling per dtype, whichever a user wrote: fp32, bf16, fp16, q8_0 ("" stays "").
std::string canonical_dtype(const std::string& d) {
  if (d == "float32" || d == "f32") return "fp32";
  if (d == "bfloat16") return "bf16";
  if (d == "float16" || d == "f16") return "fp16";
  return d;
}

// The GGUF writer's name of a canonical dtype (fp32 when none is given).
std::string gguf_dtype_name(const std::string& d) {
  if (d.empty() || d == "fp32") return "f32";
  return d == "fp16" ? "f16" : d;
}

// Returns false after --help/--version.
bool parse(int argc, char** argv, Args& a) {
  zs::cli::App app("zeroshard-ckpt", "Inspect, verify and convert zeroshard checkpoints (no MPI, no engine).");
  app.usage("zeroshard-ckpt info|verify PATH | consolidate|export PATH OUT [OPTIONS]");
  app.footer(
      "Commands:\n"
      "  info PATH              the manifest, readably\n"
      "  verify PATH            every file's size and CRC-32C, every section's\n"
      "  consolidate PATH OUT   the full unsharded state dict, a LibTorch archive for torch::load\n"
      "  export PATH OUT        weights for inference (safetensors when OUT ends in .safetensors) and\n"
      "                         OUT.config.txt, the run's config\n"
      "  export HF_DIR|PATH OUT --format gguf\n"
      "                         a Hugging Face Llama-family directory (config.json + weights), or a checkpoint\n"
      "                         of such a model (LoRA merged), as one GGUF file for llama.cpp (--dtype\n"
      "                         fp32, fp16 or q8_0); embeds the directory's tokenizer, or --tokenizer DIR's\n"
      "  [mpirun -n N] export PATH OUT_DIR --format hf [--max-shard-size 5GB] [--merge-lora]\n"
      "                         a checkpoint of a Llama-family model as a Hugging Face directory (config.json,\n"
      "                         safetensors shards and their index; without --dtype the config's\n"
      "                         torch_dtype, as Hugging Face saves), written by the ranks in parallel\n"
      "  export PATH OUT_DIR --format peft [--base-model NAME]\n"
      "                         its LoRA adapters as a PEFT adapter directory\n"
      "--dtype: fp32 (float32, f32), bf16 (bfloat16), fp16 (float16, f16) or, for gguf, q8_0; every\n"
      "format writes lossless fp32 by default, except --format hf (the config's torch_dtype).\n"
      "PATH: a checkpoint step directory or a checkpoint root (uses its `latest`).");
  app.add_choice("COMMAND", &a.command, {"info", "verify", "consolidate", "export"}, "what to do (below)")->required();
  app.add_text("PATH", &a.path, "checkpoint step directory or root", "")->required();
  app.add_text("OUT", &a.out, "output file (consolidate, export)", "");
  app.add_choice("--dtype", &a.dtype,
                 {"fp32", "bf16", "fp16", "q8_0", "float32", "bfloat16", "float16", "f32", "f16"},
                 "dtype of the written weights (default fp32; --format hf: the config's torch_dtype)");
  app.add_choice("--format", &a.format, {"torch", "safetensors", "gguf", "hf", "peft"},
                 "export's format (default: by OUT's name)");
  app.add_text("--max-shard-size", &a.max_shard_size, "--format hf: largest safetensors file (default 5GB)", "SIZE");
  app.add_text("--base-model", &a.base_model, "--format peft: base_model_name_or_path (default config.json's "
               "_name_or_path)", "NAME");
  app.add_text("--tokenizer", &a.tokenizer, "--format gguf: the tokenizer to embed (a directory with "
               "tokenizer.json or tokenizer.model; default: HF_DIR's own)", "DIR");
  app.add_flag("--merge-lora", &a.merge_lora,
               "export: fold LoRA adapters into their weights (W + B A alpha/r, the run's lora.*); safetensors only");
  app.then([&] {
    const bool writes = a.command == "consolidate" || a.command == "export";
    if (writes && a.out.empty()) app.fail(a.command + " needs OUT, the file to write");
    if (!writes && !a.out.empty()) app.fail(a.command + " takes only PATH; got '" + a.out + "' too");
    if (!writes && !a.dtype.empty()) app.fail("--dtype applies to consolidate and export");
    if (a.command != "export" && !a.format.empty()) app.fail("--format applies to export");
    if (a.command != "export" && a.merge_lora) app.fail("--merge-lora applies to export");
    a.dtype = canonical_dtype(a.dtype);
    if (a.format == "gguf" && a.dtype == "bf16") app.fail("--format gguf takes --dtype fp32, fp16 or q8_0");
    if (a.format != "gguf" && a.dtype == "q8_0") app.fail("--dtype q8_0 applies to --format gguf");
    const bool archive = a.format.empty() || a.format == "torch" || a.format == "safetensors";
    if (archive && a.dtype == "fp16") app.fail("--dtype fp16 applies to --format gguf, hf and peft");
    if (a.format == "gguf" && a.merge_lora) {
      app.fail("--merge-lora does not apply to --format gguf: a checkpoint's LoRA adapters are always merged into it");
    }
    if (a.format != "hf" && !a.max_shard_size.empty()) app.fail("--max-shard-size applies to --format hf");
    if (a.format != "peft" && !a.base_model.empty()) app.fail("--base-model applies to --format peft");
    if (a.format != "gguf" && !a.tokenizer.empty()) app.fail("--tokenizer applies to --format gguf");
    if (a.format == "peft" && a.merge_lora) app.fail("--merge-lora does not apply to --format peft (it writes the adapters)");
  });
  return app.parse(argc, argv);
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The LoRA scale (lora.alpha / lora.rank) of the run that saved the checkpoint at `path`, from the
// config it stored.
double lora_scale_of(const std::string& path) {
  const std::string dir = zs::ckpt::resolve_checkpoint(path);
  zs::Config cfg;
  ZS_REQUIRE(google::protobuf::TextFormat::ParseFromString(zs::ckpt::saved_run(dir).config_text, &cfg),
             zs::CheckpointError, "checkpoint '", dir,
             "': its run's config does not parse, so the LoRA scale (lora.alpha / lora.rank) is unknown");
  try {
    zs::validate_config(cfg);
  } catch (const zs::ConfigError& e) {
    ZS_THROW(zs::CheckpointError, "checkpoint '", dir, "': its run's config is not valid, so the LoRA scale is "
             "unknown: ", e.message());
  }
  const zs::lora::Options lora = zs::resolve(cfg).lora;
  ZS_REQUIRE(lora.rank > 0, zs::CheckpointError, "checkpoint '", dir, "' was saved by a run with lora.rank = ",
             lora.rank, ": it has no adapters to merge");
  return lora.alpha / lora.rank;
}

int run(const Args& a, char* argv0) {
  if (a.command == "info") {
    const std::string dir = zs::ckpt::resolve_checkpoint(a.path);
    std::printf("checkpoint      %s\n%s", dir.c_str(), zs::ckpt::describe_checkpoint(dir).c_str());
    return 0;
  }
  if (a.command == "verify") {
    std::printf("%s", zs::ckpt::verify_checkpoint(a.path).c_str());
    std::printf("checkpoint %s verified\n", zs::ckpt::resolve_checkpoint(a.path).c_str());
    return 0;
  }
  const bool exporting = a.command == "export";
  if (exporting && (a.format == "gguf" || a.format == "hf" || a.format == "peft")) {
    const std::string dtype = a.format == "gguf" ? gguf_dtype_name(a.dtype) : a.dtype;
    return zs_ckpt::export_llama(
        {a.path, a.out, a.format, dtype, a.max_shard_size, a.base_model, a.merge_lora, a.tokenizer}, argv0);
  }
  const c10::ScalarType dtype = a.dtype == "bf16" ? at::kBFloat16 : a.dtype == "fp16" ? at::kHalf : at::kFloat;
  const bool safetensors = exporting && (a.format.empty() ? ends_with(a.out, ".safetensors") : a.format == "safetensors");
  const std::string& out = a.out;
  ZS_REQUIRE(!a.merge_lora || safetensors, zs::UsageError, "--merge-lora writes safetensors: name OUT *.safetensors or "
             "pass --format safetensors");
  const double lora_scale = a.merge_lora ? lora_scale_of(a.path) : 0;
  const auto st = safetensors ? zs::ckpt::export_safetensors(a.path, out, dtype, lora_scale)
                              : zs::ckpt::consolidate(a.path, out, dtype);
  std::printf("wrote %s (%s): %lld parameter names, %lld elements (%s), %lld buffers; largest unit %.3f MiB\n",
              out.c_str(), safetensors ? "safetensors" : "LibTorch archive", static_cast<long long>(st.parameters),
              static_cast<long long>(st.elements), c10::toString(dtype), static_cast<long long>(st.buffers),
              st.peak_flat_bytes / 1048576.0);
  if (exporting) {
    const zs::ckpt::SavedRun run = zs::ckpt::saved_run(a.path);
    std::ofstream cfg(out + ".config.txt");
    cfg << "# zeroshard config of the run that saved step " << run.step << "\n" << run.config_text;
    ZS_REQUIRE(cfg.good(), zs::CheckpointError, "cannot write '", out, ".config.txt'");
    std::printf("wrote %s.config.txt\n", out.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Args args;
    if (!parse(argc, argv, args)) return 0;
    return run(args, argv[0]);
  } catch (const zs::UsageError& e) {
    std::fprintf(stderr, "zeroshard-ckpt: usage error: %s\n", e.message().c_str());
    return 2;
  } catch (const zs::Error& e) {
    std::fprintf(stderr, "zeroshard-ckpt: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zeroshard-ckpt: %s\n", e.what());
  }
  return 1;
}
