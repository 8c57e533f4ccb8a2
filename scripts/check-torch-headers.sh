#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check-torch-headers.sh: compile (not link) zeroshard's GPU targets on a Debian 12 machine against the
# LibTorch headers and CMake files of a CUDA torch wheel brought back from a GPU machine, so that
# LibTorch API drift is found without a GPU, before the GPU machine's time is spent on a build
# (docs/gpu.md).
#
#   scripts/check-torch-headers.sh pack OUT_FILE      # on the GPU machine: write the headers' tarball
#   scripts/check-torch-headers.sh check TARBALL...   # on Debian 12: unpack, configure, compile the objects
#
# pack: torch/include + torch/share/cmake of `python3 -c 'import torch'` and the nvidia-nccl wheel's
#   include/, xz-compressed (torch 2.11: 62 MiB -> 3.4 MiB), one file (split it with `split -b 15M`
#   where a transfer limits file sizes; `check` takes the parts in order).
# check: unpacks into /var/tmp/zeroshard-torch-headers (it must lie outside the source tree: CMake
#   refuses a LibTorch include folder inside it), makes empty stand-ins for the wheel's
#   libraries (LibTorch's CMake files check that they exist), configures with -DZS_REQUIRE_CUDA=ON,
#   the CUDA toolkit of this machine (/usr/local/cuda) and NCCL from it, and compiles every object of
#   the GPU targets (ninja -k 0: every error, not the first). Nothing is linked.
# Environment: ZS_TH_DIR (/var/tmp/zeroshard-torch-headers), ZS_TH_TARGETS (the targets whose objects are built;
#   default gpu-check.sh's), ZS_TH_JOBS (nproc).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
die() { echo "check-torch-headers: $*" >&2; exit 1; }
cmd=${1:-}
shift || true
case "$cmd" in
  pack)
    out=${1:?usage: check-torch-headers.sh pack OUT_FILE}
    tp=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))') || die "python3 has no torch"
    nc=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])') || die "python3 has no nvidia-nccl wheel"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/torch" "$tmp/nccl"
    cp -r "$tp/include" "$tmp/torch/" && mkdir -p "$tmp/torch/share" && cp -r "$tp/share/cmake" "$tmp/torch/share/"
    cp -r "$nc/include" "$tmp/nccl/"
    python3 -c 'import torch; print(torch.__version__)' >"$tmp/torch/VERSION"
    tar -C "$tmp" -cf - torch nccl | xz -T0 -6 >"$out"
    echo "check-torch-headers: wrote $out ($(du -h "$out" | cut -f1); torch $(cat "$tmp/torch/VERSION"))"
    ;;
  check)
    (($#)) || die "usage: check-torch-headers.sh check TARBALL [MORE PARTS...]"
    dir=${ZS_TH_DIR:-/var/tmp/zeroshard-torch-headers}
    [[ "$(realpath -m "$dir")/" != "$repo/"* ]] || die "ZS_TH_DIR=$dir lies inside the source tree $repo; CMake refuses that"
    rm -rf "$dir/torch" "$dir/nccl"
    mkdir -p "$dir"
    cat "$@" | xz -d | tar -x -C "$dir" || die "cannot unpack $*"
    [[ -f "$dir/torch/share/cmake/Torch/TorchConfig.cmake" ]] || die "$* holds no torch/share/cmake/Torch/TorchConfig.cmake"
    mkdir -p "$dir/torch/lib"
    # The libraries LibTorch's CMake files name; empty: nothing is linked.
    for l in $(grep -ho 'lib/lib[a-z0-9_]*\.so' "$dir"/torch/share/cmake/Caffe2/Caffe2Targets-*.cmake | sort -u) \
      lib/libc10_cuda.so lib/libcaffe2_nvrtc.so lib/libtorch.so; do
      [[ -e "$dir/torch/$l" ]] || gcc -shared -o "$dir/torch/$l" -x c /dev/null
    done
    build=$dir/build
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZS_REQUIRE_CUDA=ON \
      -DCMAKE_PREFIX_PATH="$dir/torch/share/cmake" -DNCCL_ROOT="$dir/nccl" \
      -DCMAKE_CUDA_COMPILER="${ZS_NVCC:-/usr/local/cuda/bin/nvcc}" -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DTORCH_CUDA_ARCH_LIST=9.0 >"$dir/configure.log" 2>&1 || { tail -30 "$dir/configure.log"; die "configure failed ($dir/configure.log)"; }
    grep -E "^-- zeroshard:" "$dir/configure.log"
    # shellcheck disable=SC2206
    targets=(${ZS_TH_TARGETS:-test_nccl test_streams test_gpu_training test_gpu_streams bench_step train_gpt})
    mapfile -t objs < <(ninja -C "$build" -t inputs "${targets[@]}" | grep -E '\.o$' | sort -u)
    ((${#objs[@]})) || die "no objects found for ${targets[*]}"
    echo "check-torch-headers: compiling ${#objs[@]} objects of ${targets[*]} against torch $(cat "$dir/torch/VERSION" 2>/dev/null || echo '?')"
    if ninja -C "$build" -k 0 -j "${ZS_TH_JOBS:-$(nproc)}" "${objs[@]}" >"$dir/build.log" 2>&1; then
      echo "check-torch-headers: ok: every object compiled ($dir/build.log)"
    else
      grep -E "error|FAILED" "$dir/build.log" | head -40
      die "compile errors ($dir/build.log)"
    fi
    ;;
  *) sed -n '2,20p' "${BASH_SOURCE[0]}"; [[ $cmd == -h || $cmd == --help ]] || exit 2 ;;
esac
