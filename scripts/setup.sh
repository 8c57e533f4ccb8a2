#!/usr/bin/env bash
# zeroshard set-up on Debian 12: installs the system packages that are missing (apt-get), then
# configures and builds into build/ (binaries in build/bin/). Idempotent: a second run installs
# nothing and rebuilds only what changed.
#
# Environment: ZS_BUILD_DIR (default build), ZS_BUILD_TYPE (default RelWithDebInfo),
# ZS_JOBS (default: number of cores), ZS_CMAKE_ARGS (extra cmake arguments).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev                          # LibTorch 1.13 (CPU) with TorchConfig.cmake
  libopenmpi-dev openmpi-bin            # MPI backend and mpirun
  libprotobuf-dev protobuf-compiler     # config schema
  libgtest-dev libgmock-dev libbenchmark-dev
  liburing-dev libaio-dev               # async I/O for offload
  libpng-dev                            # zeroshard-plot's PNG output
  shellcheck openssh-client             # tests of docker/ (shell scripts, the entrypoint's ssh keys)
  zlib1g-dev                            # gzip-compressed datasets (IDX files)
  fortunes                              # train_gpt's text corpus (/usr/share/games/fortunes)
  dataset-fashion-mnist                 # train_fashion_mnist's data (/usr/share/datasets/fashion-mnist)
)

missing=()
for p in "${packages[@]}"; do
  [[ "$p" == \#* ]] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    apt_get=(apt-get)
  elif command -v sudo >/dev/null 2>&1; then
    apt_get=(sudo apt-get)
  else
    echo "setup: error: these packages are missing and we are neither root nor have sudo: ${missing[*]}" >&2
    echo "setup: install them with: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  "${apt_get[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq "${missing[@]}" >/dev/null
fi

build_dir=${ZS_BUILD_DIR:-build}
jobs=${ZS_JOBS:-$(nproc)}
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/CMakeCache.txt" || -f "$build_dir/build.ninja" ]]; then
  generator=(-G Ninja)
fi
mkdir -p "$build_dir"
log="$build_dir/configure.log"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${ZS_BUILD_TYPE:-RelWithDebInfo}" \
  ${ZS_CMAKE_ARGS:-} >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
grep -E "^-- zeroshard:" "$log" || true
cmake --build "$build_dir" -j "$jobs"
