#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# zeroshard-launch --max-restarts, end to end (tests/tools/CMakeLists.txt):
#   1. a job that fails twice runs a third time and succeeds with --max-restarts 2;
#   2. with --max-restarts 1 the second failure is the launcher's exit status;
#   3. a SIGUSR1 sent to the launcher reaches the job, which stops, and is not restarted;
#   4. train_gpt at 2 ranks with --resume=auto: one rank is killed (SIGKILL) after the first
#      checkpoint, the launcher restarts the job, which resumes from that checkpoint and ends
#      with the same last training loss as a run never interrupted;
#   5. --min-ranks: train_gpt at 4 ranks, a random rank killed (SIGKILL) after a random one of its
#      first checkpoints: the job is restarted on 3 ranks, resumes that checkpoint resharded and
#      completes; its final parameters equal, bit for bit, those of a restart made by hand from the
#      same checkpoint at 3 ranks. Prints the time from the kill to the resumed job's first step;
#   6. --min-ranks: a job that fails at its smallest allowed size is not restarted below it.
# Usage: launch_restarts.sh LAUNCH TRAIN_GPT CONFIG WORKDIR CKPT_TOOL
set -eu
launch=$1 train_gpt=$2 config=$3 work=$4 ckpt_tool=$5
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAILED: $*"; exit 1; }

