#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# scripts/netsim.sh end to end (tests/tools/CMakeLists.txt); skips (exit 77) where network
# namespaces cannot be made (not root, or a container that forbids them):
#   1. train_gpt at 2 ranks in 2 namespaces over a 1 Gb/s link, FULL_SHARD: the job completes, and
#      each node sent over its link at least what its collectives had to send ((N-1)/N of the
#      bytes the engine's counters report per step, summed over the steps): the traffic went over
#      the limited link, not through shared memory;
#   2. 4 ranks in 2 namespaces (2 per node), HYBRID_SHARD with a shard group per node, against
#      FULL_SHARD over all 4 with each collective run over all ranks at once (comm.node_stages =
#      false): parameters are gathered inside the node, so fewer bytes cross the links (the nodes
#      are seen as nodes);
#   3. FULL_SHARD with its collectives in two stages (comm.node_stages, the default: between the
#      nodes and inside them) against case 2's: its links carry fewer bytes; and what a step adds
#      to a link (the difference between a 16-step and a 4-step run, over 12) is within 10% of
#      what zeroshard-estimate --link-gbps predicts for the same model and layout;
#   4. FULL_SHARD with int8-quantized parameter gathers (sharding.gather_quantization) against
#      exact ones: the link carries below 0.85 of the bytes (bf16 gathers halved, the reduction not).
#   5. FULL_SHARD with int8 gradient reduce-scatters (sharding.reduce_quantization; all-to-all in
#      two stages) at 2 x 2 ranks against case 3's exact ones: the links carry below 0.8 of the
#      bytes, and what a step adds is within 10% of zeroshard-estimate's prediction for it.
#   6. FULL_SHARD with hpZ's groups per node (sharding.hpz_group_size = 0) at 2 x 2 ranks against
#      case 3's: backward's gathers stay inside the node, so the links carry below 0.85 of the
#      bytes, what a step adds is within 10% of zeroshard-estimate's prediction for it, and the
#      losses are bitwise case 3's.
#   0. netsim.sh's refusals of bad options (before any namespace is made).
# Usage: netsim_smoke.sh NETSIM TRAIN_GPT CONFIG WORKDIR ESTIMATE
set -eu
netsim=$1 train_gpt=$2 config=$3 work=$4 estimate=$5
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAILED: $*" >&2; exit 1; }

# run NAME NODES RANKS_PER_NODE [--set ...]: train_gpt (STEPS steps, default 4) over the simulated
# links; exit 77 passes on.
run() {
  name=$1 nodes=$2 per_node=$3
  shift 3
  status=0
  "$netsim" --nodes "$nodes" --ranks-per-node "$per_node" --rate 1gbit --stats "$work/$name.links.json" -- \
    "$train_gpt" --config "$config" --set train.steps="${STEPS:-4}" --set train.log_interval=1 --set sample.tokens=0 \
    --set data.limit_eval_samples=16 --set logging.progress=LINES --metrics-out "$work/$name.metrics.jsonl" "$@" \
    > "$work/$name.log" 2>&1 || status=$?
  [ "$status" = 77 ] && { cat "$work/$name.log"; echo "SKIPPED: network namespaces cannot be made here"; exit 77; }
  [ "$status" = 0 ] || fail "$name: exit status $status: $(tail -n 30 "$work/$name.log")"
}

# Bytes the engine's counters say one rank's collectives moved over the steps, and what the
# busiest node sent and received over its link.
figures() {
  /usr/bin/python3 - "$work/$1.metrics.jsonl" "$work/$1.links.json" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
comm = sum(r["comm_bytes"] for r in rows if "loss" in r and "eval" not in r and "summary" not in r)
links = json.load(open(sys.argv[2]))["links"]
print(comm, min(l["sent_bytes"] for l in links), max(l["sent_bytes"] for l in links))
PY
}

# busiest NAME: the bytes the busier node sent over its link in run NAME.
busiest() {
  figures "$1" | cut -d' ' -f3
}

echo "== 0. options netsim.sh refuses, each with its reason"
# refused EXPECTED_TEXT ARGS...: netsim.sh exits with status 2 and says EXPECTED_TEXT.
refused() {
  want=$1
  shift
  status=0
  "$netsim" "$@" > "$work/refused.log" 2>&1 || status=$?
  if [ "$status" != 2 ] || ! grep -qF -- "$want" "$work/refused.log"; then
    fail "netsim.sh $*: exit status $status, expected 2 and '$want': $(cat "$work/refused.log")"
  fi
}
refused "--nodes must be 1..32, got '0'" --nodes 0 -- true
refused "--ranks-per-node must be >= 1, got 'two'" --ranks-per-node two -- true
refused "--rate must be 0 or a tc rate such as 1gbit or 100mbit, got '1gbps'" --rate 1gbps -- true
refused "--delay must be 0 or a tc time such as 0.1ms or 50us, got '5'" --delay 5 -- true
refused "--delay needs a --rate" --rate 0 --delay 1ms -- true
refused "unknown option '--link'" --link 1gbit -- true
refused "no command after --" --nodes 2 --
echo "ok"

