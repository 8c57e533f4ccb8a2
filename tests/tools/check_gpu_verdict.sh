#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks scripts/gpu-test-verdict.sh (gpu-check.sh's test verdict) on real ctest output: small
# CTest projects whose gpu-labelled tests pass, skip (exit 77, as the GPU tests do without a GPU)
# or fail, run with the options gpu-check.sh uses.
#
#   check_gpu_verdict.sh REPO_ROOT
set -uo pipefail
repo=$1
verdict=$repo/scripts/gpu-test-verdict.sh
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# project NAME CODE... : a CTest project with one gpu-labelled test per exit code.
project() {
  local name=$1
  shift
  local dir=$work/$name
  mkdir -p "$dir"
  {
    echo "cmake_minimum_required(VERSION 3.16)"
    echo "project($name NONE)"
    echo "enable_testing()"
    local i=0
    for code in "$@"; do
      echo "add_test(NAME t$i COMMAND sh -c \"exit $code\")"
      echo "set_tests_properties(t$i PROPERTIES SKIP_RETURN_CODE 77 LABELS gpu)"
      i=$((i + 1))
    done
  } >"$dir/CMakeLists.txt"
  cmake -S "$dir" -B "$dir/build" >/dev/null 2>&1 || { echo "cannot configure $name"; exit 1; }
  ctest --test-dir "$dir/build" -L gpu --output-on-failure -V >"$dir/ctest.log" 2>&1
  echo $? >"$dir/rc"
}

# expect NAME EXIT_STATUS REGEX
expect() {
  local name=$1 want=$2 regex=$3 line rc
  line=$("$verdict" "$(cat "$work/$name/rc")" "$work/$name/ctest.log")
  rc=$?
  if [[ $rc != "$want" ]] || ! grep -Eq "$regex" <<<"$line"; then
    echo "check_gpu_verdict: $name: exit $rc (want $want), line: $line (want /$regex/)"
    failures=$((failures + 1))
  fi
}

project all_skipped 77 77 77 77
expect all_skipped 1 "^FAILED: every GPU test was skipped \(4 of 4\)"
project one_skipped 0 0 77
expect one_skipped 0 "^ok: .*2 ran, 1 skipped: t2$"
project all_ran 0 0
expect all_ran 0 "^ok: 100% tests passed.*all 2 ran"
project one_failed 0 1 77
expect one_failed 1 "^FAILED: .*1 tests? failed out of 3"
# CTest 4 (the GPU machine's, 2026-11-26) leaves out "0 tests failed" when none failed: the end
# of that run's log, as it was.
mkdir -p "$work/ctest4"
printf '%s\n' "4/4 Test #119: test_gpu_streams .................   Passed    4.91 sec" "" \
  "100% tests passed out of 4" "" "Label Time Summary:" "gpu    =  23.79 sec*proc (4 tests)" "" \
  "Total Test time (real) =  21.68 sec" "" "The following tests did not run:" \
  "$(printf '\t 16 - test_nccl_gpu.np2 (Skipped)')" >"$work/ctest4/ctest.log"
echo 0 >"$work/ctest4/rc"
expect ctest4 0 "^ok: 100% tests passed out of 4; 3 ran, 1 skipped: test_nccl_gpu.np2$"
project none 0
rm -f "$work/none/ctest.log"
ctest --test-dir "$work/none/build" -L no-such-label -V >"$work/none/ctest.log" 2>&1
echo $? >"$work/none/rc"
expect none 1 "^FAILED: no GPU test ran"
# A missing log is an error, not a pass.
if "$repo/scripts/gpu-test-verdict.sh" 0 "$work/missing.log" >/dev/null; then
  echo "check_gpu_verdict: a missing log passed"
  failures=$((failures + 1))
fi

if ((failures == 0)); then echo "check_gpu_verdict: all passed"; else exit 1; fi
