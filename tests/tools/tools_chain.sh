#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The user-side tools chained on what the other tools really write, as a new user runs
# them: an example trains at CI size and writes its metrics and checkpoints; zeroshard-plot charts
# the metrics; check_png decodes every chart; zeroshard-ckpt reads the checkpoints;
# zeroshard-estimate predicts what the job measured. Registered by tests/tools/CMakeLists.txt.
#
#   tools_chain.sh CASE BIN_DIR TEST_BIN_DIR SOURCE_DIR WORK_DIR MPIRUN
#     CASE: gpt | fashion_mnist | estimate | lora | qlora
#
# Prints "tools_chain CASE: all passed" at the end; any failed check exits 1 naming it.
set -euo pipefail

case_name=$1 bin=$2 test_bin=$3 src=$4 work=$5/$1 mpirun=$6
configs=$src/examples/configs
size=800x450

fail() {
  echo "tools_chain $case_name: FAILED: $*" >&2
  exit 1
}
# contains TEXT REGEX WHAT: fail unless TEXT matches the extended REGEX.
contains() {
  grep -Eq -- "$2" <<<"$1" || fail "$3 (no match for '$2')"
}
# run CMD...: echo it, run it, keep its output (stdout and stderr) in $out; fail on a non-zero exit.
run() {
  echo "+ $*"
  local rc=0
  out=$("$@" 2>&1) || rc=$?
  printf '%s\n' "$out"
  [[ $rc -eq 0 ]] || fail "exit status $rc: $*"
}
mpi2() { run "$mpirun" -n 2 --oversubscribe "$@"; }
# refused REGEX CMD...: CMD must exit non-zero with output matching the extended REGEX.
refused() {
  local regex=$1 rc=0
  shift
  echo "+ $* (must fail)"
  out=$("$@" 2>&1) || rc=$?
  printf '%s\n' "$out"
  [[ $rc -ne 0 ]] || fail "did not fail: $*"
  contains "$out" "$regex" "the error of: $*"
}