echo "== 1. FULL_SHARD, 2 ranks in 2 namespaces"
run full2 2 1
read -r comm sent_min _ <<END
$(figures full2)
END
[ "$comm" -gt 0 ] || fail "the metrics report no collective bytes"
# 2 ranks: each sends half of every all-gather's output and of every reduce-scatter's input.
python3 -c "import sys; sys.exit(0 if $sent_min >= 0.5 * $comm else 1)" \
  || fail "a node sent $sent_min bytes over its link, less than half of the $comm bytes its collectives moved"
echo "ok: collectives moved $comm bytes per rank; the quieter node sent $sent_min bytes over its link"

echo "== 2. HYBRID_SHARD (a shard group per node) against FULL_SHARD, 2 x 2 ranks"
run flat4 2 2 --set comm.node_stages=false
run hybrid4 2 2 --set sharding.strategy=HYBRID_SHARD
flat_sent=$(busiest flat4)
hybrid_sent=$(busiest hybrid4)
grep -q "HYBRID_SHARD" "$work/hybrid4.log" || fail "the hybrid run does not name its strategy: $(head -n 20 "$work/hybrid4.log")"
[ "$hybrid_sent" -lt "$flat_sent" ] \
  || fail "HYBRID_SHARD sent $hybrid_sent bytes over a link, FULL_SHARD $flat_sent: the nodes were not seen"
echo "ok: busiest link sent $flat_sent bytes under FULL_SHARD, $hybrid_sent under HYBRID_SHARD"

echo "== 3. FULL_SHARD's collectives in two stages against one over all ranks, 2 x 2 ranks"
run full4 2 2
full_sent=$(busiest full4)
grep -q "reduce-scatters in two stages over 2 nodes x 2 ranks" "$work/full4.log" \
  || fail "the 2 x 2 FULL_SHARD run does not say it runs in two stages: $(head -n 20 "$work/full4.log")"
grep -q "in two stages" "$work/flat4.log" && fail "comm.node_stages=false still runs in two stages"
# Per parameter and step the bf16 gathers (2 x 2 bytes) cross whole in one call and halved in two
# stages; the fp32 reduce-scatter (4 bytes) crosses 3/4 in the ring, 1/2 in stages: about 0.57.
python3 -c "import sys; sys.exit(0 if $full_sent < 0.8 * $flat_sent else 1)" \
  || fail "two stages sent $full_sent bytes over a link, one collective $flat_sent: not below 0.8 of them"
