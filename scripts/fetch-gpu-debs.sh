#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# fetch-gpu-debs.sh: on a networked Debian 12 (bookworm, amd64) machine, download the Debian
# packages that scripts/gpu-check.sh unpacks on a GPU machine that has no network and no MPI,
# protobuf C++ library, liburing, libaio or GoogleTest (docs/gpu.md).
#
#   scripts/fetch-gpu-debs.sh [DEST]        DEST defaults to .gpu-debs (ignored by git)
#
# What is fetched:
#   - the packages the build compiles and links against, and the tools it runs (mpirun, protoc):
#     the -dev packages are taken without their own Depends (autotools, gfortran and other -dev
#     headers are not needed to build zeroshard);
#   - the run-time libraries those need, as apt resolves them for a machine that already has what
#     a stock CUDA machine has: Debian's Priority: required packages and build-essential, with all
#     they depend on. A library that turns out to be missing there is named by gpu-check.sh
#     (ldd); add its package with ZS_GPU_EXTRA_DEBS="pkg ..." and fetch again.
# Left out on purpose (their absence is harmless there): hwloc's optional plugins (X11, OpenCL,
# libxml2 and ICU, ~15 MB) and openssh-client (mpirun starts ranks on its own host only).
#
# DEST ends up with the .deb files and MANIFEST.txt (package, version, bytes, sha256 per file).
# Needs apt-get; runs `apt-get update` first when the package lists are missing (root only).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

dest=${1:-.gpu-debs}

# --- what the build needs ---
# Headers, CMake files, static test libraries and the MPI/protoc tools (Depends not followed).
direct=(
  libopenmpi-dev libprotobuf-dev liburing-dev libaio-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev
  libpcre2-dev libutf8proc-dev libsentencepiece-dev libicu-dev  # tokenizers and chat templates (zs_text)
  libpng-dev zlib1g-dev                                         # zeroshard-plot; gzip-compressed datasets
)
# Run-time packages: their dependency closure is resolved.
runtime=(
  openmpi-bin openmpi-common libopenmpi3
  protobuf-compiler libprotoc32 libprotobuf32 libprotobuf-lite32
  liburing2 libaio1 libbenchmark1debian
  libpcre2-8-0 libutf8proc2 libsentencepiece0 libicu72 libpng16-16 zlib1g
)
# Treated as present: never fetched, and nothing is fetched for their sake.
skip=(libhwloc-plugins openssh-client)
# shellcheck disable=SC2206
extra=(${ZS_GPU_EXTRA_DEBS:-})

die() { echo "fetch-gpu-debs: error: $*" >&2; exit 1; }

# --- the machine must be what the packages are for ---
# shellcheck source=/dev/null
. /etc/os-release
[[ "${ID:-}" == debian && "${VERSION_CODENAME:-}" == bookworm ]] ||
  die "run this on Debian 12 (bookworm); this is ${PRETTY_NAME:-unknown}. The packages must match gpu-check.sh's expectations (Open MPI 4.1.4, protobuf 3.21.12)"
[[ "$(dpkg --print-architecture)" == amd64 ]] ||
  die "run this on amd64 (the GPU machines are x86-64); this is $(dpkg --print-architecture)"
command -v apt-get >/dev/null || die "apt-get not found"

# "package candidate" for each name (candidate "(none)" when apt has no such package).
candidates() {
  apt-cache policy "$@" 2>/dev/null | awk '/^[^ ].*:$/ {p = substr($0, 1, length($0) - 1)}
                                         /^  Candidate:/ {print p, $2}'
}
if [[ "$(candidates openmpi-bin)" != "openmpi-bin "[0-9]* ]]; then
  [[ $(id -u) -eq 0 ]] || die "apt has no package lists (no candidate for openmpi-bin); run 'apt-get update' as root first"
  echo "fetch-gpu-debs: apt-get update"
  apt-get update -qq
fi
wanted=("${direct[@]}" "${runtime[@]}" "${extra[@]}")
known=$(candidates "${wanted[@]}" | awk '$2 != "(none)" {print $1}')
for p in "${wanted[@]}"; do
  grep -qx "$p" <<<"$known" || die "package '$p' has no installation candidate in this machine's apt sources"
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Names apt would install on a machine with nothing (an empty dpkg status).
closure_from_nothing() {
  apt-get -s -o Dir::State::status=/dev/null -o APT::Install-Recommends=false \
    -o APT::Install-Suggests=false install "$@" 2>/dev/null | awk '/^Inst / {print $2}' | sort -u
}

# --- the stock machine, as a fake dpkg status file ---
mapfile -t required < <(apt-cache dumpavail | awk '
  /^Package:/ {p = $2} /^Priority: required/ {print p}' | sort -u)
{
  closure_from_nothing "${required[@]}" build-essential
  printf '%s\n' "${required[@]}" build-essential
} | sort -u >"$work/present.txt"
# One stanza per package, with the fields apt needs to take it as installed (Provides matters:
# packages depend on virtual names such as debconf-2.0).
mapfile -t present <"$work/present.txt"
apt-cache show --no-all-versions "${present[@]}" 2>/dev/null |
  awk '/^(Package|Version|Architecture|Multi-Arch|Provides|Essential):/ {print}
       /^$/ {print "Status: install ok installed"; print ""}' >"$work/status"
# Skipped packages get a version the archive does not have, so apt knows no Depends for them
# (with the archive's version it would fetch their dependencies to "fix" them).
for p in "${skip[@]}"; do
  printf 'Package: %s\nVersion: 99:0-zeroshard\nArchitecture: amd64\nStatus: install ok installed\n\n' "$p"
done >>"$work/status"

# --- what remains to install on top of it ---
apt-get -s -o Dir::State::status="$work/status" -o APT::Install-Recommends=false \
  -o APT::Install-Suggests=false install "${runtime[@]}" "${extra[@]}" >"$work/sim.txt" 2>&1 ||
  { cat "$work/sim.txt" >&2; die "apt could not resolve the run-time packages (above)"; }
awk '/^Inst / {print $2}' "$work/sim.txt" >"$work/fetch.txt"
printf '%s\n' "${direct[@]}" "${runtime[@]}" "${extra[@]}" >>"$work/fetch.txt"
mapfile -t fetch < <(sort -u "$work/fetch.txt")

# --- download ---
mkdir -p "$dest"
rm -f "$dest"/*.deb "$dest/MANIFEST.txt"
echo "fetch-gpu-debs: downloading ${#fetch[@]} packages into $dest"
# shellcheck disable=SC2015  # grep finding nothing to print is not a failure
(cd "$dest" && apt-get download -qq "${fetch[@]}" 2>&1 | grep -v "unsandboxed as root" || true)
shopt -s nullglob
debs=("$dest"/*.deb)
((${#debs[@]} == ${#fetch[@]})) ||
  die "expected ${#fetch[@]} .deb files in $dest, found ${#debs[@]}: apt-get download failed for some"

{
  echo "# zeroshard GPU-machine packages from Debian 12 ($(date -u +%Y-%m-%d)), fetched by scripts/fetch-gpu-debs.sh"
  echo "# package version bytes sha256"
  for f in "${debs[@]}"; do
    printf '%s %s %s %s\n' "$(dpkg-deb -f "$f" Package)" "$(dpkg-deb -f "$f" Version)" \
      "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)"
  done
} >"$dest/MANIFEST.txt"
total=$(du -cb "${debs[@]}" | tail -1 | cut -f1)
echo "fetch-gpu-debs: ${#debs[@]} packages, $((total / 1024)) KiB in $dest (list: $dest/MANIFEST.txt)"
