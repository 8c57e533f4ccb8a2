#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fuzzes every parser of outside bytes with libFuzzer under AddressSanitizer and UBSan: tensor
# files (safetensors, torch.save zip + pickle, TorchScript archives), checkpoint manifests, whole
# checkpoints (manifest and rank files, read as the exporters read them), configs (textproto and
# JSON), tokenizer.json files, JSONL records and chat templates (the harnesses are fuzz/*.cpp).
# Builds the libraries with clang and the sanitizers in a folder of its own, starts each harness
# from the committed seeds (fuzz/seeds/, written by fuzz/make_seeds.sh) and the corpus earlier runs
# grew, runs each for SECONDS, and prints per harness the inputs run and the findings.
# Not in CI (the build alone takes tens of minutes on 2 cores); the test suite replays the seeds
# and fixed mutations of them through the same harnesses (fuzz_replay_*).
#
#   scripts/fuzz.sh [SECONDS]        # default 60 per harness
#
# Environment: ZS_FUZZ_BUILD (default build-fuzz). Exit status 1 when a harness found something (its
# inputs under ZS_FUZZ_BUILD/findings/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-60}
fb=${ZS_FUZZ_BUILD:-build-fuzz}
harnesses=(tensor_file manifest checkpoint config tokenizer records)
command -v clang++ >/dev/null || { echo "fuzz: error: clang++ is not installed (apt-get install clang)" >&2; exit 1; }
san="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
started=$(date +%s)
cmake -S . -B "$fb" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DZS_FUZZ=ON -DZS_BUILD_TESTS=OFF -DZS_BUILD_BENCH=OFF -DZS_WITH_NCCL=OFF \
  -DCMAKE_C_FLAGS="$san -fsanitize=fuzzer-no-link" -DCMAKE_CXX_FLAGS="$san -fsanitize=fuzzer-no-link" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" >"$fb.configure.log" 2>&1 \
  || { cat "$fb.configure.log"; exit 1; }
ninja -C "$fb" "${harnesses[@]/#/fuzz_}" >"$fb.build.log" 2>&1 || { tail -50 "$fb.build.log"; exit 1; }
built=$(date +%s)
echo "fuzz: built in $((built - started)) s"

# ---- seeds: the committed ones (fuzz/make_seeds.sh writes them) ----
rm -rf "$fb/findings"  # this run's findings only (the corpus grows from run to run)
for h in "${harnesses[@]}"; do
  [[ -d fuzz/seeds/$h ]] || { echo "fuzz: error: no seeds in fuzz/seeds/$h (run fuzz/make_seeds.sh)" >&2; exit 1; }
  mkdir -p "$fb/corpus/$h" "$fb/findings/$h"
done

# ---- the runs ----
export ASAN_OPTIONS=detect_leaks=0:detect_container_overflow=0:detect_odr_violation=0:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
found=0
for h in "${harnesses[@]}"; do
  log=$fb/fuzz_$h.log
  status=0
  "$fb/bin/fuzz_$h" -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$fb/findings/$h/" "$fb/corpus/$h" "fuzz/seeds/$h" >"$log" 2>&1 || status=$?
  runs=$(grep -o "stat::number_of_executed_units: *[0-9]*" "$log" | grep -o "[0-9]*$" || echo "?")
  corpus=$(find "$fb/corpus/$h" -type f | wc -l)
  crashes=$(find "$fb/findings/$h" -type f | wc -l)
  echo "fuzz: $h: $runs inputs in ${secs} s, corpus $corpus, findings $crashes (exit $status; $log)"
  if ((status != 0 || crashes > 0)); then
    found=1
    grep -m 5 -E "ERROR: AddressSanitizer|runtime error|deadly signal|uncaught|==ERROR" "$log" || tail -20 "$log"
  fi
done
echo "fuzz: done in $(( $(date +%s) - started )) s"
exit $found
