#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks of docker/ that need no docker engine (none runs in CI, and hadolint is not a Debian 12
# package):
#   1. Dockerfiles: every file they COPY or name under scripts/ or docker/ exists; FROM pins a tag;
#      apt-get installs with -y --no-install-recommends and cleans its lists in the same RUN, and so
#      does scripts/setup.sh (with --container); ENTRYPOINT/CMD in exec (JSON) form.
#   2. Shell scripts (entrypoint, sbatch, scripts/*.sh, this file, the launcher tests' fake_trial.sh):
#      bash -n and shellcheck.
#   3. docker-compose.yml: Debian 12's Compose v1 (docker-compose 1.29) accepts it (`config -q`,
#      no daemon needed: file format 2.x, no top-level `name:`), its Dockerfile exists, its
#      hostnames are the hosts of docker/hostfile, and zeroshard-launch accepts that hostfile and
#      the compose command line (dry run). A real run: scripts/docker-cluster-check.sh.
#   4. entrypoint.sh's key exchange: two containers' worth of it started at once agree on one key
#      and install it with the right permissions.
#   5. docker/slurm/train.sbatch builds the expected zeroshard-launch / srun command.
# usage: check_docker.sh SOURCE_DIR ZEROSHARD_LAUNCH
set -euo pipefail

