#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Behaviour-preservation check for refactors: trains the tiny GPT (train_gpt, fp32 unless a case
# says otherwise) under a matrix of settings -- every strategy at 1, 2 and 4 ranks, mixed precision,
# offload of everything to NVMe, LoRA over an NF4 base, a run resumed from a checkpoint -- exports
# each run's final parameters to safetensors (fp32) and either records them or compares them with a
# recorded set, element by element. A refactor that changes no behaviour gives max |diff| = 0 in
# every case. Not in CI: about ten minutes on 2 cores.
#
#   scripts/check-golden.sh record DIR    # before the change
#   scripts/check-golden.sh compare DIR   # after it: prints max |diff| per case, exit 1 on any difference
#
# Environment: ZS_BUILD_DIR (default build); ZS_GOLDEN_CASES (a regex: only the matching cases).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if (($# != 2)) || [[ $1 != record && $1 != compare ]]; then
  echo "check-golden: error: usage: scripts/check-golden.sh record|compare DIR" >&2
  exit 2
fi
mode=$1
golden=$2
build=${ZS_BUILD_DIR:-build}
bin=$build/bin
for b in train_gpt zeroshard-ckpt; do
  [[ -x $bin/$b ]] || { echo "check-golden: error: $bin/$b is not built" >&2; exit 1; }
done
mkdir -p "$golden"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1)
base=(--config examples/configs/gpt_tiny.textproto --set train.steps=6 --set precision.param_dtype=FP32
      --set sample.tokens=0 --set train.log_interval=6 --set data.limit_eval_samples=16 --set data.num_workers=0
      --set activation_checkpointing.enabled=false --set optimizer.grad_clip_norm=1.0)

# name | ranks | extra arguments
cases=(
  "full_np1|1|"
  "full_np2|2|"
  "full_np4|4|"
  "gradop_np2|2|--set sharding.strategy=SHARD_GRAD_OP"
  "gradop_np4|4|--set sharding.strategy=SHARD_GRAD_OP"
  "noshard_np2|2|--set sharding.strategy=NO_SHARD"
  "hybrid_np4|4|--set sharding.strategy=HYBRID_SHARD --set sharding.hybrid_group_size=2"
  "ckpt_np2|2|--set activation_checkpointing.enabled=true"
  "bf16_np2|2|--set precision.param_dtype=BF16"
  "autocast_np2|2|--set precision.param_dtype=BF16 --set precision.autocast=true"
  "microbatch_np2|2|--set train.micro_batches=2"
  "sgd_np2|2|--set optimizer.type=SGD --set optimizer.momentum=0.9 --set optimizer.lr=0.05"
  "adam_cpu_np1|1|--set offload.optimizer=CPU"
  "nvme_all_np2|2|--set offload.optimizer=NVME --set offload.params=NVME --set offload.grads=NVME --set offload.nvme_path=@NVME@"
  "nvme_bf16copy_np2|2|--set offload.optimizer=NVME --set offload.params=NVME --set offload.nvme_path=@NVME@ --set precision.param_dtype=BF16 --set offload.keep_param_dtype_shard=true"
  "lora_nf4_np2|2|--set lora.rank=4 --set lora.targets=*.qkv,*.fc --set precision.frozen_linear=NF4"
  "resume_np2|2|@RESUME@"
)

status=0
for c in "${cases[@]}"; do
  IFS='|' read -r name ranks extra <<<"$c"
  if [[ -n ${ZS_GOLDEN_CASES:-} && ! $name =~ $ZS_GOLDEN_CASES ]]; then continue; fi
  dir=$work/$name
  mkdir -p "$dir/nvme"
  extra=${extra//@NVME@/$dir/nvme}
  log=$dir/log.txt
  start=$SECONDS
  if [[ $extra == @RESUME@ ]]; then
    # 3 steps, a checkpoint, then a second process resumes and runs to 6.
    "${mpi[@]}" -n "$ranks" "$bin/train_gpt" "${base[@]}" --set train.steps=3 --set checkpoint.dir="$dir/ckpt" >"$log" 2>&1
    "${mpi[@]}" -n "$ranks" "$bin/train_gpt" "${base[@]}" --set checkpoint.dir="$dir/ckpt" --resume >>"$log" 2>&1
  else
    # shellcheck disable=SC2086  # $extra is a list of arguments
    "${mpi[@]}" -n "$ranks" "$bin/train_gpt" "${base[@]}" $extra --set checkpoint.dir="$dir/ckpt" >"$log" 2>&1
  fi
  "$bin/zeroshard-ckpt" export "$dir/ckpt" "$dir/final.safetensors" --dtype float32 >>"$log" 2>&1
  if [[ $mode == record ]]; then
    cp "$dir/final.safetensors" "$golden/$name.safetensors"
    echo "check-golden: recorded $name ($((SECONDS - start)) s)"
  else
    if ! /usr/bin/python3 - "$golden/$name.safetensors" "$dir/final.safetensors" "$name" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        dt = {"F32": np.float32, "BF16": np.uint16, "I64": np.int64, "F16": np.float16}[v["dtype"]]
        out[k] = np.frombuffer(data[a:b], dtype=dt).reshape(v["shape"])
    return out
want, got, name = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
if set(want) != set(got):
    print(f"check-golden: {name}: tensor names differ: {sorted(set(want) ^ set(got))}")
    sys.exit(1)
worst, where = 0.0, ""
for k in sorted(want):
    a, b = want[k].astype(np.float64), got[k].astype(np.float64)
    if a.shape != b.shape:
        print(f"check-golden: {name}: {k}: shape {a.shape} vs {b.shape}"); sys.exit(1)
    nan_mismatch = np.isnan(a) != np.isnan(b)
    if nan_mismatch.any():
        print(f"check-golden: {name}: {k}: NaN positions differ"); sys.exit(1)
    d = np.abs(np.nan_to_num(a) - np.nan_to_num(b)).max() if a.size else 0.0
    if d > worst:
        worst, where = d, k
print(f"check-golden: {name}: {len(want)} tensors, max |diff| = {worst:g}" + (f" (in {where})" if worst else ""))
sys.exit(1 if worst != 0 else 0)
PY
    then status=1; fi
  fi
done
exit $status
