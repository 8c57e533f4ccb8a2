#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fine-tuning where full fine-tuning does not fit: a GPT of 106M parameters (d_model 768, 15
# blocks) starts from pretrained weights under memory.limit_mib. Full fine-tuning runs out of memory
# (exit status 3 and zeroshard's out-of-memory report); LoRA over a base stored in NF4
# (precision.frozen_linear = NF4) trains under the same limit and prints its memory summary.
# The pretrained weights are exported by zeroshard (a base trained one step, then
# `zeroshard-ckpt export`); any safetensors, torch.save or TorchScript file of the same model loads
# the same way (docs/pretrained.md; README, "Fine-tune a model trained in Python").
#
#   examples/qlora_under_limit.sh [--dim 768] [--layers 15] [--heads 12] [--limit-mib 900]
#                                 [--steps 6] [--work DIR]
#
# One rank on CPU, every block activation-checkpointed, fp32 compute (no CPU bf16 arithmetic
# assumed; the NF4 base is dequantised to whatever the compute dtype is), 4 x 64 tokens per step,
# AdamW. Needs build/bin/train_gpt and build/bin/zeroshard-ckpt (scripts/setup.sh train_gpt
# zeroshard-ckpt). Environment: ZS_BUILD_DIR. CI runs it at --dim 256 --layers 4 --limit-mib 30
# (job_qlora_under_limit).
# Ends with "qlora_under_limit: full fine-tuning ran out of memory, LoRA + NF4 trained" or an
# error naming the step that went otherwise.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bin=${ZS_BUILD_DIR:-build}/bin
dim=768 layers=15 heads=12 limit=900 steps=6 work=${TMPDIR:-/tmp}/zeroshard-qlora
while [[ $# -gt 0 ]]; do
  case $1 in
    --dim) dim=$2 ;;
    --layers) layers=$2 ;;
    --heads) heads=$2 ;;
    --limit-mib) limit=$2 ;;
    --steps) steps=$2 ;;
    --work) work=$2 ;;
    *) echo "qlora_under_limit: error: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift 2
done
for tool in train_gpt zeroshard-ckpt; do
  [[ -x $bin/$tool ]] || { echo "qlora_under_limit: error: $bin/$tool is missing: scripts/setup.sh train_gpt zeroshard-ckpt" >&2; exit 2; }
done
mpi=(mpirun -n 1)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)
rm -rf "$work"
mkdir -p "$work"
common=(--set model.d_model="$dim" --set model.n_layer="$layers" --set model.n_head="$heads"
  --set model.seq_len=64 --set model.dropout=0 --set precision.param_dtype=FP32
  --set train.batch_size=4 --set train.log_interval=1 --set data.limit_eval_samples=32
  --set activation_checkpointing.enabled=true --set sample.tokens=0 --set logging.progress=LINES
  --set runtime.device=CPU)

echo "== 1. pretrained weights: a ${dim}-wide, ${layers}-block GPT trained one step, exported"
"${mpi[@]}" "$bin/train_gpt" "${common[@]}" --set train.steps=1 --set checkpoint.dir="$work/base" \
  --set checkpoint.interval_steps=1 | grep -E "parameters|done"
"$bin/zeroshard-ckpt" export "$work/base" "$work/base.safetensors" --dtype float32 | grep wrote
tune=("${common[@]}" --set model.init_from="$work/base.safetensors" --set train.steps="$steps"
  --set memory.limit_mib="$limit")

echo "== 2. full fine-tuning under memory.limit_mib = $limit"
rc=0
"${mpi[@]}" "$bin/train_gpt" "${tune[@]}" --set memory.snapshot_dir="$work" >"$work/full.log" 2>&1 || rc=$?
grep -E "out of memory on rank|over the limit" "$work/full.log" | head -n 2 || true
if [[ $rc -ne 3 ]]; then
  tail -n 20 "$work/full.log"
  echo "qlora_under_limit: error: full fine-tuning ended with exit status $rc, not 3 (out of memory):" \
    "raise --dim/--layers or lower --limit-mib so that it does not fit" >&2
  exit 1
fi

echo "== 3. LoRA (rank 8 on qkv, proj, fc, out) over an NF4 base under the same limit"
"${mpi[@]}" "$bin/train_gpt" "${tune[@]}" --set lora.rank=8 --set lora.alpha=16 \
  --set "lora.targets=*.qkv,*.proj,*.fc,*.out" --set precision.frozen_linear=NF4 --memory-summary \
  --set memory.snapshot_dir="$work" \
  >"$work/qlora.log" 2>&1 || {
  tail -n 40 "$work/qlora.log"
  echo "qlora_under_limit: error: LoRA + NF4 did not train under memory.limit_mib = $limit (log: $work/qlora.log)" >&2
  exit 1
}
grep -vE "^\[zs .* I\] (checkpoint|loaded)" "$work/qlora.log" | grep -E "parameters|LoRA|step [0-9]+/|validation|done|^\|" || true
echo "qlora_under_limit: full fine-tuning ran out of memory, LoRA + NF4 trained"