# plot_and_check METRICS NAME SERIES_PATTERNS...: zeroshard-plot the file; every pattern must be
# among the lines it prints; then each chart must decode and show its expected number of series
# (the argument list "chart=count ...", in $charts).
plot_and_check() {
  local metrics=$1
  shift
  run "$bin/zeroshard-plot" "$metrics" --out "$work" --prefix plot --size "$size"
  local plot_out=$out pattern chart count
  for pattern in "$@"; do contains "$plot_out" "$pattern" "zeroshard-plot's series"; done
  for chart in $charts; do
    count=${chart#*=}
    chart=${chart%=*}
    contains "$plot_out" "wrote $work/plot_$chart.png" "zeroshard-plot did not write the $chart chart"
    [[ -s $work/plot_$chart.png ]] || fail "$work/plot_$chart.png is empty"
    run "$test_bin/check_png" "$work/plot_$chart.png" "$size" "$count"
  done
}

rm -rf "$work"
mkdir -p "$work"
cd "$work"

case $case_name in
  gpt)
    # 6 steps, evaluation before, at step 3 and at the end; checkpoints at steps 3 and 6.
    mpi2 "$bin/train_gpt" --config "$configs/gpt_tiny.textproto" --set train.steps=6 --set train.eval_interval=3 \
      --set sample.tokens=0 --set logging.progress=LINES --set checkpoint.dir="$work/ckpt" \
      --set checkpoint.interval_steps=3 --metrics-out "$work/gpt.jsonl"
    train_out=$out
    # The metrics: an evaluation line first, 6 step lines with "mem" and "mem_peak", a summary last.
    [[ $(head -n 1 gpt.jsonl) == '{"eval":"val_loss","step":0,'* ]] || fail "gpt.jsonl does not start with an eval line"
    [[ $(grep -c '"mem_peak":{' gpt.jsonl) -eq 6 ]] || fail "gpt.jsonl: not 6 step lines with mem_peak"
    [[ $(tail -n 1 gpt.jsonl) == '{"summary":true,'* ]] || fail "gpt.jsonl does not end with the summary"
    # Memory: the transient categories are 0 after each step and up during it; the chart shows
    # the peaks (6 categories: the offload ones stay at 0 and are left out).
    charts="loss=2 lr=1 throughput=1 memory=6 comm=1"
    plot_and_check gpt.jsonl "gpt.jsonl: 6 steps \(1 to 6\), 1 evaluation series, with summary" \
      "^  train loss: 6 points$" "^  val_loss: 3 points$" "^  tokens_per_s: 6 points$" \
      "^  gathered params: 6 points$" "^  unsharded grads: 6 points$" "^  comm_bytes: 6 points$"
    # The checkpoints, through zeroshard-ckpt.
    run "$bin/zeroshard-ckpt" info "$work/ckpt"
    contains "$out" "step-0*6" "info does not name the latest checkpoint (step 6)"
    contains "$out" "world size +2|world_size +2|2 rank" "info does not give the world size 2"
    run "$bin/zeroshard-ckpt" verify "$work/ckpt"
    contains "$out" "checkpoint .*step-0*6 verified" "verify"
    run "$bin/zeroshard-ckpt" verify "$work/ckpt/step-00000003"
    run "$bin/zeroshard-ckpt" consolidate "$work/ckpt" "$work/full.pt"
    contains "$out" "wrote $work/full.pt \(LibTorch archive\): [0-9]+ parameter names, [0-9]+ elements \(Float\)" "consolidate"
    elements=$(sed -nE 's/.* ([0-9]+) elements.*/\1/p' <<<"$out")
    params=$(sed -nE 's/.*sharding [0-9]+ unit\(s\), ([0-9]+) parameters.*/\1/p' <<<"$train_out" | head -n 1)
    [[ -n $params ]] || fail "train_gpt did not print its parameter count"
    [[ $elements -eq $params ]] || fail "consolidate wrote $elements elements; the model has $params parameters"
    [[ $(stat -c %s full.pt) -ge $((4 * elements)) ]] || fail "full.pt is smaller than $elements fp32 values"
    run "$bin/zeroshard-ckpt" export "$work/ckpt" "$work/model.pt"
    contains "$out" "wrote $work/model.pt \(LibTorch archive\): .* $elements elements \(Float\)" "export"
    [[ $(stat -c %s model.pt) -ge $((2 * elements)) ]] || fail "model.pt is smaller than $elements bf16 values"
    grep -q "n_layer: 2" model.pt.config.txt || fail "model.pt.config.txt lacks the run's model section"
    ;;
  fashion_mnist)
    # 20 steps (1280 images, 64 per step), test accuracy before, at step 10 and at the end.
    mpi2 "$bin/train_fashion_mnist" --config "$configs/fashion_mnist_tiny.textproto" \
      --set data.limit_train_samples=1280 --set data.limit_eval_samples=500 --set train.eval_interval=10 \
      --set logging.progress=LINES --metrics-out "$work/fmnist.jsonl"
    charts="loss=3 lr=1 throughput=1 memory=6 comm=1"
    plot_and_check fmnist.jsonl "fmnist.jsonl: 20 steps \(1 to 20\), 2 evaluation series, with summary" \
      "^  train loss: 20 points$" "^  test_loss: 3 points$" "^  test_accuracy: 3 points, right axis$" \
      "^  samples_per_s: 20 points$" \
      "^  gathered params: 20 points$"
    ;;
  estimate)
    # zeroshard-estimate against the same job measured, like with like. The job: train_gpt with
    # the example's CI config (gpt_tiny: 2 blocks, d_model 64, 4 heads, context 64, vocab 256, bf16,
    # every block checkpointed, AdamW, FULL_SHARD) at 2 ranks, with a global batch of 256 (128 per
    # rank) so that activations, not fixed costs, make most of the peak.
    #  1. Model state, within 10% per category (test_estimate's tolerance): the engine's own
    #     accounting on rank 0, from the metrics file's last step line: sharded params and
    #     optimizer state after the step ("mem"); gradient shards, gathered params, unsharded
    #     grads and comm buffers at their peak during the step ("mem_peak") -- against the
    #     estimate's configured categories.
    #  2. The allocator's peak, within 15% (test_estimate's tolerance for activations): the
    #     tracking allocator's host peak that --memory-trial reports (peak_bytes, highest over the
    #     ranks, two optimizer steps), against the estimate's device peak (model state with its
    #     transients) + its activation estimate for this micro-batch with checkpointing + the
    #     dataset the job holds in memory (the corpus's train and validation bytes, one byte per
    #     token, as the job prints them). Not included on either side: the loader's prefetched
    #     batches and LibTorch's own temporaries (under 2% here). Measured on the 2-core CI VM:
    #     41.1 MB against 37.5 MB predicted, +9.7%; the activations of this bf16 config measure
    #     about 11% above the formula at every batch size tried (64 to 256 per rank), hence 15%.
    shape=(--gpt "2,64,256,64,4" --world 2 --micro-batch 128)
    job=(--config "$configs/gpt_tiny.textproto" --set train.batch_size=256)
    mpi2 "$bin/train_gpt" "${job[@]}" --set train.steps=3 --set sample.tokens=0 --set logging.progress=LINES \
      --metrics-out "$work/gpt.jsonl"
    data_bytes=$(sed -nE 's/.* ([0-9]+) train bytes .* ([0-9]+) validation bytes.*/\1 \2/p' <<<"$out" |
      awk '{print $1 + $2}')
    [[ -n $data_bytes ]] || fail "train_gpt did not print its corpus size"
    mpi2 "$bin/train_gpt" "${job[@]}" --memory-trial
    peak=$(sed -nE 's/.*zeroshard-memory-trial: fits micro_batch_size=128 peak_bytes=([0-9]+).*/\1/p' <<<"$out")
    [[ -n $peak ]] || fail "the memory trial printed no peak for micro-batch 128"
    # The job's config file; its batch goes in as --micro-batch (zeroshard-estimate refuses a --set
    # of train.batch_size, a key it does not act on).
    run "$bin/zeroshard-estimate" "${shape[@]}" --config "$configs/gpt_tiny.textproto"
    estimate=$out
    # predicted NAME: the configured setup's bytes for the category NAME.
    predicted() { awk -v name="$1" 'index($0, "  " name " ") == 1 { print $(NF - 1) }' <<<"$estimate"; }
    # measured KEY CATEGORY: bytes of CATEGORY in the "mem" or "mem_peak" object of the last step.
    last_step=$(grep '"loss":' gpt.jsonl | tail -n 1)
    measured() { sed -nE "s/.*\"$1\":\\{[^}]*\"$2\":([0-9]+).*/\\1/p" <<<"$last_step"; }
    # within WHAT MEASURED PREDICTED TOLERANCE: |measured - predicted| <= tolerance x predicted.
    within() {
      awk -v what="$1" -v m="$2" -v p="$3" -v tol="$4" 'BEGIN {
        d = m > p ? m - p : p - m
        printf "%-28s measured %10d  predicted %10d  %+6.1f%%  (tolerance %d%%)\n", what, m, p, 100 * (m - p) / p, 100 * tol
        exit !(p > 0 && d <= tol * p) }' || fail "$1: measured $2 bytes, predicted $3 (over $4 apart)"
    }
    for pair in "mem:sharded params:sharded params" "mem:optimizer state:optimizer state" \
      "mem_peak:gradient shards:gradient shards" "mem_peak:gathered params:gathered params (peak)" \
      "mem_peak:unsharded grads:unsharded grads (peak)" "mem_peak:comm buffers:comm buffers (peak)"; do
      IFS=: read -r key category row <<<"$pair"
      m=$(measured "$key" "$category")
      p=$(predicted "$row")
      [[ -n $m && -n $p ]] || fail "no figure for '$category' (measured '$m', predicted '$p')"
      within "$category" "$m" "$p" 0.10
    done
    device_peak=$(predicted "device peak")
    activations=$(awk '/^\* with checkpointing/ { printf "%d", $4 * 1048576 }' <<<"$estimate")
    [[ -n $device_peak && -n $activations ]] || fail "the estimate printed no device peak or activations"
    echo "predicted host peak: device peak $device_peak + activations $activations + dataset $data_bytes"
    within "allocator peak" "$peak" $((device_peak + activations + data_bytes)) 0.15
    ;;
  lora)
    # LoRA fine-tuning from pretrained weights and the merged export: a base trains 6 steps and is
    # exported (fp32 safetensors); LoRA adapters on qkv and fc train 6 steps from it, checkpointed;
    # zeroshard-ckpt export --merge-lora folds them into the weights; the merged file, loaded into
    # the model without adapters, must give the validation loss the LoRA model ended with.
    common=(--config "$configs/gpt_tiny.textproto" --set sample.tokens=0 --set logging.progress=LINES)
    mpi2 "$bin/train_gpt" "${common[@]}" --set train.steps=6 --set checkpoint.dir="$work/base" \
      --set checkpoint.interval_steps=6
    params=$(sed -nE 's/.*sharding [0-9]+ unit\(s\), ([0-9]+) parameters.*/\1/p' <<<"$out" | head -n 1)
    run "$bin/zeroshard-ckpt" export "$work/base" "$work/base.safetensors" --dtype float32
    mpi2 "$bin/train_gpt" "${common[@]}" --set train.steps=6 --set lora.rank=4 --set lora.alpha=8 \
      --set "lora.targets=*.qkv,*.fc" --set model.init_from="$work/base.safetensors" \
      --set checkpoint.dir="$work/lora" --set checkpoint.interval_steps=6 --metrics-out "$work/lora.jsonl"
    contains "$out" "LoRA: rank 4, alpha 8, dropout 0 on 4 layers \(h0.qkv, ...\); the rest frozen" "the LoRA line"
    contains "$out" "loaded .*base.safetensors" "the base weights were not loaded"
    trainable=$(sed -nE 's/.*parameters \(([0-9]+) trainable\).*/\1/p' <<<"$out" | head -n 1)
    [[ -n $params && -n $trainable && $trainable -gt 0 && $((trainable * 10)) -lt $params ]] ||
      fail "LoRA trains $trainable of the model's $params parameters; expected only the adapters (< 10%)"
    refused "checkpoint '.*base.*' was saved by a run with lora.rank = 0: it has no adapters to merge" \
      "$bin/zeroshard-ckpt" export "$work/base" "$work/none.safetensors" --merge-lora
    refused "--merge-lora writes safetensors: name OUT \*.safetensors or pass --format safetensors" \
      "$bin/zeroshard-ckpt" export "$work/lora" "$work/merged.pt" --merge-lora
    run "$bin/zeroshard-ckpt" export "$work/lora" "$work/merged.safetensors" --dtype float32 --merge-lora
    contains "$out" "wrote $work/merged.safetensors \(safetensors\): [0-9]+ parameter names, $params elements" \
      "the merged export holds other than the base model's $params parameters"
    mpi2 "$bin/train_gpt" "${common[@]}" --set train.steps=1 --set optimizer.lr=0 \
      --set model.init_from="$work/merged.safetensors" --metrics-out "$work/merged.jsonl"
    lora_loss=$(grep '"eval":"val_loss"' lora.jsonl | tail -n 1 | sed -E 's/.*"value":([^,}]*).*/\1/')
    merged_loss=$(grep '"eval":"val_loss"' merged.jsonl | head -n 1 | sed -E 's/.*"value":([^,}]*).*/\1/')
    echo "validation loss: LoRA model $lora_loss, merged weights without adapters $merged_loss"
    awk -v a="$lora_loss" -v b="$merged_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * a) }' ||
      fail "the merged weights give validation loss $merged_loss, the LoRA model $lora_loss"
    ;;
  qlora)
    # QLoRA: LoRA over a base whose Linear weights are stored in NF4 (precision.frozen_linear)
    # against LoRA over the same base kept whole, both from the same pretrained weights (a base
    # trained 30 steps), bf16 compute: the held-out loss must end within 2%. The NF4 run's
    # checkpoint exports merged weights (dequantised base + B A alpha/r) that, loaded into the
    # model without adapters, give the validation loss the NF4 run ended with.
    common=(--config "$configs/gpt_tiny.textproto" --set sample.tokens=0 --set logging.progress=LINES)
    mpi2 "$bin/train_gpt" "${common[@]}" --set train.steps=30 --set checkpoint.dir="$work/base" \
      --set checkpoint.interval_steps=30
    run "$bin/zeroshard-ckpt" export "$work/base" "$work/base.safetensors" --dtype float32
    lora=(--set train.steps=20 --set lora.rank=4 --set lora.alpha=8 --set "lora.targets=*.qkv,*.fc"
      --set model.init_from="$work/base.safetensors")
    mpi2 "$bin/train_gpt" "${common[@]}" "${lora[@]}" --metrics-out "$work/full.jsonl"
    mpi2 "$bin/train_gpt" "${common[@]}" "${lora[@]}" --set precision.frozen_linear=NF4 \
      --set checkpoint.dir="$work/nf4" --set checkpoint.interval_steps=20 --metrics-out "$work/nf4.jsonl"
    contains "$out" "parameters \([0-9]+ trainable, [0-9]+ frozen ones encoded as nf4\)" "the NF4 line"
    full_loss=$(grep '"eval":"val_loss"' full.jsonl | tail -n 1 | sed -E 's/.*"value":([^,}]*).*/\1/')
    nf4_loss=$(grep '"eval":"val_loss"' nf4.jsonl | tail -n 1 | sed -E 's/.*"value":([^,}]*).*/\1/')
    echo "final validation loss: LoRA over the whole base $full_loss, over the NF4 base $nf4_loss"
    awk -v a="$full_loss" -v b="$nf4_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.02 * a) }' ||
      fail "LoRA over the NF4 base ends at validation loss $nf4_loss, over the whole base $full_loss (> 2% apart)"
    run "$bin/zeroshard-ckpt" export "$work/nf4" "$work/merged.safetensors" --dtype float32 --merge-lora
    mpi2 "$bin/train_gpt" "${common[@]}" --set train.steps=1 --set optimizer.lr=0 \
      --set model.init_from="$work/merged.safetensors" --metrics-out "$work/merged.jsonl"
    merged_loss=$(grep '"eval":"val_loss"' merged.jsonl | head -n 1 | sed -E 's/.*"value":([^,}]*).*/\1/')
    echo "validation loss: NF4 LoRA model $nf4_loss, its merged weights without adapters $merged_loss"
    awk -v a="$nf4_loss" -v b="$merged_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-4 * a) }' ||
      fail "the merged weights give validation loss $merged_loss, the NF4 LoRA model $nf4_loss"
    ;;
  *)
    fail "unknown case '$case_name' (gpt, fashion_mnist, estimate, lora, qlora)"
    ;;
esac
echo "tools_chain $case_name: all passed"
