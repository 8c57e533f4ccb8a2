#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Writes the harnesses' seeds into fuzz/seeds/<harness>/ (committed; run again when a format
# changes): the shipped configs; tensor files written by Debian's PyTorch; checkpoints of a tiny GPT
# written by the build's train_gpt (one rank with SGD, two ranks with AdamW, LoRA) packed as the
# checkpoint harness reads them; the test suite's tokenizer and chat template.
#
#   fuzz/make_seeds.sh          # ZS_BUILD_DIR: the build with train_gpt (default build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${ZS_BUILD_DIR:-build}
seeds=fuzz/seeds
harnesses=(tensor_file manifest checkpoint config tokenizer records)
[[ -x $build/bin/train_gpt ]] || { echo "make_seeds: error: $build/bin/train_gpt is not built" >&2; exit 1; }
rm -rf "$seeds"
for h in "${harnesses[@]}"; do mkdir -p "$seeds/$h"; done

# config: a selector byte (0 textproto, 1 JSON), then the text.
for f in examples/configs/*.textproto; do
  { printf '\0'; cat "$f"; } > "$seeds/config/$(basename "$f")"
done
printf '\1{"train": {"steps": 3}, "optimizer": {"paramGroups": [{"match": "*.bias", "weightDecay": 0}]}}' \
  > "$seeds/config/groups.json"

/usr/bin/python3 - "$seeds/tensor_file" <<'PY'
import json, struct, sys, torch
out = sys.argv[1]
torch.manual_seed(0)
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

# Checkpoints: manifest.pb alone for the manifest harness; for the checkpoint harness (its input:
# fuzz/fuzz_checkpoint.cpp) a flags byte (low bit: merge LoRA), the manifest and every rank file,
# each but the last after its u32 length.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tiny=(--config examples/configs/gpt_tiny.textproto --set model.n_layer=1 --set model.n_head=2 --set model.d_model=8
      --set model.seq_len=8 --set train.steps=1 --set train.batch_size=2 --set sample.tokens=0
      --set data.limit_eval_samples=2 --set logging.progress=LINES)
checkpoint_seed() {  # NAME RANKS FLAGS ARGS...
  local name=$1 ranks=$2 flags=$3 ck
  shift 3
  ck=$(mktemp -d)
  local launch=("$build/bin/train_gpt")
  ((ranks > 1)) && launch=(mpirun -n "$ranks" --oversubscribe "$build/bin/train_gpt")
  "${launch[@]}" "${tiny[@]}" --set checkpoint.dir="$ck" "$@" >/dev/null
  local steps=("$ck"/step-*)
  local step=${steps[0]}
  cp "$step/manifest.pb" "$seeds/manifest/$name.pb"
  /usr/bin/python3 - "$step" "$seeds/checkpoint/$name" "$flags" "$ranks" <<'PY'
import struct, sys
step, out, flags, ranks = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = open(step + "/manifest.pb", "rb").read()
files = [open(f"{step}/rank-{r}.zsr", "rb").read() for r in range(ranks)]
blob = bytes([flags]) + struct.pack("<I", len(m)) + m
for f in files[:-1]:
    blob += struct.pack("<I", len(f)) + f
open(out, "wb").write(blob + files[-1])
PY
  rm -rf "$ck"
}
checkpoint_seed sgd 1 0 --set optimizer.type=SGD --set optimizer.momentum=0
checkpoint_seed adamw_np2 2 0
checkpoint_seed lora 1 1 --set lora.rank=2 --set optimizer.type=SGD --set optimizer.momentum=0

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
du -sh "$seeds"/*
