#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds zeroshard against LibTorch 2.x from Debian 13 (trixie) in a debootstrap root under
# build-lt2/, and runs the whole CPU test suite there: the 2.x code paths (device-type autocast
# API, fused Adam, scaled_dot_product_attention, c10::Stream/Event) are compiled and run on CPU.
# Trixie also brings GCC 14, Open MPI 5, a newer GoogleTest and python3-torch 2.6; the summary
# keeps LibTorch-API compile errors apart from those toolchain ones and from test failures.
# Not part of ctest or CI: it takes far longer than CI allows (docs/gpu.md gives the measured phases).
#
#   scripts/check-libtorch2.sh [--cuda] [--no-tests] [--fresh-root] [TARGET...]
#     --cuda        instead: a second root (build-lt2/root-cuda) with contrib and non-free enabled,
#                   libtorch-cuda-dev and nvidia-cuda-toolkit (several GB), configured with
#                   -DZS_REQUIRE_CUDA=ON and built (compile and link only; nothing runs)
#     --no-tests    build only
#     --fresh-root  delete the root and make it again (otherwise it is made once and reused)
#     TARGET        build only these CMake targets (default all); then name their tests with
#                   ZS_CTEST_ARGS, e.g. ZS_CTEST_ARGS='-R ^test_streams$' (split on spaces; others are "Not Run")
#
# What it does, each phase timed: debootstrap --variant=minbase trixie (once); chroot apt-get
# install of the packages `scripts/setup.sh --list-packages --tests` names (with --cuda: those of
# `--list-packages --cuda` plus the CUDA LibTorch and toolkit), each checked to exist in trixie first (a missing one is
# reported and left out); the source tree bind-mounted read-only at /src, the build folder
# build-lt2/build (or build-cuda) at /zs-build; cmake + ninja inside the root; ctest there.
# /proc, /sys, /dev, /dev/pts and a /dev/shm tmpfs are mounted for the chroot and unmounted on exit.
#
# Environment: ZS_DEBIAN_MIRROR (default http://deb.debian.org/debian), ZS_JOBS (default: cores),
# ZS_TEST_JOBS (default 2), ZS_CTEST_ARGS (extra ctest arguments, e.g. "-R comm").
# Needs root (debootstrap, chroot, mount) and about 6 GB free (--cuda: 15 GB more).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD

cuda=0
tests=1
fresh=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --cuda) cuda=1 tests=0 ;;
    --no-tests) tests=0 ;;
    --fresh-root) fresh=1 ;;
    -*) echo "check-libtorch2: error: unknown option '$arg' (usage: $0 [--cuda] [--no-tests] [--fresh-root] [TARGET...])" >&2; exit 2 ;;
    *) targets+=("$arg") ;;
  esac
done

log() { echo "check-libtorch2: $*"; }
indent() { while IFS= read -r line; do echo "    $line"; done; }
die() {
  echo "check-libtorch2: FAIL: $*" >&2
  exit 1
}
start=$SECONDS
phase_start=$SECONDS
timings=()
phase_done() {
  timings+=("$1 $((SECONDS - phase_start)) s")
  log "$1 done in $((SECONDS - phase_start)) s"
  phase_start=$SECONDS
}

