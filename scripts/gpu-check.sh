#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# gpu-check.sh: build zeroshard's GPU path on a GPU machine that has no network, run the GPU tests
# and the GPU benchmarks, and collect what they print (docs/gpu.md).
#
#   scripts/gpu-check.sh [--phase all|build|test|bench] [OUT_DIR]
#
# What the machine must have: nvcc (CUDA 13), cmake, ninja, a python3 whose torch wheel carries
# CUDA (its LibTorch is used: torch.utils.cmake_prefix_path) and the nvidia-nccl-cu13 wheel
# (NCCL's headers and library: site-packages/nvidia/nccl). What it may lack (MPI, protobuf's C++
# library, liburing, libaio, GoogleTest) comes from Debian 12 packages in .gpu-debs/, downloaded
# beforehand by scripts/fetch-gpu-debs.sh on a networked machine and carried along; they are
# unpacked with dpkg -x into a prefix (never into /), with PATH, LD_LIBRARY_PATH,
# CMAKE_PREFIX_PATH and Open MPI's and PMIx's relocation variables pointing there.
#
# Phases (each one a separate call fits the 10-minute limit of one device command; the build
# folder stays between calls on a warm machine):
#   build  configure with ZS_REQUIRE_CUDA=ON (a missing CUDA, NCCL or CUDA LibTorch is an error),
#          build the GPU tests and the benchmarks;
#   test   ctest -L gpu (the GPU-labelled tests); fails when every one of them skipped
#          (scripts/gpu-test-verdict.sh); then the tests ZS_GPU_EXTRA_TESTS names (a ctest -R
#          regex; CPU tests to run under this LibTorch: add their targets to ZS_GPU_TARGETS);
#   bench  bench_step: a small smoke configuration, --preset gpt-1.3b, then --preset gpt-offload
#          with offload.optimizer=CPU, the same with the step during backward (offload.overlap_step),
#          then with parameters and gradients on the host too (ZS_GPU_BENCHES picks among smoke
#          gpt-1.3b gpt-offload gpt-offload-overlap gpt-offload-all).
#
# Output, in OUT_DIR (else $OUT, else ./gpu-check-out), at most 8 files:
#   machine.txt  GPU, driver, OS, compilers, torch, the paths found;   summary.txt  one line per step
#   build.log    prefix, configure and build;   ctest.log + ctest.xml (JUnit)   test phase
#   bench.log    benchmark output;   bench.jsonl  each benchmark's final JSON line
#   ctest-extra.log  the ZS_GPU_EXTRA_TESTS run, when asked for
# Exit status 0 when every step of the phases run passed.
#
# Environment (all optional): ZS_GPU_DEBS (.gpu-debs), ZS_GPU_PREFIX (/tmp/zeroshard-gpu-prefix),
# ZS_GPU_BUILD (build-gpu), ZS_TORCH_PREFIX, ZS_NCCL_ROOT (default: asked from python3),
# ZS_CUDA_ARCH (90), ZS_GPU_JOBS (nproc), ZS_BENCH_TIMEOUT (seconds per benchmark, 420).
# ZS_GPU_REQUIRE_CUDA=OFF tries the offline set-up on a machine without CUDA LibTorch (a dry run
# of the prefix, configure and build; the GPU tests then skip); ZS_GPU_TARGETS narrows the build.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
phase=all
out=""
while (($#)); do
  case "$1" in
    --phase) phase=${2:-}; shift 2 ;;
    --phase=*) phase=${1#--phase=}; shift ;;
    -h|--help) sed -n '2,35p' "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "gpu-check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) out=$1; shift ;;
  esac
done
case "$phase" in all|build|test|bench) ;; *) echo "gpu-check: --phase takes all, build, test or bench, got '$phase'" >&2; exit 2 ;; esac
out=${out:-${OUT:-$repo/gpu-check-out}}
mkdir -p "$out"
debs=${ZS_GPU_DEBS:-$repo/.gpu-debs}
prefix=${ZS_GPU_PREFIX:-/tmp/zeroshard-gpu-prefix}
build=${ZS_GPU_BUILD:-$repo/build-gpu}
jobs=${ZS_GPU_JOBS:-$(nproc)}
arch_dir=x86_64-linux-gnu
failed=0

