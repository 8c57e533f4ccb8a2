#!/usr/bin/env bash
# The main job on its built-in default: builds zeroshard if needed, then runs the communicator
# self-test across 2 ranks (every collective and dtype checked element by element, then timed).
# Extra arguments go to the program, e.g. --set comm.check_signatures=true, or --hang-rank 1
# --set comm.timeout_s=5 to watch the watchdog end a hung job with a message.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/setup.sh >/dev/null
build_dir=${ZS_BUILD_DIR:-build}
ranks=${ZS_RANKS:-2}
mpi_flags=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && mpi_flags+=(--allow-run-as-root)
exec mpirun -n "$ranks" "${mpi_flags[@]}" "$build_dir/bin/zeroshard-selftest" "$@"
