#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds zeroshard (scripts/setup.sh installs what is missing) and runs every test with CTest:
# unit tests, multi-rank tests under mpirun at 1, 2 and 4 ranks, job-level tests, and the
# install + find_package(zeroshard) consumer build. GPU tests skip visibly without a GPU.
# Extra arguments go to ctest (e.g. -R comm, -L gpu).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh --tests
build_dir=${ZS_BUILD_DIR:-build}
ctest --test-dir "$build_dir" --output-on-failure -j "${ZS_TEST_JOBS:-2}" "$@"