say() { echo "gpu-check: $*" | tee -a "$out/summary.txt"; }
fail() { say "FAILED: $*"; failed=1; }
die() { say "FAILED: $*"; exit 1; }

# --- what the machine has -------------------------------------------------------------------------
py=${ZS_PYTHON:-python3}
torch_prefix=${ZS_TORCH_PREFIX:-$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)}
nccl_root=${ZS_NCCL_ROOT:-$("$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null)}
# The nvidia-* wheels' library folders: the linker resolves LibTorch's CUDA dependencies there.
wheel_libs=$("$py" -c 'import glob, os, nvidia; print(":".join(sorted(glob.glob(os.path.join(list(nvidia.__path__)[0], "*", "lib")))))' 2>/dev/null)
nvcc=${ZS_NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  phase: $phase"
  echo "host: $(uname -srm), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) memory"
  # shellcheck source=/dev/null
  echo "os: $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version 2>&1 | head -1)"
  echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4 | tr '\n' ';')"
  echo "nvcc: $nvcc: $("$nvcc" --version 2>&1 | grep -o 'release [0-9.]*' || echo missing)"
  echo "cmake: $(cmake --version 2>&1 | head -1); ninja: $(ninja --version 2>&1); c++: $(c++ --version 2>&1 | head -1)"
  echo "python3: $(command -v "$py"); torch: $("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tail -1)"
  echo "torch cmake prefix: ${torch_prefix:-<not found>}"
  echo "nccl root: ${nccl_root:-<not found>} ($(cd "$nccl_root" 2>/dev/null && find include/nccl.h lib*/libnccl.so* -maxdepth 0 2>/dev/null | tr '\n' ' '))"
  echo "debs: $debs ($(find "$debs" -maxdepth 1 -name '*.deb' 2>/dev/null | wc -l) files, $(du -sh "$debs" 2>/dev/null | cut -f1))"
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"
[[ -n "$torch_prefix" && -d "$torch_prefix" ]] || die "no LibTorch: '$py -c \"import torch\"' failed (set ZS_TORCH_PREFIX to torch.utils.cmake_prefix_path)"
[[ -f "$nccl_root/include/nccl.h" ]] || die "no nccl.h under '$nccl_root/include' (the nvidia-nccl-cu13 wheel; set ZS_NCCL_ROOT)"
[[ -x "$nvcc" ]] || die "nvcc not found (PATH or /usr/local/cuda/bin; set ZS_NVCC)"

# --- the Debian packages, unpacked into a prefix ----------------------------------------------------
unpack_debs() {
  shopt -s nullglob
  local files=("$debs"/*.deb)
  ((${#files[@]})) || die "no .deb files in $debs: run scripts/fetch-gpu-debs.sh on a networked Debian 12 machine and copy .gpu-debs next to this checkout"
  local stamp
  stamp=$(stat -c '%n %s %Y' "${files[@]}" | md5sum | cut -d' ' -f1)
  if [[ "$(cat "$prefix/.zeroshard-debs" 2>/dev/null)" != "$stamp" ]]; then
    rm -rf "$prefix"
    mkdir -p "$prefix"
    for f in "${files[@]}"; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$f" "$prefix" || die "dpkg-deb -x $f failed"
      else  # a .deb is an ar archive holding data.tar.{xz,zst,gz}
        local member z
        member=$(ar t "$f" | grep '^data.tar') || die "cannot unpack $f: no dpkg-deb, and ar finds no data.tar in it"
        case "$member" in *.xz) z=-J ;; *.zst) z=--zstd ;; *.gz) z=-z ;; *) z= ;; esac
        ar p "$f" "$member" | tar -x $z -C "$prefix" -f - || die "cannot unpack $f (ar | tar $z failed)"
      fi
    done
    # The links Debian's maintainer scripts make with update-alternatives.
    local bin="$prefix/usr/bin" lib="$prefix/usr/lib/$arch_dir"
    for t in mpirun mpiexec mpicc mpicxx mpic++; do ln -sf "$t.openmpi" "$bin/$t"; done
    [[ -e "$prefix/usr/lib/libpsm1/libpsm_infinipath.so.1.16" ]] &&
      ln -sf ../libpsm1/libpsm_infinipath.so.1.16 "$lib/libpsm_infinipath.so.1"
    echo "$stamp" >"$prefix/.zeroshard-debs"
    echo "unpacked ${#files[@]} packages into $prefix ($(du -sh "$prefix" | cut -f1))"
  fi
}

prefix_env() {
  local p=$prefix lib="$prefix/usr/lib/$arch_dir"
  export PATH="$p/usr/bin:$PATH"
  export LD_LIBRARY_PATH="$lib:$lib/openmpi/lib:$lib/pmix2/lib:$p/lib/$arch_dir${wheel_libs:+:$wheel_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export CMAKE_PREFIX_PATH="$torch_prefix;$p/usr"
  # Open MPI relocated: OPAL_PREFIX moves every directory configured relative to the prefix;
  # the configuration folder was configured absolute (/etc/openmpi), so it is moved on its own.
  export OPAL_PREFIX="$p/usr" OPAL_SYSCONFDIR="$p/etc/openmpi"
  # Debian's PMIx has its own prefix; PMIx 4 reads PMIX_PREFIX and per-folder overrides.
  export PMIX_PREFIX="$lib/pmix2"
  export PMIX_DATADIR="$PMIX_PREFIX/share" PMIX_PKGDATADIR="$PMIX_PREFIX/share/pmix"
  export PMIX_LIBDIR="$PMIX_PREFIX/lib" PMIX_PKGLIBDIR="$PMIX_PREFIX/lib/pmix"
  # No ssh or rsh here: start ranks on this host only.
  export OMPI_MCA_plm=isolated
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
}

check_prefix() {
  local missing
  missing=$(for f in "$prefix"/usr/bin/{orterun,orted,protoc} "$prefix"/usr/lib/"$arch_dir"/lib{mpi,protobuf,uring,aio}.so*; do
    [[ -f "$f" && ! -L "$f" ]] && ldd "$f" 2>/dev/null | awk -v f="$f" '/not found/ {print f ": " $1}'
  done | sort -u)
  [[ -z "$missing" ]] || die "libraries missing for the unpacked packages (add their Debian packages with ZS_GPU_EXTRA_DEBS=... scripts/fetch-gpu-debs.sh): $missing"
  mpirun -n 1 true >/dev/null 2>&1 || die "mpirun from $prefix does not start a rank: $(mpirun -n 1 true 2>&1 | head -5)"
  echo "prefix ok: $(command -v mpirun), $(protoc --version)"
}

{
  unpack_debs
  prefix_env
  check_prefix
} 2>&1 | tee -a "$out/build.log"
((PIPESTATUS[0] == 0)) || exit 1
prefix_env

# --- build ------------------------------------------------------------------------------------------
# shellcheck disable=SC2206
gpu_targets=(${ZS_GPU_TARGETS:-test_nccl test_streams test_gpu_training test_gpu_streams test_gpu_offload bench_step})
if [[ $phase == all || $phase == build ]]; then
  t0=$(date +%s)
  export TORCH_CUDA_ARCH_LIST=${ZS_TORCH_CUDA_ARCH_LIST:-9.0}  # LibTorch's CMake files read it
  {
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZS_REQUIRE_CUDA="${ZS_GPU_REQUIRE_CUDA:-ON}" \
      -DCMAKE_PREFIX_PATH="$CMAKE_PREFIX_PATH" -DNCCL_ROOT="$nccl_root" \
      -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES="${ZS_CUDA_ARCH:-90}" \
      -DMPI_C_COMPILER="$prefix/usr/bin/mpicc" -DMPIEXEC_EXECUTABLE="$prefix/usr/bin/mpirun" \
      -DProtobuf_PROTOC_EXECUTABLE="$prefix/usr/bin/protoc" &&
      cmake --build "$build" -j "$jobs" --target "${gpu_targets[@]}"
  } >>"$out/build.log" 2>&1
  rc=$?
  grep -E "^-- zeroshard:" "$out/build.log" | tail -6
  if ((rc == 0)); then say "build: ok ($(($(date +%s) - t0)) s)"; else fail "build (exit $rc; tail of build.log:)"; tail -30 "$out/build.log"; exit 1; fi
fi

# --- tests ------------------------------------------------------------------------------------------
if [[ $phase == all || $phase == test ]]; then
  [[ -f "$build/CTestTestfile.cmake" ]] || die "no build in $build: run --phase build first"
  ctest --test-dir "$build" -L gpu --output-on-failure --timeout 900 --output-junit "$out/ctest.xml" \
    -V >"$out/ctest.log" 2>&1
  rc=$?
  # A run in which every GPU test skipped proved nothing: a failure, not "ok".
  if verdict=$("$repo/scripts/gpu-test-verdict.sh" "$rc" "$out/ctest.log"); then
    say "test: $verdict"
  else
    fail "test: ${verdict#FAILED: } (see ctest.log)"
  fi
  grep -E "^ *[0-9]+/[0-9]+ Test" "$out/ctest.log"
  # CPU tests worth running under this machine's LibTorch (built with ZS_GPU_TARGETS), by name.
  if [[ -n "${ZS_GPU_EXTRA_TESTS:-}" ]]; then
    if ctest --test-dir "$build" -R "$ZS_GPU_EXTRA_TESTS" --output-on-failure --timeout 900 >"$out/ctest-extra.log" 2>&1; then
      say "extra tests ($ZS_GPU_EXTRA_TESTS): ok"
    else
      fail "extra tests ($ZS_GPU_EXTRA_TESTS; see ctest-extra.log)"
    fi
    grep -E "^ *[0-9]+/[0-9]+ Test" "$out/ctest-extra.log"
  fi
fi

# --- benchmarks ---------------------------------------------------------------------------------------
run_bench() {  # name, command...
  local name=$1
  shift
  echo "=== $name: $*" >>"$out/bench.log"
  timeout "${ZS_BENCH_TIMEOUT:-420}" "$@" >"$out/.bench.tmp" 2>&1
  local rc=$?
  cat "$out/.bench.tmp" >>"$out/bench.log"
  grep '^{' "$out/.bench.tmp" | tail -1 >>"$out/bench.jsonl"
  if grep -q "no offload optimizer" "$out/.bench.tmp"; then
    say "bench $name: not run: this build has no offload optimizer"
  elif ((rc == 0)); then
    say "bench $name: ok"
  else
    fail "bench $name (exit $rc; see bench.log)"
  fi
  rm -f "$out/.bench.tmp"
  grep -E "tokens/s|MFU|tried|peak used" "$out/bench.log" | tail -6
}
if [[ $phase == all || $phase == bench ]]; then
  [[ -x "$build/bin/bench_step" ]] || die "no bench_step in $build/bin: run --phase build first"
  benches=" ${ZS_GPU_BENCHES:-smoke gpt-1.3b gpt-offload gpt-offload-overlap gpt-offload-all} "
  [[ $benches == *" smoke "* ]] &&
    run_bench smoke "$build/bin/bench_step" --device cuda --dim 1024 --layers 8 --heads 8 --seq 1024 --vocab 50304 \
      --batch 8 --steps 8 --dtype bf16 --checkpoint 1 --attention fused
  [[ $benches == *" gpt-1.3b "* ]] && run_bench gpt-1.3b "$build/bin/bench_step" --preset gpt-1.3b
  [[ $benches == *" gpt-offload "* ]] &&
    run_bench gpt-offload "$build/bin/bench_step" --preset gpt-offload --set offload.optimizer=CPU
  # The host optimizer stepping each unit's shards during backward (offload.overlap_step).
  [[ $benches == *" gpt-offload-overlap "* ]] &&
    run_bench gpt-offload-overlap "$build/bin/bench_step" --preset gpt-offload --set offload.optimizer=CPU \
      --set offload.overlap_step=true
  # Parameters and gradients in host memory too: the device keeps no shard between uses.
  [[ $benches == *" gpt-offload-all "* ]] &&
    run_bench gpt-offload-all "$build/bin/bench_step" --preset gpt-offload --plain 0 --set offload.optimizer=CPU \
      --set offload.params=CPU --set offload.grads=CPU
fi

say "done: $([[ $failed == 0 ]] && echo 'every step passed' || echo 'some steps FAILED') (phase $phase; output in $out)"
exit $failed
