#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Measures a new user's wait: the README's first command (./scripts/demo.sh) on a fresh Debian 12
# machine, from the committed tree, with no package of ours installed and an empty ccache. The
# "machine" is a debootstrap root (Debian 12, minbase: less than a cloud image has, so a package
# set-up forgets shows up here) under build-fresh/; each run starts from a copy of a pristine root.
# Prints the time of every phase as the user sees it: packages (apt-get, from Debian's mirror),
# configure, build, the first training step, the end. Not part of ctest or CI (minutes of
# downloads and a cold build; the README's timing table has its figures).
#
#   scripts/check-fresh-demo.sh [--steps N] [--keep] [--new-base]
#     --steps N    stop training after N steps (default 20; the demo's own count is the config's)
#     --keep       keep the run's root (build-fresh/run) for a look afterwards
#     --new-base   make the pristine root again (otherwise made once and reused)
#
# Environment: ZS_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Needs root (debootstrap, chroot, mount) and about 4 GB free.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD

steps=20
keep=0
new_base=0
while (($#)); do
  case "$1" in
    --steps)
      [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "check-fresh-demo: error: --steps needs a positive number, got '${2:-}'" >&2; exit 2; }
      steps=$2
      shift
      ;;
    --keep) keep=1 ;;
    --new-base) new_base=1 ;;
    *) echo "check-fresh-demo: error: unknown argument '$1' (usage: $0 [--steps N] [--keep] [--new-base])" >&2; exit 2 ;;
  esac
  shift
done

log() { echo "check-fresh-demo: $*"; }
die() {
  echo "check-fresh-demo: FAIL: $*" >&2
  exit 1
}
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, chroot, mount)"
command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
git -C "$repo" rev-parse --verify -q HEAD >/dev/null || die "$repo is not a git checkout with a commit"
[[ -z $(git -C "$repo" status --porcelain --untracked-files=no) ]] ||
  log "note: uncommitted changes are not measured (the run uses the committed tree, HEAD)"

mirror=${ZS_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$repo/build-fresh
base=$work/base
run=$work/run
mkdir -p "$work/debs"

# shellcheck source-path=SCRIPTDIR source=chroot-mounts.sh
source scripts/chroot-mounts.sh
cleanup() {
  local rc=$?
  unmount_all_mounts check-fresh-demo
  if ((!keep)) && [[ -d $run ]] && ! mount | grep -qF " $run/"; then rm -rf "$run"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the machine: a pristine Debian 12 root, copied for each run ----
((new_base)) && rm -rf "$base"
if [[ ! -f $base/.zs-debootstrap-ok ]]; then
  rm -rf "$base"
  log "debootstrap bookworm (minbase) from $mirror into $base (once)"
  t=$SECONDS
  debootstrap --variant=minbase --cache-dir="$work/debs" bookworm "$base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    die "debootstrap failed; see $work/debootstrap.log"
  echo "deb $mirror bookworm main" >"$base/etc/apt/sources.list"
  touch "$base/.zs-debootstrap-ok"
  log "debootstrap done in $((SECONDS - t)) s"
fi
mount | grep -qF " $run/" && die "something is still mounted under $run (an earlier run killed?): unmount it first"
rm -rf "$run"
cp -a "$base" "$run"
rm -f "$run/.zs-debootstrap-ok"
mount_system_dirs "$run" 2g
cp /etc/resolv.conf "$run/etc/resolv.conf"
# The committed tree, as a clone gives it (git is not in a minimal root; nothing here needs it).
mkdir -p "$run/home/user/zeroshard"
git -C "$repo" archive HEAD | tar -x -C "$run/home/user/zeroshard"
rev=$(git -C "$repo" rev-parse --short HEAD)

# ---- the user's command, every output line stamped with the seconds since it started ----
log "running ./scripts/demo.sh --set train.steps=$steps in a fresh Debian 12 root ($rev, $(nproc) cores, empty ccache)"
out=$work/demo-$rev.log
start=$SECONDS
set +e
# shellcheck disable=SC2016  # $1 is the inner shell's
chroot "$run" /usr/bin/env -i HOME=/root LANG=C.UTF-8 TERM=dumb \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  bash -c 'cd /home/user/zeroshard && ./scripts/demo.sh --set train.steps="$1"' demo "$steps" 2>&1 </dev/null |
  while IFS= read -r line; do
    printf '[%4d s] %s\n' $((SECONDS - start)) "$line"
  done | tee "$out"
rc=${PIPESTATUS[0]}
set -e
total=$((SECONDS - start))

# ---- summary ----
echo
# The first progress line of a step ("step 1/20 ..."), not the step-0 validation line before it.
first_step=$(grep -m1 -E '^\[ *[0-9]+ s\] step [0-9]+/' "$out" | sed -E 's/^\[ *([0-9]+) s\].*/\1/' || true)
setup_line=$(grep -m1 -E 'setup: done in' "$out" | sed -E 's/^\[ *[0-9]+ s\] //' || true)
log "summary ($rev, fresh Debian 12 minbase root, $(nproc) cores, empty ccache; log: $out)"
echo "    ${setup_line:-setup did not finish}"
echo "    first training step printed at: ${first_step:-never} s after the command"
echo "    the whole demo ($steps steps and the samples): $total s, exit status $rc"
((rc == 0)) || die "the demo failed (exit status $rc); see $out"
[[ -n $first_step ]] || die "the demo printed no training step; see $out"