echo "ok: busiest link sent $flat_sent bytes with one collective over all ranks, $full_sent in two stages"
STEPS=16 run full4_16 2 2
full16_sent=$(busiest full4_16)
# The configuration's GPT (the model keys it sets, the schema's defaults for the rest) and its
# estimate: the FULL_SHARD row of the communication table.
shape=$(/usr/bin/python3 -c "
import re, sys
text = open(sys.argv[1]).read()
get = lambda k, d: int((re.findall(r'\\b' + k + r':\\s*(\\d+)', text) or [d])[0])
print(f\"{get('n_layer', 0)},{get('d_model', 0)},{get('vocab_size', 256)},{get('seq_len', 0)},{get('n_head', 0)}\")
" "$config")
# predicted [--set ...]: the FULL_SHARD row of zeroshard-estimate's communication table, in bytes.
predicted() {
  "$estimate" --config "$config" --gpt "$shape" --world 4 --ranks-per-node 2 --link-gbps 1 "$@" > "$work/estimate.txt" \
    || fail "zeroshard-estimate: $(cat "$work/estimate.txt")"
  /usr/bin/python3 -c "
import sys
rows = open(sys.argv[1]).read().split('communication per step')[1].splitlines()
print(int(float(next(r for r in rows if 'FULL_SHARD' in r).split()[-4]) * 1e6))
" "$work/estimate.txt" || fail "no FULL_SHARD row in the estimate: $(cat "$work/estimate.txt")"
}
predicted=$(predicted)
python3 -c "import sys; d = ($full16_sent - $full_sent) / 12; sys.exit(0 if abs(d - $predicted) <= 0.1 * $predicted else 1)" \
  || fail "a step added $(( (full16_sent - full_sent) / 12 )) bytes to the busiest link, the estimate says $predicted"
echo "ok: a step adds $(( (full16_sent - full_sent) / 12 )) bytes to the busiest link; zeroshard-estimate: $predicted"

echo "== 4. FULL_SHARD with int8 parameter gathers against exact ones, 2 ranks in 2 namespaces"
# 16 steps each, so that what a run sends once (the initial weights, the evaluations) counts less.
STEPS=16 run exact16 2 1
STEPS=16 run int8 2 1 --set sharding.gather_quantization=INT8
exact_sent=$(busiest exact16)
int8_sent=$(busiest int8)
# The bf16 gathers (2 bytes per parameter, twice a step) become int8 (1.06 bytes), the fp32
# reduce-scatter (4 bytes) stays: about 0.77 of the bytes; exact gathers would send as many (1.0).
python3 -c "import sys; sys.exit(0 if $int8_sent < 0.85 * $exact_sent else 1)" \
  || fail "int8 gathers sent $int8_sent bytes over the link, exact ones $exact_sent: not below 0.85 of them"
echo "ok: the link carried $exact_sent bytes with exact gathers, $int8_sent with int8 ones"

echo "== 5. FULL_SHARD with int8 gradient reduce-scatters, 2 x 2 ranks"
run qgrad4 2 2 --set sharding.reduce_quantization=INT8
STEPS=16 run qgrad4_16 2 2 --set sharding.reduce_quantization=INT8
qgrad_sent=$(busiest qgrad4)
qgrad16_sent=$(busiest qgrad4_16)
# The fp32 reduce-scatter's 2 bytes per parameter over a link become 0.53 (int8 and its scales,
# halved by the stages), the bf16 gathers' 2 stay: about 0.63 of the bytes.
python3 -c "import sys; sys.exit(0 if $qgrad16_sent < 0.8 * $full16_sent else 1)" \
  || fail "int8 reduce-scatters sent $qgrad16_sent bytes over a link, exact ones $full16_sent: not below 0.8 of them"
predicted_q=$(predicted --set sharding.reduce_quantization=INT8)
python3 -c "import sys; d = ($qgrad16_sent - $qgrad_sent) / 12; sys.exit(0 if abs(d - $predicted_q) <= 0.1 * $predicted_q else 1)" \
  || fail "a step with int8 reduce-scatters added $(( (qgrad16_sent - qgrad_sent) / 12 )) bytes to the busiest link, the estimate says $predicted_q"
echo "ok: int8 reduce-scatters: $qgrad16_sent bytes over 16 steps against $full16_sent exact; a step adds $(( (qgrad16_sent - qgrad_sent) / 12 )), zeroshard-estimate: $predicted_q"
echo "== 6. FULL_SHARD with hpZ (a secondary group per node), 2 x 2 ranks"
run hpz4 2 2 --set sharding.hpz_group_size=0
STEPS=16 run hpz4_16 2 2 --set sharding.hpz_group_size=0
hpz_sent=$(busiest hpz4)
hpz16_sent=$(busiest hpz4_16)
# Per parameter and step over a link: forward's bf16 gather (1 byte in stages) and the fp32
# reduce-scatter (2) stay, backward's gather (1) stays inside the node: about 0.75 of the bytes.
python3 -c "import sys; sys.exit(0 if $hpz16_sent < 0.85 * $full16_sent else 1)" \
  || fail "hpZ sent $hpz16_sent bytes over a link, FULL_SHARD $full16_sent: not below 0.85 of them"
predicted_h=$(predicted --set sharding.hpz_group_size=0)
python3 -c "import sys; d = ($hpz16_sent - $hpz_sent) / 12; sys.exit(0 if abs(d - $predicted_h) <= 0.1 * $predicted_h else 1)" \
  || fail "a step with hpZ added $(( (hpz16_sent - hpz_sent) / 12 )) bytes to the busiest link, the estimate says $predicted_h"
/usr/bin/python3 - "$work/full4_16.metrics.jsonl" "$work/hpz4_16.metrics.jsonl" <<'PY' || fail "hpZ trained differently"
import json, sys
losses = [[r["loss"] for r in map(json.loads, open(f)) if "loss" in r and "eval" not in r and "summary" not in r]
          for f in sys.argv[1:]]
if len(losses[0]) != 16 or losses[0] != losses[1]:
    sys.exit(f"FULL_SHARD losses {losses[0]}, with hpZ {losses[1]}")
PY
echo "ok: hpZ: $hpz16_sent bytes over 16 steps against $full16_sent; a step adds $(( (hpz16_sent - hpz_sent) / 12 )), zeroshard-estimate: $predicted_h; losses bitwise FULL_SHARD's"
echo "ALL PASSED"
