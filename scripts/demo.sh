#!/usr/bin/env bash
# The main job on its built-in default: builds zeroshard if needed (scripts/setup.sh), then trains
# the byte-level GPT example across 2 ranks on CPU, FULL_SHARD with every block activation-
# checkpointed and bf16 compute, on the fortunes corpus for 2-3 minutes on 2 cores
# (examples/configs/gpt_demo.textproto), and prints text sampled from the trained model.
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
exec mpirun -n "$ranks" "${mpi_flags[@]}" "$build_dir/bin/train_gpt" \
  --config examples/configs/gpt_demo.textproto --set runtime.device=CPU --set logging.progress="$progress" "$@"