[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
mirror=${ZS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$repo/build-lt2
name=root
build_name=build
((cuda)) && name=root-cuda build_name=build-cuda
root=$work/$name
build=$work/$build_name
mkdir -p "$work/debs" "$build"

# ---- mounts, undone on exit (in reverse order) ----
# shellcheck source-path=SCRIPTDIR source=chroot-mounts.sh
source scripts/chroot-mounts.sh
unmount_all() {
  local rc=$?
  unmount_all_mounts check-libtorch2
  exit "$rc"
}
trap unmount_all EXIT
trap 'exit 130' INT TERM

# Runs a command in the root with a clean environment (bash -c SCRIPT).
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    "$@"
}

# ---- phase 1: the trixie root (made once) ----
((fresh)) && rm -rf "$root"
if [[ ! -f $root/.zs-debootstrap-ok ]]; then
  rm -rf "$root"
  log "debootstrap trixie (minbase) from $mirror into $root: minutes"
  debootstrap --variant=minbase --cache-dir="$work/debs" trixie "$root" "$mirror" >"$work/debootstrap-$name.log" 2>&1 ||
    die "debootstrap failed; see $work/debootstrap-$name.log"
  touch "$root/.zs-debootstrap-ok"
fi
phase_done debootstrap

mount_system_dirs "$root" 4g
mnt "$root/src" --bind "$repo"
mount -o remount,bind,ro "$root/src"  # the build must not write into the source tree
mnt "$root/zs-build" --bind "$build"
cp /etc/resolv.conf "$root/etc/resolv.conf"

# ---- phase 2: packages (setup.sh's list, in trixie) ----
components=main
((cuda)) && components="main contrib non-free non-free-firmware"
echo "deb $mirror trixie $components" >"$root/etc/apt/sources.list"
# With --cuda, not the tests' packages: python3-torch needs the CPU libtorch2.6, which
# libtorch-cuda-2.6 conflicts with (and nothing runs there). The CUDA LibTorch and the toolkit with
# nvcc (non-free) come in place of what setup.sh --cuda fetches from NVIDIA and PyTorch.
mapfile -t wanted < <(if ((cuda)); then scripts/setup.sh --list-packages --cuda; else scripts/setup.sh --list-packages --tests; fi)
((cuda)) && wanted+=(libtorch-cuda-dev nvidia-cuda-toolkit)
in_root apt-get update -qq >"$work/apt-$name.log" 2>&1 || die "apt-get update in the root failed; see $work/apt-$name.log"
packages=()
absent=()
for p in "${wanted[@]}"; do
  if in_root apt-cache show --no-all-versions "$p" >/dev/null 2>&1; then packages+=("$p"); else absent+=("$p"); fi
done
((${#absent[@]})) && log "not in trixie ($components), left out: ${absent[*]}"
log "apt-get install in the root: ${packages[*]}"
# nvidia-cudnn, which libtorch-cuda-2.6 depends on, downloads cuDNN from NVIDIA when it is
# configured, if its license question is answered "I Agree" (the default). This machine reaches no
# NVIDIA server, and nothing runs in this root: decline (the package then installs nothing), and
# after the install give the linker a stub libcudnn.so.9 (below).
((cuda)) && { echo "nvidia-cudnn nvidia-cudnn/question select I Decline" | in_root debconf-set-selections; }
in_root dpkg --configure -a >>"$work/apt-$name.log" 2>&1  # finishes an install that was interrupted
in_root apt-get install -y -q --no-install-recommends "${packages[@]}" >>"$work/apt-$name.log" 2>&1 ||
  { tail -20 "$work/apt-$name.log" >&2; die "apt-get install in the root failed; see $work/apt-$name.log"; }
in_root apt-get clean
# The stub: libtorch_cuda.so needs libcudnn.so.9, and linking a program against it wants every
# symbol it uses from there defined. One empty function per such symbol, in a library with that
# soname: enough to link, never loaded (nothing runs in this root), and named so in the summary.
stub=/usr/lib/x86_64-linux-gnu/libcudnn.so.9
if ((cuda)) && [[ ! -e $root$stub ]]; then
  cat >"$root/tmp/cudnn-stub.sh" <<'STUB'
set -euo pipefail
mapfile -t libs < <(grep -l 'libcudnn\.so\.9' /usr/lib/x86_64-linux-gnu/libtorch*.so.2.* || true)
((${#libs[@]})) || { echo "no LibTorch library needs libcudnn.so.9" >&2; exit 1; }
# Names come as cudnnCreate@libcudnn.so.9: the stub defines them in that symbol version.
nm -D --undefined-only "${libs[@]}" | awk '$2 ~ /^cudnn/ { split($2, n, "@"); print "void " n[1] "(void) {}" }' |
  sort -u >/tmp/cudnn-stub.c
echo 'libcudnn.so.9 { global: cudnn*; local: *; };' >/tmp/cudnn-stub.map
gcc -shared -fPIC -Wl,-soname,libcudnn.so.9 -Wl,--version-script=/tmp/cudnn-stub.map -o "$1" /tmp/cudnn-stub.c
echo "$(wc -l </tmp/cudnn-stub.c) cuDNN symbols"
STUB
  in_root bash /tmp/cudnn-stub.sh "$stub" >"$work/cudnn-stub.log" 2>&1 ||
    die "making the link-only libcudnn.so.9 stub failed; see $work/cudnn-stub.log"
  log "link-only stub $stub in the root: $(cat "$work/cudnn-stub.log") (cuDNN itself is not installed)"
fi
# shellcheck disable=SC2016  # dpkg-query's own ${...} fields
versions=$(in_root dpkg-query -W -f='${Package} ${Version}\n' "${packages[@]}" g++ libopenmpi-dev googletest 2>/dev/null |
  grep -E '^(libtorch(-cuda)?-dev|python3-torch|g\+\+|libopenmpi-dev|googletest|libgtest-dev|cmake|protobuf-compiler|nvidia-cuda-toolkit) ' || true)
log "versions in the root:"
indent <<<"$versions"
phase_done packages

# ---- phase 3: configure ----
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo)
((cuda)) && cmake_args+=(-DZS_REQUIRE_CUDA=ON -DZS_BUILD_TESTS=ON)
if ! in_root cmake -S /src -B /zs-build "${cmake_args[@]}" >"$build/configure.log" 2>&1; then
  tail -30 "$build/configure.log" >&2
  die "configure failed; see $build/configure.log"
fi
grep -E '^-- zeroshard:' "$build/configure.log" | indent || true
phase_done configure

# ---- phase 4: build (keeps going past errors, so every broken file is reported) ----
jobs=${ZS_JOBS:-$(nproc)}
target_args=()
for t in "${targets[@]}"; do target_args+=(--target "$t"); done
log "building ${targets[*]:-everything} with $jobs jobs (log: $build/build.log)"
build_ok=1
in_root cmake --build /zs-build -j "$jobs" "${target_args[@]}" -- -k 0 >"$build/build.log" 2>&1 || build_ok=0
phase_done build

# Sorts the compiler's error lines into LibTorch-API errors and toolchain ones.
classify_errors() {
  grep -E '(error|Error)[: ]' "$build/build.log" | grep -vE '^(ninja|FAILED):' | sort -u | awk '
    /\[-W[a-z0-9=-]+\]/ || /-Werror/                                { print "toolchain (GCC 14 warning as error): " $0; next }
    /mpi\.h|MPI_[A-Za-z]|ompi_|OMPI_|opal_/                         { print "toolchain (Open MPI 5): " $0; next }
    /gtest|gmock|testing::|GTEST_|TYPED_TEST|INSTANTIATE_TEST/      { print "toolchain (GoogleTest): " $0; next }
    /at::|c10::|torch::|ATen\/|c10\/|torch\/csrc|caffe2|TORCH_|C10_/ { print "LibTorch API: " $0; next }
    /undefined reference/                                           { print "link: " $0; next }
    { print "other: " $0 }'
}

# ---- phase 5: ctest ----
test_ok=1
if ((tests && build_ok)); then
  log "ctest -j ${ZS_TEST_JOBS:-2} (log: $build/ctest.log)"
  # mpirun as root; Open MPI 5's launcher (PRRTE) takes oversubscription from its own variable.
  # shellcheck disable=SC2086
  in_root OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe \
    ctest --test-dir /zs-build --output-on-failure --timeout 900 -j "${ZS_TEST_JOBS:-2}" \
    --output-junit /zs-build/ctest.xml ${ZS_CTEST_ARGS:-} >"$build/ctest.log" 2>&1 || test_ok=0
  phase_done ctest
fi

# ---- summary ----
echo
log "summary ($([[ $name == root ]] && echo "CPU LibTorch 2.x" || echo "CUDA LibTorch 2.x, compile and link only"))"
indent <<<"$versions"
if ((build_ok)); then
  log "build: ok"
else
  errors=$(classify_errors)
  for kind in "LibTorch API" "toolchain (GCC 14" "toolchain (Open MPI 5)" "toolchain (GoogleTest)" "link" "other"; do
    n=$(grep -c "^$kind" <<<"$errors" || true)
    ((n)) || continue
    log "build errors, $kind$([[ $kind == "toolchain (GCC 14" ]] && echo " warnings as errors)"): $n"
    grep "^$kind" <<<"$errors" | cut -d: -f2- | cut -c1-300 | head -20 | indent
  done
  log "failed targets: $(grep -c '^FAILED:' "$build/build.log" || true) (ninja -k 0; see $build/build.log)"
fi
if ((tests && build_ok)); then
  grep -E 'tests passed|tests failed' "$build/ctest.log" | indent || true
  if ((!test_ok)); then
    log "failing tests:"
    # From the per-test lines, so an interrupted ctest (no final list) still names them.
    grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*(\*\*\*|Failed|Not Run)' "$build/ctest.log" | indent || true
  fi
fi
summary=$(printf '%s, ' "${timings[@]}")
log "done in $((SECONDS - start)) s (${summary%, })"
((build_ok && test_ok)) || exit 1
