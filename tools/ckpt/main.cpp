// zeroshard-ckpt: inspect, verify and convert zeroshard checkpoints (no MPI, no engine).
//
//   zeroshard-ckpt info PATH                       the manifest, readably
//   zeroshard-ckpt verify PATH                     every file's size and CRC-32C, every section's
//   zeroshard-ckpt consolidate PATH OUT [--dtype float32|bfloat16]
//                                                  full unsharded state dict for torch::load
//   zeroshard-ckpt export PATH OUT [--format torch|safetensors] [--dtype bfloat16|float32]
//                                                  weights for inference (default bf16; safetensors
//                                                  when OUT ends in .safetensors) + OUT.config.txt
//
// PATH is a step directory (step-N) or a checkpoint root (its `latest`). Exit code 0 on success,
// 1 with a one-line error otherwise.

#include <c10/util/Exception.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "zeroshard/sharding/checkpoint_format.h"
#include "zeroshard/base/error.h"

namespace zs = zeroshard;

namespace {

constexpr const char* kUsage =
    "usage: zeroshard-ckpt info PATH\n"
    "       zeroshard-ckpt verify PATH\n"
    "       zeroshard-ckpt consolidate PATH OUT [--dtype float32|bfloat16]\n"
    "       zeroshard-ckpt export PATH OUT [--format torch|safetensors] [--dtype bfloat16|float32]\n"
    "PATH: a checkpoint step directory or a checkpoint root (uses its `latest`)\n";

int run(const std::vector<std::string>& a) {
  ZS_REQUIRE(a.size() >= 2, zs::UsageError, "missing command\n", kUsage);
  const std::string& cmd = a[0];
  const std::string& path = a[1];
  if (cmd == "info" && a.size() == 2) {
    const std::string dir = zs::ckpt::resolve_checkpoint(path);
    std::printf("checkpoint      %s\n%s", dir.c_str(), zs::ckpt::describe_checkpoint(dir).c_str());
    return 0;
  }
  if (cmd == "verify" && a.size() == 2) {
    std::printf("%s", zs::ckpt::verify_checkpoint(path).c_str());
    std::printf("checkpoint %s verified\n", zs::ckpt::resolve_checkpoint(path).c_str());
    return 0;
  }
  if ((cmd == "consolidate" || cmd == "export") && a.size() >= 3) {
    const std::string& out = a[2];
    c10::ScalarType dtype = cmd == "export" ? at::kBFloat16 : at::kFloat;
    bool safetensors = cmd == "export" && out.size() > 12 && out.compare(out.size() - 12, 12, ".safetensors") == 0;
    for (size_t i = 3; i < a.size(); ++i) {
      if (a[i] == "--dtype" && i + 1 < a.size()) {
        const std::string& d = a[++i];
        ZS_REQUIRE(d == "float32" || d == "bfloat16", zs::UsageError, "--dtype ", d, ": allowed float32, bfloat16");
        dtype = d == "float32" ? at::kFloat : at::kBFloat16;
      } else if (cmd == "export" && a[i] == "--format" && i + 1 < a.size()) {
        const std::string& f = a[++i];
        ZS_REQUIRE(f == "torch" || f == "safetensors", zs::UsageError, "--format ", f, ": allowed torch, safetensors");
        safetensors = f == "safetensors";
      } else {
        ZS_THROW(zs::UsageError, "unexpected argument '", a[i], "'\n", kUsage);
      }
    }
    const auto st = safetensors ? zs::ckpt::export_safetensors(path, out, dtype) : zs::ckpt::consolidate(path, out, dtype);
    std::printf("wrote %s (%s): %lld parameter names, %lld elements (%s), %lld buffers; largest unit %.3f MiB\n",
                out.c_str(), safetensors ? "safetensors" : "LibTorch archive", static_cast<long long>(st.parameters),
                static_cast<long long>(st.elements), c10::toString(dtype), static_cast<long long>(st.buffers),
                st.peak_flat_bytes / 1048576.0);
    if (cmd == "export") {
      const zs::ckpt::SavedRun run = zs::ckpt::saved_run(path);
      std::ofstream cfg(out + ".config.txt");
      cfg << "# zeroshard config of the run that saved step " << run.step << "\n" << run.config_text;
      ZS_REQUIRE(cfg.good(), zs::CheckpointError, "cannot write '", out, ".config.txt'");
      std::printf("wrote %s.config.txt\n", out.c_str());
    }
    return 0;
  }
  ZS_THROW(zs::UsageError, "bad command line\n", kUsage);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return run(args);
  } catch (const zs::Error& e) {
    std::fprintf(stderr, "zeroshard-ckpt: %s\n", e.message().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zeroshard-ckpt: %s\n", e.what());
  }
  return 1;
}