src=$(cd "$1" && pwd)
launch=$(realpath "$2")  # absolute: section 5 runs from another folder
[[ -x $launch ]] || { echo "FAIL: $2 is not an executable zeroshard-launch" >&2; exit 1; }
failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }
cd "$src"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# ---- 1. Dockerfiles ----
for df in docker/Dockerfile.cpu docker/Dockerfile.cuda; do
  [[ -f $df ]] || { fail "$df is missing"; continue; }
  # One instruction per line: join continuations, drop comments.
  sed -e '/^[[:space:]]*#/d' "$df" | sed -e ':a' -e '/\\$/{N;s/\\\n/ /;ba' -e '}' >"$work/joined"
  declare -A args=()
  while read -r instr rest; do
    case "${instr^^}" in
      ARG)
        name=${rest%%=*}
        [[ $rest == *=* ]] && args[$name]=${rest#*=}
        ;;
      FROM)
        image=${rest%% *}
        if [[ $image =~ ^\$\{([A-Za-z_]+)\}$ ]]; then image=${args[${BASH_REMATCH[1]}]:-}; fi
        image=${image//\"/}
        [[ $image == *:* && $image != *:latest ]] || fail "$df: FROM '$image' does not pin a tag"
        ;;
      COPY | ADD)
        read -r -a words <<<"$rest"
        [[ ${words[0]} == --from=* ]] && continue
        for ((i = 0; i < ${#words[@]} - 1; i++)); do
          [[ ${words[i]} == --* ]] && continue
          [[ -e ${words[i]} ]] || fail "$df: $instr source '${words[i]}' does not exist in the build context"
        done
        ;;
      RUN)
        if [[ $rest == *"scripts/setup.sh"* ]]; then
          [[ $rest == *"--container"* ]] || fail "$df: scripts/setup.sh without --container (sshd, no recommended packages)"
          [[ $rest == *"rm -rf /var/lib/apt/lists"* ]] || fail "$df: RUN with scripts/setup.sh does not remove /var/lib/apt/lists"
        fi
        if [[ $rest == *"apt-get install"* ]]; then
          [[ $rest == *"--no-install-recommends"* ]] || fail "$df: apt-get install without --no-install-recommends"
          [[ $rest == *"install -y"* ]] || fail "$df: apt-get install without -y"
          [[ $rest == *"rm -rf /var/lib/apt/lists"* ]] || fail "$df: RUN with apt-get install does not remove /var/lib/apt/lists"
        fi
        ;;
      ENTRYPOINT | CMD)
        [[ $rest == \[* ]] || fail "$df: $instr is not in exec (JSON) form"
        ;;
    esac
  done <"$work/joined"
  unset args
  # Files of this repository named anywhere in the Dockerfile.
  while read -r path; do
    [[ -e $path ]] || fail "$df names '$path', which does not exist"
  done < <(grep -oE '(^|[ "=])(scripts|docker)/[A-Za-z0-9_./-]+' "$df" | sed -E 's/^[ "=]//' | sort -u)
  pass "$df"
done

# ---- 2. shell scripts ----
scripts=(docker/entrypoint.sh docker/slurm/train.sbatch tests/tools/check_docker.sh tests/tools/fake_trial.sh scripts/*.sh)
for s in "${scripts[@]}"; do
  bash -n "$s" || fail "$s: bash -n"
done
if command -v shellcheck >/dev/null; then
  shellcheck -x "${scripts[@]}" || fail "shellcheck found problems (above)"
  pass "bash -n and shellcheck: ${scripts[*]}"
else
  fail "shellcheck is not installed (scripts/setup.sh installs it)"
fi

# ---- 3. compose ----
compose=docker/docker-compose.yml
if command -v docker-compose >/dev/null; then
  if out=$(cd docker && docker-compose -f docker-compose.yml -p zeroshard config -q 2>&1); then
    pass "$compose: $(docker-compose version --short 2>/dev/null || echo docker-compose) accepts it"
  else
    fail "docker-compose (Compose v1, Debian 12's) rejects $compose: $out"
  fi
else
  fail "docker-compose is not installed (scripts/setup.sh --tests installs it)"
fi
grep -qE '^name:' "$compose" && fail "$compose: a top-level 'name:' key, which Compose v1 rejects (use -p NAME)"
dockerfile=$(grep -oE 'dockerfile: *[^ ]+' "$compose" | head -1 | sed 's/dockerfile: *//')
[[ -f $dockerfile ]] || fail "$compose: dockerfile '$dockerfile' does not exist"
hostnames=$(grep -oE 'hostname: *[A-Za-z0-9_-]+' "$compose" | sed 's/hostname: *//' | sort | tr '\n' ' ')
hosts=$(sed -e 's/#.*//' docker/hostfile | awk 'NF {print $1}' | sort | tr '\n' ' ')
[[ $hostnames == "$hosts" ]] || fail "$compose hostnames '$hostnames' differ from docker/hostfile hosts '$hosts'"
grep -q '/zs-ssh' "$compose" || fail "$compose does not mount the shared key folder /zs-ssh"
# The launcher's command of the compose file, with the program replaced by one that exists here.
cmd=$(tr '\n' ' ' <"$compose" | grep -oE 'command: *\["zeroshard-launch"[^]]*\]' | sed -E 's/command: *\[//; s/\]$//; s/"//g; s/,/ /g')
[[ -n $cmd ]] || fail "$compose: no zeroshard-launch command found"
read -r -a words <<<"$cmd"
launch_args=()
for w in "${words[@]:1}"; do
  [[ $w == /opt/zeroshard/build/bin/* ]] && w=true
  launch_args+=("$w")
done
if out=$("$launch" --dry-run "${launch_args[@]}" 2>&1); then
  [[ $out == *"--hostfile docker/hostfile"* ]] || fail "compose dry run: unexpected command: $out"
  pass "compose: $out"
else
  fail "zeroshard-launch refuses the compose command line: $out"
fi

# ---- 4. entrypoint key exchange ----
mkdir -p "$work/shared" "$work/a" "$work/b"
ZS_SSH=keys ZS_SSH_DIR="$work/shared" ZS_SSH_HOME="$work/a" ZS_USER="" docker/entrypoint.sh true >"$work/log_a" 2>&1 &
pid_a=$!
ZS_SSH=keys ZS_SSH_DIR="$work/shared" ZS_SSH_HOME="$work/b" ZS_USER="" docker/entrypoint.sh true >"$work/log_b" 2>&1 &
pid_b=$!
wait "$pid_a" || fail "entrypoint (a) failed: $(cat "$work/log_a")"
wait "$pid_b" || fail "entrypoint (b) failed: $(cat "$work/log_b")"
generated=$(cat "$work/log_a" "$work/log_b" | grep -c "generated the cluster key pair" || true)
[[ $generated == 1 ]] || fail "the key pair was generated $generated times (want 1)"
cmp -s "$work/a/.ssh/id_ed25519" "$work/b/.ssh/id_ed25519" || fail "the two containers hold different keys"
grep -qxF "$(cat "$work/shared/id_ed25519.pub")" "$work/a/.ssh/authorized_keys" || fail "authorized_keys lacks the key"
[[ $(stat -c %a "$work/a/.ssh/id_ed25519") == 600 ]] || fail "private key is not mode 600"
[[ $(stat -c %a "$work/a/.ssh") == 700 ]] || fail ".ssh is not mode 700"
# A second start must not add the key twice.
ZS_SSH=keys ZS_SSH_DIR="$work/shared" ZS_SSH_HOME="$work/a" ZS_USER="" docker/entrypoint.sh true 2>/dev/null
[[ $(wc -l <"$work/a/.ssh/authorized_keys") == 1 ]] || fail "authorized_keys grew on a restart"
out=$(ZS_SSH=bogus docker/entrypoint.sh true 2>&1) && fail "ZS_SSH=bogus was accepted"
[[ $out == *"allowed: 0, 1, keys"* ]] || fail "ZS_SSH=bogus message: $out"
[[ $(ZS_SSH=0 docker/entrypoint.sh echo passed-through) == passed-through ]] || fail "ZS_SSH=0 does not run the command"
pass "entrypoint key exchange"

# ---- 5. sbatch ----
# A fake submit dir whose build/bin/zeroshard-launch is the real one in dry-run mode (no Slurm or
# GPU here), so the script's command line is checked by the launcher itself.
mkdir -p "$work/submit/build/bin"
printf '#!/bin/sh\nexit 0\n' >"$work/submit/build/bin/zeroshard-selftest"
printf '#!/bin/sh\nexec "%s" --dry-run --skip-gpu-check --launcher srun "$@"\n' "$launch" >"$work/submit/build/bin/zeroshard-launch"
chmod +x "$work/submit/build/bin/"*
if out=$(env SLURM_SUBMIT_DIR="$work/submit" SLURM_NTASKS=16 SLURM_GPUS_ON_NODE=8 SLURM_CPUS_PER_TASK=8 \
  SLURM_JOB_ID=42 SLURM_JOB_NODELIST='n[1-2]' NCCL_DEBUG=WARN bash docker/slurm/train.sbatch --set a=b 2>&1); then
  want="srun --ntasks=16 --ntasks-per-node=8 --gpus-per-node=8 --cpus-per-task=8 --mpi=pmix build/bin/zeroshard-selftest --set a=b"
  [[ $out == *"$want"* ]] || fail "train.sbatch: expected '$want' in: $out"
  pass "train.sbatch: ${out##*$'\n'}"
else
  fail "train.sbatch failed: $out"
fi

if ((failures)); then
  echo "check_docker: $failures failure(s)" >&2
  exit 1
fi
echo "check_docker: all passed"
