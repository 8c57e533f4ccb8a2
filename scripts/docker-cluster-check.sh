#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A real cluster job in Docker, on this machine only: builds docker/Dockerfile.cpu with no network,
# starts two containers that ssh to each other (docker/entrypoint.sh), trains train_gpt with one
# rank in each, saves a checkpoint to a volume both mount, resumes from it, and checks the loss,
# the checkpoint, the metrics and TensorBoard files; then runs docker/docker-compose.yml's training
# job with Debian's docker-compose (Compose v1) and a second `up` that resumes it. Not part of ctest
# (it takes minutes: see docs/cluster.md).
#
#   scripts/docker-cluster-check.sh [--base-only] [--keep]
#     --base-only  only make the base image (debootstrap + docker import), then stop
#     --keep       leave the Docker daemon, its containers and the network up afterwards
#                  (DOCKER_HOST=unix://WORK/docker.sock docker ps)
#
# Nothing leaves this machine: the Docker daemon is started here with --bridge=none
# --iptables=false (no NAT, no default bridge), its data under WORK; no registry is used. The base
# image is Debian bookworm made by debootstrap with every package scripts/setup.sh --container
# installs (so apt traffic happens on the host, once, cached in WORK/base-*.tar), imported with
# docker import; the image is built with --network=none. The containers talk over a
# `docker network create --internal` network (no gateway), and the script checks that an outside
# address is unreachable from them.
#
# Environment: ZS_DOCKER_WORK (default build/docker-check), ZS_DEBIAN_MIRROR (default: this
# machine's Debian mirror from /etc/apt, else http://deb.debian.org/debian), ZS_DOCKER (the docker
# client; default Debian's /usr/bin/docker), ZS_COMPOSE (default docker-compose).
# Needs root (dockerd, debootstrap) and about 6 GB free under WORK. Prints each phase and its time.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

base_only=0
keep=0
for arg in "$@"; do
  case "$arg" in
    --base-only) base_only=1 ;;
    --keep) keep=1 ;;
    *) echo "docker-cluster-check: error: unknown argument '$arg' (usage: $0 [--base-only] [--keep])" >&2; exit 2 ;;
  esac
done

log() { echo "docker-cluster-check: $*"; }
die() {
  echo "docker-cluster-check: FAIL: $*" >&2
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

[[ $(id -u) -eq 0 ]] || die "needs root (it starts dockerd and runs debootstrap)"
work=$(realpath -m "${ZS_DOCKER_WORK:-build/docker-check}")
mkdir -p "$work"

# ---- tools: Debian's Docker engine, Compose v1 and debootstrap ----
missing=()
for p in docker.io docker-compose debootstrap; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing with apt-get: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null
fi
docker_cli=${ZS_DOCKER:-}
if [[ -z $docker_cli ]]; then
  docker_cli=docker
  [[ -x /usr/bin/docker ]] && docker_cli=/usr/bin/docker  # Debian's, the daemon's version
fi
compose=${ZS_COMPOSE:-docker-compose}
export DOCKER_HOST="unix://$work/docker.sock"
dk() { "$docker_cli" "$@"; }

# ---- the Docker daemon: ours alone (own socket, data root and exec root), off the network ----
dockerd_pid=
stop_everything() {
  local rc=$?
  if ((keep)) || [[ -z $dockerd_pid ]]; then
    ((keep)) && [[ -n $dockerd_pid ]] && log "--keep: dockerd (pid $dockerd_pid) left running: DOCKER_HOST=$DOCKER_HOST"
    exit "$rc"
  fi
  dk rm -f zs-check-node0 zs-check-node1 >/dev/null 2>&1 || true
  "$compose" -f docker/docker-compose.yml -f "$work/compose-check.yml" -p zscheck down -v >/dev/null 2>&1 || true
  dk network rm zs-check-net >/dev/null 2>&1 || true
  kill "$dockerd_pid" 2>/dev/null || true
  for _ in $(seq 60); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.5; done
  exit "$rc"
}
trap stop_everything EXIT
if ! dk info >/dev/null 2>&1; then
  rm -f "$work/docker.sock"
  dockerd --data-root "$work/data-root" --exec-root "$work/exec" --pidfile "$work/dockerd.pid" \
    --host "$DOCKER_HOST" --bridge=none --iptables=false --ip-masq=false >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 60); do dk info >/dev/null 2>&1 && break; sleep 0.5; done
  dk info >/dev/null 2>&1 || die "dockerd did not start; see $work/dockerd.log"
  log "dockerd started (pid $dockerd_pid, data under $work)"
else
  log "using the dockerd already listening on $DOCKER_HOST"
fi
phase_done "docker daemon"

