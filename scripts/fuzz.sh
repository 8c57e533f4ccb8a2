#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fuzzes every parser of outside bytes with libFuzzer under AddressSanitizer and UBSan: tensor
# files (safetensors, torch.save zip + pickle, TorchScript archives), checkpoint manifests,
# configs (textproto and JSON), tokenizer.json files, JSONL records and chat templates (the
# harnesses are fuzz/*.cpp). Builds the libraries with clang and the sanitizers in a folder of its
# own, seeds each harness with real files (the shipped configs; tensor files written by Debian's
# PyTorch; a checkpoint's manifest from the normal build's train_gpt; the test suite's tokenizer and
# chat template), runs each for SECONDS, and prints per harness the inputs run and the findings.
# Not in CI: the build alone takes tens of minutes on 2 cores.
#
#   scripts/fuzz.sh [SECONDS]        # default 60 per harness
#
# Environment: ZS_FUZZ_BUILD (default build-fuzz), ZS_BUILD_DIR (the normal build, for seeds; default
# build). Exit status 1 when a harness found something (its inputs under ZS_FUZZ_BUILD/findings/).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
secs=${1:-60}
fb=${ZS_FUZZ_BUILD:-build-fuzz}
build=${ZS_BUILD_DIR:-build}
harnesses=(tensor_file manifest config tokenizer records)
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

# ---- seeds ----
seeds=$fb/seeds
rm -rf "$seeds"
rm -rf "$fb/findings"  # this run's findings only (the corpus grows from run to run)
for h in "${harnesses[@]}"; do mkdir -p "$seeds/$h" "$fb/corpus/$h" "$fb/findings/$h"; done
for f in examples/configs/*.textproto; do
  { printf '\0'; cat "$f"; } > "$seeds/config/$(basename "$f")"
done
printf '\1{"train": {"steps": 3}, "optimizer": {"paramGroups": [{"match": "*.bias", "weightDecay": 0}]}}' \
  > "$seeds/config/groups.json"
/usr/bin/python3 - "$seeds/tensor_file" <<'PY'
import json, struct, sys, torch
out = sys.argv[1]
state = {"w": torch.randn(3, 4), "b": torch.arange(5, dtype=torch.int64), "h": torch.ones(2, 2).half()}
torch.save(state, out + "/state.pt")
torch.save({"model": state, "step": 3, "opt": {"state": {0: {"exp_avg": torch.zeros(4)}}}}, out + "/nested.pt")
torch.jit.script(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU())).save(out + "/module.pt")
header, blob = {}, b""
for name, t in state.items():
    data = t.contiguous().numpy().tobytes()
    dtype = {torch.float32: "F32", torch.int64: "I64", torch.float16: "F16"}[t.dtype]
    header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [len(blob), len(blob) + len(data)]}
    blob += data
header["__metadata__"] = {"format": "pt"}
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
open(out + "/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + blob)
PY
if [[ -x $build/bin/train_gpt ]]; then
  ck=$(mktemp -d)
  "$build/bin/train_gpt" --config examples/configs/gpt_tiny.textproto --set train.steps=1 --set sample.tokens=0 \
    --set data.limit_eval_samples=8 --set checkpoint.dir="$ck" --set logging.progress=LINES >/dev/null 2>&1 \
    && cp "$ck"/step-*/manifest.pb "$seeds/manifest/" || echo "fuzz: (no manifest seed: train_gpt failed)"
  rm -rf "$ck"
fi
fixture=$(mktemp -d)
/usr/bin/python3 tests/python/finetune_llama_check.py fixture --out "$fixture" >/dev/null
cp "$fixture/model/tokenizer.json" "$seeds/tokenizer/"
template=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["chat_template"])' \
  "$fixture/model/tokenizer_config.json")
head -n 1 "$fixture/chat.jsonl" > "$seeds/records/chat"
printf '%s' "$template" >> "$seeds/records/chat"
printf '{"prompt": "Add 2 and 3: ", "completion": "5"}\n{{ bos_token }}{%% for m in messages %%}{{ m.role | upper }}: {{ m.content }}\n{%% endfor %%}' \
  > "$seeds/records/plain"
rm -rf "$fixture"

# ---- the runs ----
export ASAN_OPTIONS=detect_leaks=0:detect_container_overflow=0:detect_odr_violation=0:allocator_may_return_null=1
export UBSAN_OPTIONS=print_stacktrace=1
found=0
for h in "${harnesses[@]}"; do
  log=$fb/fuzz_$h.log
  status=0
  "$fb/bin/fuzz_$h" -max_total_time="$secs" -rss_limit_mb=4096 -timeout=20 -max_len=65536 -print_final_stats=1 \
    -artifact_prefix="$fb/findings/$h/" "$fb/corpus/$h" "$seeds/$h" >"$log" 2>&1 || status=$?
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
