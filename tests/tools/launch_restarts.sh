#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# zeroshard-launch --max-restarts, end to end (tests/tools/CMakeLists.txt):
#   1. a job that fails twice runs a third time and succeeds with --max-restarts 2;
#   2. with --max-restarts 1 the second failure is the launcher's exit status;
#   3. a SIGUSR1 sent to the launcher reaches the job, which stops, and is not restarted;
#   4. train_gpt at 2 ranks with --resume=auto: one rank is killed (SIGKILL) after the first
#      checkpoint, the launcher restarts the job, which resumes from that checkpoint and ends
#      with the same last training loss as a run never interrupted.
# Usage: launch_restarts.sh LAUNCH TRAIN_GPT CONFIG WORKDIR
set -eu
launch=$1 train_gpt=$2 config=$3 work=$4
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
echo "ALL PASSED"
