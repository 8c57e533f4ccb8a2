#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# zeroshard set-up on Debian 12: installs the system packages that are missing (apt-get), then
# configures and builds into build/ (binaries in build/bin/). Idempotent: a second run installs
# nothing and rebuilds only what changed. Prints each phase and how long it took.
#
#   scripts/setup.sh [--tests] [--container] [--cuda] [--packages-only | --list-packages] [TARGET...]
#     --tests          also the packages only the tests use: Debian's python3-torch (PyTorch 1.13,
#                      ~160 MB), the real PyTorch the round-trip tests exchange weights and models with,
#                      docker-compose (Compose v1), which checks docker/docker-compose.yml, and GNU time
#                      (bench_vs_pytorch.py's peak RSS per rank; not in a minimal Debian); after the
#                      build, the npm test clients into BUILD_DIR/clients (scripts/install-clients.sh;
#                      needs Node.js 20 or newer with npm)
#     --container      also what a cluster container runs (openssh-server for mpirun between
#                      containers, docker/entrypoint.sh), installed without recommended packages
#     --cuda           the CUDA image's set (docker/Dockerfile.cuda): no Debian LibTorch (it is
#                      CPU-only; pass a CUDA LibTorch with ZS_CMAKE_ARGS=-DCMAKE_PREFIX_PATH=...), plus
#                      NCCL (libnccl2, libnccl-dev) from the CUDA apt repository
#     --packages-only  install the missing packages, then stop (no configure, no build)
#     --list-packages  print the package list, one per line, and stop (installs nothing):
#                      scripts/docker-cluster-check.sh gives it to debootstrap
#     TARGET           build only these CMake targets (e.g. train_gpt: what the demo needs); default all
#
# Environment: ZS_BUILD_DIR (default build), ZS_BUILD_TYPE (default RelWithDebInfo),
# ZS_JOBS (default: number of cores), ZS_CMAKE_ARGS (extra cmake arguments).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

with_tests=0
container=0
cuda=0
packages_only=0
list_only=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --tests) with_tests=1 ;;
    --container) container=1 ;;
    --cuda) cuda=1 ;;
    --packages-only) packages_only=1 ;;
    --list-packages) list_only=1 ;;
    -*)
      echo "setup: error: unknown option '$arg' (usage: scripts/setup.sh [--tests] [--container] [--cuda]" \
        "[--packages-only | --list-packages] [TARGET...])" >&2
      exit 2
      ;;
    *) targets+=("$arg") ;;
  esac
done

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libtorch-dev                          # LibTorch 1.13 (CPU) with TorchConfig.cmake
  libopenblas0-pthread                  # fp32 matmuls: replaces the reference libblas.so.3 (10x here);
                                        # Session shares the cores among a host's ranks
  libopenmpi-dev openmpi-bin            # MPI backend and mpirun
  libprotobuf-dev protobuf-compiler     # config schema
  libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev                          # command lines (CLI11, header-only)
  nlohmann-json3-dev                    # JSONL datasets (zs_data), config.json of Hugging Face models (header-only)
  liburing-dev libaio-dev               # async I/O for offload
  libpng-dev                            # zeroshard-plot's PNG output
  libpcre2-dev libutf8proc-dev          # tokenizers (zs_text): split regexes, Unicode normalization
  nlohmann-json3-dev libsentencepiece-dev  # tokenizer.json files; SentencePiece tokenizer.model files
  shellcheck openssh-client             # tests of docker/ (shell scripts, the entrypoint's ssh keys)
  zlib1g-dev                            # gzip-compressed datasets (IDX files)
  libicu-dev                            # chat templates (zs_text): Python's Unicode case mapping
  fortunes                              # train_gpt's text corpus (/usr/share/games/fortunes)
  dataset-fashion-mnist                 # train_fashion_mnist's data (/usr/share/datasets/fashion-mnist)
)
# /usr/bin/python3 with PyTorch for the round-trip tests; Compose v1 to check docker/docker-compose.yml;
# /usr/bin/time for bench_vs_pytorch_smoke (check-libtorch2.sh's minimal root lacked it); Jinja2, the
# reference the chat-template test compares with (as Hugging Face transformers configures it);
# SentencePiece's Python module trains and encodes the tokenizer tests' reference models.
((with_tests)) && packages+=(python3-torch docker-compose time python3-jinja2 python3-sentencepiece)
((container)) && packages+=(openssh-server)  # sshd: mpirun starts the ranks of other containers
if ((cuda)); then
  # The CUDA LibTorch comes from PyTorch's zip (docker/Dockerfile.cuda), NCCL from NVIDIA's repository.
  for i in "${!packages[@]}"; do [[ ${packages[i]} == libtorch-dev ]] && unset 'packages[i]'; done
  packages+=(libnccl2 libnccl-dev)
