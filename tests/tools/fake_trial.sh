#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A stand-in training program for zeroshard-launch's trial tests (tests/tools/CMakeLists.txt): it
# speaks the --memory-trial protocol (launcher/include/zeroshard/launcher/trial.h) and trains
# nothing. Memory is modelled by one threshold: a micro-batch above FAKE_MAX_MICRO "runs out".
#
# Arguments: --memory-trial, --set train.batch_size=N, --set train.micro_batches=M (later ones
# win); they end at `--`, after which anything goes. Anything else is an error (exit 1).
# Environment:
#   FAKE_BATCH      train.batch_size before any --set (default 48)
#   FAKE_MICRO      train.micro_batches before any --set (default 1)
#   FAKE_MAX_MICRO  the largest micro-batch per rank that fits (needed by --memory-trial)
#   FAKE_NO_TRIAL=1 act like a program without --memory-trial: ignore it, "train", exit 0
#   FAKE_RUN_EXIT   the exit status of a run that is not a trial (default 0)
# Ranks: OMPI_COMM_WORLD_SIZE and OMPI_COMM_WORLD_RANK (1 and 0 when unset); rank 0 prints.
set -eu

all_args="$*"
batch=${FAKE_BATCH:-48}
micro=${FAKE_MICRO:-1}
trial=0
while [ $# -gt 0 ]; do
  case $1 in
    --) break ;;
    --memory-trial) trial=1 ;;
    --set)
      [ $# -ge 2 ] || { echo "fake_trial: --set needs KEY=VALUE" >&2; exit 1; }
      shift
      case $1 in
        train.batch_size=*) batch=${1#*=} ;;
        train.micro_batches=*) micro=${1#*=} ;;
        *) echo "fake_trial: unknown config key in --set $1" >&2; exit 1 ;;
      esac
      ;;
    *) echo "fake_trial: unknown argument '$1'" >&2; exit 1 ;;
  esac
  shift
done

world=${OMPI_COMM_WORLD_SIZE:-1}
rank=${OMPI_COMM_WORLD_RANK:-0}
say() { if [ "$rank" = 0 ]; then echo "$@"; fi; }

if [ $((batch % (world * micro))) -ne 0 ]; then
  say "fake_trial: config error: train.batch_size=$batch is not divisible by $world rank(s) x train.micro_batches=$micro" >&2
  exit 1
fi
per_rank=$((batch / world))
size=$((per_rank / micro))

if [ "$trial" = 0 ] || [ "${FAKE_NO_TRIAL:-0}" = 1 ]; then
  say "fake_trial: training batch_size=$batch micro_batches=$micro (micro-batch $size) args: $all_args"
  exit "${FAKE_RUN_EXIT:-0}"
fi

max=${FAKE_MAX_MICRO:?fake_trial: set FAKE_MAX_MICRO, the largest micro-batch that fits}
mib=1048576
say "zeroshard-memory-trial: plan world_size=$world per_rank_batch=$per_rank micro_batches=$micro micro_batch_size=$size"
if [ "$size" -gt "$max" ]; then
  say "zeroshard: out of memory on rank $rank: a micro-batch of $size is more than $max (fake)" >&2
  exit 3
fi
say "zeroshard-memory-trial: fits micro_batch_size=$size peak_bytes=$((size * mib)) limit_bytes=$(((max + 1) * mib))"
exit 0
