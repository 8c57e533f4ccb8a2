#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The main job on its built-in default: builds zeroshard if needed (scripts/setup.sh), then trains
# the byte-level GPT example across 2 ranks on CPU, FULL_SHARD with every block activation-
# checkpointed and bf16 compute, on the fortunes corpus for 2-3 minutes on 2 cores
# (examples/configs/gpt_demo.textproto), and prints text sampled from the trained model.
# On a CPU without native bf16 arithmetic (x86 without avx512_bf16 or amx_bf16, Arm without bf16)
# LibTorch emulates bf16 matmuls 7-14x slower than fp32 ones: there the demo computes in fp32 and
# says so (--set precision.param_dtype=BF16 asks for bf16 anyway).
# Extra arguments go to train_gpt and win over the demo's settings, e.g. --set train.steps=100 or
# --metrics-out run.jsonl (the demo's --config is examples/configs/gpt_demo.textproto; for another
# config file run build/bin/train_gpt under mpirun directly, as the README shows).
# Environment: ZS_BUILD_DIR (default build), ZS_RANKS (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Set-up shows its progress; only train_gpt and what it links are built (the tests and benchmarks
# come with scripts/test.sh).
./scripts/setup.sh train_gpt
build_dir=${ZS_BUILD_DIR:-build}
ranks=${ZS_RANKS:-2}
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
# mpirun gives every rank a pseudo-terminal, so the ranks cannot see where this output goes: draw
# the progress bar only when it is a terminal.
progress=LINES
[[ -t 1 ]] && progress=BAR
dtype=()
if ! grep -qwE 'avx512_bf16|amx_bf16|bf16' /proc/cpuinfo 2>/dev/null; then
  echo "demo: this CPU has no native bf16 arithmetic (no avx512_bf16, amx_bf16 or bf16 in /proc/cpuinfo):" \
    "computing in fp32 instead of the config's bf16 (--set precision.param_dtype=BF16 to force bf16)"
  dtype=(--set precision.param_dtype=FP32)
fi
exec mpirun -n "$ranks" "${mpi_flags[@]}" "$build_dir/bin/train_gpt" \
  --config examples/configs/gpt_demo.textproto --set runtime.device=CPU --set logging.progress="$progress" \
  "${dtype[@]}" "$@"