# A job of one rank that fails (exit 7) until it has run N times; it counts its runs in a file.
cat > "$work/flaky.sh" <<'JOB'
#!/bin/sh
n=$(( $(cat "$1" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$1"
echo "flaky: run $n"
[ "$n" -ge "$2" ] || exit 7
JOB
chmod +x "$work/flaky.sh"

echo "== 1. two failures, --max-restarts 2"
"$launch" -n 1 --max-restarts 2 --restart-delay 0 -- "$work/flaky.sh" "$work/count1" 3 > "$work/1.log" 2>&1 \
  || fail "exit status $? (expected 0): $(cat "$work/1.log")"
grep -q "restart 2 of 2" "$work/1.log" || fail "no 'restart 2 of 2' in: $(cat "$work/1.log")"
[ "$(cat "$work/count1")" = 3 ] || fail "the job ran $(cat "$work/count1") times, expected 3"
grep -q "arguments have no --resume=auto" "$work/1.log" || fail "no note about --resume=auto in: $(cat "$work/1.log")"
echo "ok"

echo "== 2. two failures, --max-restarts 1"
status=0
"$launch" -n 1 --max-restarts 1 --restart-delay 0 -- "$work/flaky.sh" "$work/count2" 3 > "$work/2.log" 2>&1 || status=$?
[ "$status" = 7 ] || fail "exit status $status (expected the job's 7): $(cat "$work/2.log")"
grep -q "no restart left (--max-restarts 1)" "$work/2.log" || fail "no 'no restart left' in: $(cat "$work/2.log")"
[ "$(cat "$work/count2")" = 2 ] || fail "the job ran $(cat "$work/count2") times, expected 2"
echo "ok"

echo "== 3. SIGUSR1 to the launcher: forwarded, the job stops, no restart"
cat > "$work/waiter.sh" <<'JOB'
#!/bin/sh
trap 'echo "waiter: stopping on SIGUSR1"; exit 138' USR1
touch "$1"
i=0
while [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
exit 0
JOB
chmod +x "$work/waiter.sh"
"$launch" -n 1 --max-restarts 3 --restart-delay 0 -- "$work/waiter.sh" "$work/ready3" > "$work/3.log" 2>&1 &
pid=$!
i=0
while [ ! -e "$work/ready3" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$work/ready3" ] || fail "the waiter job did not start: $(cat "$work/3.log")"
kill -USR1 "$pid"
status=0
wait "$pid" || status=$?
[ "$status" = 138 ] || fail "exit status $status (expected 138): $(cat "$work/3.log")"
grep -q "waiter: stopping on SIGUSR1" "$work/3.log" || fail "the job did not get SIGUSR1: $(cat "$work/3.log")"
grep -q "not restarting it" "$work/3.log" || fail "no 'not restarting it' in: $(cat "$work/3.log")"
echo "ok"

echo "== 4. train_gpt, 2 ranks: one rank killed, the job restarted and resumed"
common="--config $config --set train.steps=24 --set logging.progress=LINES --set train.log_interval=8"
common="$common --set checkpoint.interval_steps=4 --set data.limit_eval_samples=64"
# shellcheck disable=SC2086
"$launch" -n 2 -- "$train_gpt" $common --set checkpoint.dir="$work/ckpt_plain" > "$work/plain.log" 2>&1 \
  || fail "the uninterrupted run failed: $(cat "$work/plain.log")"
# shellcheck disable=SC2086
"$launch" -n 2 --max-restarts 1 --restart-delay 0 -- "$train_gpt" $common --set checkpoint.dir="$work/ckpt_killed" \
  --resume=auto > "$work/4.log" 2>&1 &
pid=$!
i=0
while [ ! -e "$work/ckpt_killed/latest" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
[ -e "$work/ckpt_killed/latest" ] || fail "no checkpoint appeared: $(cat "$work/4.log")"
victim=$(pgrep -f "checkpoint.dir=$work/ckpt_killed" | while read -r p; do
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = train_gpt ] && echo "$p"; done | tail -n 1)
[ -n "$victim" ] || fail "no train_gpt rank found to kill"
kill -KILL "$victim"
status=0
wait "$pid" || status=$?
[ "$status" = 0 ] || fail "the restarted job's exit status is $status: $(cat "$work/4.log")"
grep -q "restart 1 of 1" "$work/4.log" || fail "no restart in: $(cat "$work/4.log")"
grep -q "resumed at step" "$work/4.log" || fail "the restarted job did not resume: $(cat "$work/4.log")"
want=$(grep -o "last train loss [0-9.]*" "$work/plain.log")
got=$(grep -o "last train loss [0-9.]*" "$work/4.log" | tail -n 1)
[ -n "$want" ] && [ "$want" = "$got" ] || fail "uninterrupted: '$want', killed and restarted: '$got'"
echo "ok: $(grep -o "resumed at step [0-9]*" "$work/4.log"), $got as uninterrupted"

echo "== 5. --min-ranks: 4 ranks, a random rank killed, the job finished on 3"
# A global batch of 24 divides over 4 and 3 ranks; every checkpoint kept, for the restart by hand.
common="--config $config --set train.steps=24 --set train.batch_size=24 --set logging.progress=LINES"
common="$common --set train.log_interval=1 --set checkpoint.interval_steps=4 --set checkpoint.keep_last=100"
common="$common --set data.limit_eval_samples=48 --set sample.tokens=0"
random() { echo $(( $(od -An -N2 -tu2 /dev/urandom) % $1 )); }
after=$(( $(random 3) + 1 ))   # killed after the 1st, 2nd or 3rd checkpoint (step 4, 8 or 12)
# shellcheck disable=SC2086
"$launch" -n 4 --max-restarts 2 --min-ranks 3 --restart-delay 0 -- "$train_gpt" $common \
  --set checkpoint.dir="$work/ckpt_elastic" --resume=auto > "$work/5.log" 2>&1 &
pid=$!
want_dir=$(printf "step-%08d" $((after * 4)))
i=0
while [ ! -e "$work/ckpt_elastic/$want_dir/manifest.pb" ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done
[ -e "$work/ckpt_elastic/$want_dir/manifest.pb" ] || fail "no $want_dir appeared: $(cat "$work/5.log")"
ranks=$(pgrep -f "checkpoint.dir=$work/ckpt_elastic" | while read -r p; do
  [ "$(cat /proc/"$p"/comm 2>/dev/null)" = train_gpt ] && echo "$p"; done)
[ "$(echo "$ranks" | wc -l)" = 4 ] || fail "not 4 train_gpt ranks to choose from: $ranks"
victim=$(echo "$ranks" | sed -n "$(( $(random 4) + 1 ))p")
killed_at=$(date +%s%N)
kill -KILL "$victim"
while ! grep -q "resumed at step" "$work/5.log" && kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
resumed_at=$(date +%s%N)
status=0
wait "$pid" || status=$?
[ "$status" = 0 ] || fail "the elastic job's exit status is $status: $(cat "$work/5.log")"
grep -q "restart 1 of 2 on 3 rank(s)" "$work/5.log" || fail "no restart on 3 ranks in: $(cat "$work/5.log")"
grep -q "the runs: 4 rank(s): .*; 3 rank(s): completed" "$work/5.log" || fail "no summary in: $(cat "$work/5.log")"
from=$(grep -o "resumed at step [0-9]*" "$work/5.log" | tail -n 1 | grep -o "[0-9]*$")
[ -n "$from" ] || fail "the restarted job did not resume: $(cat "$work/5.log")"
# The restart by hand: the checkpoint the elastic job resumed, alone in a folder, at 3 ranks.
step_dir=$(printf "step-%08d" "$from")
mkdir -p "$work/ckpt_manual"
cp -r "$work/ckpt_elastic/$step_dir" "$work/ckpt_manual/"
echo "$step_dir" > "$work/ckpt_manual/latest"
# shellcheck disable=SC2086
"$launch" -n 3 -- "$train_gpt" $common --set checkpoint.dir="$work/ckpt_manual" --resume > "$work/5m.log" 2>&1 \
  || fail "the restart by hand failed: $(cat "$work/5m.log")"
for d in elastic manual; do
  "$ckpt_tool" export "$work/ckpt_$d" "$work/final_$d.safetensors" --dtype float32 > /dev/null \
    || fail "cannot export ckpt_$d"
done
cmp -s "$work/final_elastic.safetensors" "$work/final_manual.safetensors" \
  || fail "the elastic job's final parameters differ from the restart by hand's"
want=$(grep -o "last train loss [0-9.]*" "$work/5m.log")
got=$(grep -o "last train loss [0-9.]*" "$work/5.log" | tail -n 1)
[ -n "$want" ] && [ "$want" = "$got" ] || fail "by hand: '$want', elastic: '$got'"
echo "ok: killed after step $((after * 4)), resumed at step $from on 3 ranks; final parameters equal the restart" \
  "by hand's bit for bit; $(( (resumed_at - killed_at) / 1000000 )) ms from the kill to the resumed job"

echo "== 6. --min-ranks: a job that keeps failing gives up below the minimum, saying why"
status=0
"$launch" -n 2 --max-restarts 5 --min-ranks 2 --restart-delay 0 -- "$work/flaky.sh" "$work/count6" 9 \
  > "$work/6.log" 2>&1 || status=$?
[ "$status" = 7 ] || fail "exit status $status (expected the job's 7): $(cat "$work/6.log")"
grep -q "the job exited with status 7 on 2 rank(s); a restart would run on 1, below --min-ranks 2: giving up" \
  "$work/6.log" || fail "no 'giving up' in: $(cat "$work/6.log")"
grep -q "the runs: 2 rank(s): exited with status 7, below --min-ranks" "$work/6.log" \
  || fail "no summary in: $(cat "$work/6.log")"
echo "ok"
echo "ALL PASSED"