# ---- the base image: debootstrap with setup.sh's packages, docker import; cached ----
mirror=${ZS_DEBIAN_MIRROR:-}
if [[ -z $mirror ]]; then
  mirror=$(grep -hoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/* 2>/dev/null |
    awk '{print $2}' | head -1 || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi
mapfile -t packages < <(scripts/setup.sh --list-packages --container)
# debootstrap's resolver does not choose among virtual packages: libltdl-dev (from Open MPI's
# headers) needs automake-1.16, which only automake provides.
packages+=(automake)
key=$(printf '%s\n' bookworm "${packages[@]}" | sha256sum | cut -c1-12)
base_image=zeroshard-base:bookworm-$key
base_tar=$work/base-bookworm-$key.tar
if dk image inspect "$base_image" >/dev/null 2>&1; then
  log "base image $base_image exists"
else
  if [[ ! -f $base_tar ]]; then
    rootfs=$work/rootfs-$key
    rm -rf "$rootfs"
    log "debootstrap bookworm from $mirror with ${#packages[@]} packages (and their dependencies): minutes"
    include=$(IFS=,; echo "${packages[*]}")
    mkdir -p "$work/debs"  # the downloaded packages, kept for the next debootstrap
    debootstrap --variant=minbase --cache-dir="$work/debs" --include="$include" bookworm "$rootfs" "$mirror" \
      >"$work/debootstrap.log" 2>&1 ||
      die "debootstrap failed; see $work/debootstrap.log"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    # The image's apt points at the same mirror (no apt traffic is needed to build it).
    echo "deb $mirror bookworm main" >"$rootfs/etc/apt/sources.list"
    tar -C "$rootfs" -cf "$base_tar.partial" . && mv "$base_tar.partial" "$base_tar"
    rm -rf "$rootfs"
  fi
  dk import "$base_tar" "$base_image" >/dev/null
  log "imported $base_image ($(du -h "$base_tar" | cut -f1) tarball)"
fi
phase_done "base image"
((base_only)) && exit 0

# ---- the image, built with no network: setup.sh finds every package in the base ----
image=zeroshard:cpu
dk build --network=none -f docker/Dockerfile.cpu --build-arg BASE_IMAGE="$base_image" -t "$image" . \
  >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; die "docker build failed; see $work/build.log"; }
log "built $image ($(grep -oE 'setup: done in .*' "$work/build.log" | tail -1 || echo 'cached'))"
phase_done "image build"

# ---- two nodes on an internal network, sharing the ssh key and a checkpoint volume ----
# The network's bridge forwards nothing: with --iptables=false Docker installs no isolation rules
# and containers keep a default route to the bridge, so IPv4 forwarding is turned off on this
# bridge alone (the host's other interfaces are left as they are); packets for other hosts are
# dropped here (the kernel counts them in Ip InAddrErrors), never routed off the machine.
dk rm -f zs-check-node0 zs-check-node1 >/dev/null 2>&1 || true
dk network rm zs-check-net >/dev/null 2>&1 || true
dk volume rm zs-check-ssh >/dev/null 2>&1 || true
dk network create --internal -o com.docker.network.bridge.name=zscheck0 zs-check-net >/dev/null
sysctl -qw net.ipv4.conf.zscheck0.forwarding=0
out=$work/out
rm -rf "$out"
mkdir -p "$out"
node_args=(--network zs-check-net -v zs-check-ssh:/zs-ssh -v "$out:/ckpt" --shm-size 1g -e ZS_SSH=1
  -e OMPI_MCA_btl_tcp_if_include=eth0 -e OMPI_MCA_oob_tcp_if_include=eth0)
dk run -d --name zs-check-node1 --hostname node1 --network-alias node1 "${node_args[@]}" "$image" sleep infinity >/dev/null
dropped_before=$(awk '/^Ip: [0-9]/ {print $6}' /proc/net/snmp)
if dk exec zs-check-node1 timeout 5 bash -c 'exec 3<>/dev/tcp/1.1.1.1/53' 2>/dev/null; then
  die "a container on the internal network reached 1.1.1.1:53: traffic would leave this machine"
fi
dropped_after=$(awk '/^Ip: [0-9]/ {print $6}' /proc/net/snmp)
((dropped_after > dropped_before)) || die "the connection attempt to 1.1.1.1 was not dropped at this host's bridge"
log "from a container, an outside address (1.1.1.1:53) is unreachable: dropped at the bridge (Ip InAddrErrors +$((dropped_after - dropped_before)))"

job() {  # job NAME ARGS...: train_gpt at 2 ranks, one per container, launched from node0
  local name=$1
  shift
  dk rm -f zs-check-node0 >/dev/null 2>&1 || true
  dk run --name zs-check-node0 --hostname node0 --network-alias node0 "${node_args[@]}" \
    -e ZS_WAIT_FOR_HOSTS="node0 node1" -e ZS_LOG_LEVEL=info "$image" \
    zeroshard-launch -n 2 --hostfile docker/hostfile -- /opt/zeroshard/build/bin/train_gpt \
    --config /opt/zeroshard/examples/configs/gpt_tiny.textproto --set logging.progress=LINES \
    --set sample.tokens=0 --set checkpoint.dir=/ckpt/run --set checkpoint.interval_steps=10 "$@" \
    >"$work/$name.log" 2>&1 || { tail -40 "$work/$name.log" >&2; die "$name: the job failed; see $work/$name.log"; }
}
expect() {  # expect LOG REGEX WHAT
  grep -qE "$2" "$work/$1.log" || { tail -40 "$work/$1.log" >&2; die "$1: $3 (no /$2/ in $work/$1.log)"; }
}
job train --set train.steps=20 --check-loss-decreases --metrics-out /ckpt/train.jsonl --tensorboard /ckpt/tb
expect train "train_gpt: 2 rank\(s\)" "not 2 ranks"
expect train "on node0.*on node1|on node1.*on node0|2 rank\(s\), 1 on this host" "the ranks did not run in two containers"
expect train "CHECK PASSED: validation loss" "the loss did not fall"
expect train "step-00000020 durable" "no checkpoint at step 20"
phase_done "cluster job (train, save)"
job resume --set train.steps=30 --resume --metrics-out /ckpt/resume.jsonl
expect resume "resumed at step 20" "did not resume from the checkpoint"
expect resume "step 30/30" "did not reach step 30"
expect resume "step-00000030 durable" "no checkpoint at step 30"
phase_done "cluster job (resume)"

# ---- what the jobs left on the volume ----
dk run --rm --network none -v "$out:/ckpt" "$image" zeroshard-ckpt verify /ckpt/run >"$work/verify.log" 2>&1 ||
  { cat "$work/verify.log" >&2; die "zeroshard-ckpt verify failed"; }
grep -q "verified" "$work/verify.log" || die "zeroshard-ckpt verify printed no verdict"
grep -q "world_size *2\|world size *2\|2 rank" <(dk run --rm --network none -v "$out:/ckpt" "$image" zeroshard-ckpt info /ckpt/run) ||
  die "the checkpoint does not say it was saved by 2 ranks"
/usr/bin/python3 - "$out/train.jsonl" "$out/resume.jsonl" <<'PY' || die "the metrics files do not show a falling loss"
import json, sys
train = [json.loads(l) for l in open(sys.argv[1])]
resume = [json.loads(l) for l in open(sys.argv[2])]
steps = [l for l in train if "loss" in l and "step" in l and "eval" not in l]
evals = [l for l in train + resume if l.get("eval") == "val_loss"]
assert steps[0]["step"] == 1 and steps[-1]["step"] == 20, steps[-1]
assert [l["step"] for l in resume if "loss" in l and "eval" not in l] == list(range(21, 31))
assert evals[-1]["value"] < 0.9 * evals[0]["value"], (evals[0], evals[-1])
print("docker-cluster-check: val loss %.4f (step 0) -> %.4f (step 30, after the resume)" % (evals[0]["value"], evals[-1]["value"]))
PY
events=$(find "$out/tb" -name 'events.out.tfevents.*' | head -1)
[[ -n $events ]] || die "no TensorBoard event file under $out/tb"
/usr/bin/python3 tests/tools/read_tfevents.py "$events" --expect-tag train/loss --expect-steps 20 >"$work/tfevents.log" ||
  die "the TensorBoard file does not read back; see $work/tfevents.log"
log "checkpoint verified, metrics and TensorBoard files read back"
phase_done "checks"

# ---- docker/docker-compose.yml with Debian's Compose v1: its training job, then the same job
# continued from its checkpoint by a second `up` (new containers, the key and checkpoint volumes
# reused) ----
# On the network above (its bridge forwards nothing), through an override file.
cat >"$work/compose-check.yml" <<'YAML'
version: "2.4"
networks:
  cluster:
    external: true
    name: zs-check-net
YAML
compose_args=(-f docker/docker-compose.yml -f "$work/compose-check.yml" -p zscheck)
"$compose" "${compose_args[@]}" down -v >/dev/null 2>&1 || true
compose_up() {  # compose_up NAME STEPS: the compose file's job to STEPS steps, its log in NAME.log
  if ! ZS_TRAIN_STEPS=$2 "$compose" "${compose_args[@]}" up --no-build --force-recreate --abort-on-container-exit \
    --exit-code-from node0 >"$work/$1.log" 2>&1; then
    tail -30 "$work/$1.log" >&2
    die "docker-compose up ($1) failed; see $work/$1.log"
  fi
}
compose_up compose-train 20
expect compose-train "train_gpt: 2 rank\(s\)" "compose: not 2 ranks"
expect compose-train "step 20/20" "compose: did not reach step 20"
expect compose-train "step-00000020 durable" "compose: no checkpoint at step 20"
compose_up compose-resume 30
expect compose-resume "resumed at step 20" "compose: the second up did not resume from step 20"
expect compose-resume "step 30/30" "compose: the second up did not reach step 30"
"$compose" "${compose_args[@]}" down -v >/dev/null 2>&1 || true
log "docker-compose $("$compose" version --short 2>/dev/null || echo v1): trained to step 20 across the two containers, then a second up (new containers, the same key and checkpoint volumes) resumed to step 30"
phase_done "compose"

summary=$(printf '%s, ' "${timings[@]}")
log "all passed in $((SECONDS - start)) s (${summary%, })"