elif ((!list_only)) && command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  # Debian's LibTorch is CPU-only: say so instead of building a CPU-only zeroshard without a word.
  echo "setup: note: this machine has an NVIDIA GPU, but this build is CPU-only (Debian's LibTorch);" \
    "for the GPU path use --cuda with a CUDA LibTorch (docs/gpu.md, \"Build on a machine with NVIDIA GPUs\")"
fi
if ((list_only)); then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

start=$SECONDS
phase_start=$SECONDS
timings=()
phase_done() { timings+=("$1 $((SECONDS - phase_start)) s"); phase_start=$SECONDS; }

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing with apt-get: ${missing[*]}"
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
  # apt-get's own output is long; show how far it is (one updating line on a terminal) and errors.
  tty=0
  [[ -t 1 ]] && tty=1
  install_flags=(-y -q)
  ((container)) && install_flags+=(--no-install-recommends)  # images: only what is needed
  DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install "${install_flags[@]}" "${missing[@]}" 2>&1 | awk -v tty="$tty" '
    / newly installed/ { total = $3; print "setup: apt-get: " total " packages to install (with dependencies)"; fflush() }
    /^Unpacking / {
      n++
      if (tty) printf "\rsetup: apt-get: unpacked %d of %d", n, total
      else if (n % 25 == 0 || n == total) printf "setup: apt-get: unpacked %d of %d\n", n, total
      fflush()
    }
    /^(E|W): / { print; fflush() }
    END { if (tty && n) print "" }'
  phase_done packages
fi
if ((packages_only)); then
  echo "setup: packages done in $((SECONDS - start)) s (--packages-only: not building)"
  exit 0
fi

build_dir=${ZS_BUILD_DIR:-build}
jobs=${ZS_JOBS:-$(nproc)}
generator=()
if command -v ninja >/dev/null 2>&1 && [[ ! -f "$build_dir/CMakeCache.txt" || -f "$build_dir/build.ninja" ]]; then
  generator=(-G Ninja)
fi
mkdir -p "$build_dir"
log="$build_dir/configure.log"
echo "setup: configuring $build_dir"
# shellcheck disable=SC2086
cmake -S . -B "$build_dir" "${generator[@]}" -DCMAKE_BUILD_TYPE="${ZS_BUILD_TYPE:-RelWithDebInfo}" \
  ${ZS_CMAKE_ARGS:-} >"$log" 2>&1 || { cat "$log" >&2; exit 1; }
grep -E "^-- zeroshard:" "$log" || true
phase_done configure

target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
echo "setup: building ${targets[*]:-everything} with $jobs jobs"
cmake --build "$build_dir" -j "$jobs" "${target_args[@]}"
phase_done build

if ((with_tests)); then
  # The clients nobody here wrote that the tests compare with (llama.cpp, Hugging Face's tokenizers
  # and Jinja, tiktoken, published vocabularies), pinned by tests/clients/package-lock.json.
  scripts/install-clients.sh "$build_dir"
  phase_done clients
fi

summary=$(printf '%s, ' "${timings[@]}")
echo "setup: done in $((SECONDS - start)) s (${summary%, })"
