#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu-test-verdict.sh: the verdict of gpu-check.sh's test phase, from ctest's exit status and log.
#
#   scripts/gpu-test-verdict.sh CTEST_EXIT_STATUS CTEST_LOG
#
# Prints one line and exits 0 ("ok: ...") only when ctest passed and at least one test ran; a run
# where every test was skipped (no GPU seen, a CPU-only LibTorch, a build without NCCL) proved
# nothing and is "FAILED: every GPU test was skipped ...", exit 1. So are a failed ctest and a log
# that says no test matched. Skipped tests beside ones that ran (e.g. the 2-GPU tests on a machine
# with one GPU) are named in the ok line. tests/tools/check_gpu_verdict.sh checks this on real ctest
# output.
set -uo pipefail

if (($# != 2)); then
  echo "usage: gpu-test-verdict.sh CTEST_EXIT_STATUS CTEST_LOG" >&2
  exit 2
fi
rc=$1
log=$2
if [[ ! -r $log ]]; then
  echo "FAILED: ctest log '$log' is missing or unreadable"
  exit 1
fi
# "100% tests passed, 0 tests failed out of 4" (CTest 3), "100% tests passed out of 4" (CTest 4,
# when none failed); the last one: -V logs hold only the summary's.
result=$(grep -E "tests passed,? ([0-9]+ tests? failed )?out of [0-9]+" "$log" | tail -1)
total=$(sed -nE 's/.*out of ([0-9]+).*/\1/p' <<<"$result")
# "The following tests did not run:" lists each skipped test as "  15 - name (Skipped)".
mapfile -t skipped < <(grep -E "^[[:space:]]*[0-9]+ - .* \(Skipped\)" "$log" | sed -E 's/^[[:space:]]*[0-9]+ - ([^ ]+) \(Skipped\).*/\1/')
if grep -q "No tests were found" "$log" || [[ -z $total || $total == 0 ]]; then
  echo "FAILED: no GPU test ran (ctest found no test labelled gpu; see the log)"
  exit 1
fi
if ((rc != 0)); then
  echo "FAILED: $result (ctest exit $rc)"
  exit 1
fi
if ((${#skipped[@]} >= total)); then
  echo "FAILED: every GPU test was skipped (${#skipped[@]} of $total): none ran on a GPU. Check that" \
    "LibTorch sees the GPU and the build has NCCL (machine.txt, the tests' skip reasons in ctest.log)"
  exit 1
fi
if ((${#skipped[@]} > 0)); then
  echo "ok: $result; $((total - ${#skipped[@]})) ran, ${#skipped[@]} skipped: ${skipped[*]}"
else
  echo "ok: $result; all $total ran"
fi
exit 0
