#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# zeroshard container entrypoint (docker/Dockerfile.cpu, docker/Dockerfile.cuda).
#
# Multi-container mpirun needs passwordless ssh between the containers. With ZS_SSH=1 this script
#   1. takes the cluster's key pair from the shared folder ZS_SSH_DIR (a volume every container
#      mounts, default /zs-ssh); the first container to get there generates it (under flock, so
#      containers starting together agree on one key). A key pair built into the image under
#      /etc/zeroshard/ssh/ (id_ed25519 and id_ed25519.pub, added by your own COPY for clusters
#      that cannot share a volume; docs/cluster.md) is copied there instead when the folder has none;
#   2. installs it for the user that runs the command: private key, authorized_keys, and an ssh
#      client config that trusts the cluster's hosts without prompts;
#   3. starts sshd (root only; key logins only, no passwords);
#   4. waits until every host in ZS_WAIT_FOR_HOSTS answers ssh (the launcher container uses this,
#      so mpirun does not race the workers' sshd), at most ZS_WAIT_SECONDS (default 120);
# then runs the command (as ZS_USER when the image has one, else as the current user).
# ZS_SSH=keys does steps 1-2 only (no sshd; for tests). ZS_SSH=0 (default) runs the command as is.
# ZS_SSH_HOME overrides the home folder the keys are installed into (tests).
set -euo pipefail

ssh_mode=${ZS_SSH:-0}
shared=${ZS_SSH_DIR:-/zs-ssh}
run_user=${ZS_USER:-}
log() { echo "zeroshard-entrypoint: $*" >&2; }

user_home() {
  if [[ -n ${ZS_SSH_HOME:-} ]]; then
    echo "$ZS_SSH_HOME"
  elif [[ -n $run_user ]]; then
    getent passwd "$run_user" | cut -d: -f6
  else
    echo "${HOME:-/root}"
  fi
}

# Step 1: the shared key pair, generated once.
shared_key() {
  mkdir -p "$shared"
  (
    flock -w 60 9 || { log "error: could not lock $shared/.lock within 60 s"; exit 1; }
    if [[ ! -f $shared/id_ed25519 ]]; then
      if [[ -f /etc/zeroshard/ssh/id_ed25519 ]]; then
        cp /etc/zeroshard/ssh/id_ed25519 /etc/zeroshard/ssh/id_ed25519.pub "$shared/"
        log "using the key pair built into the image"
      else
        ssh-keygen -q -t ed25519 -N '' -C zeroshard-cluster -f "$shared/id_ed25519"
        log "generated the cluster key pair in $shared"
      fi
    fi
  ) 9>"$shared/.lock"
  [[ -f $shared/id_ed25519 && -f $shared/id_ed25519.pub ]] || { log "error: no key pair in $shared"; exit 1; }
}

# Step 2: install it for the user running the command.
install_key() {
  local home ssh_dir
  home=$(user_home)
  ssh_dir=$home/.ssh
  mkdir -p "$ssh_dir"
  chmod 700 "$ssh_dir"
  install -m 600 "$shared/id_ed25519" "$ssh_dir/id_ed25519"
  install -m 644 "$shared/id_ed25519.pub" "$ssh_dir/id_ed25519.pub"
  touch "$ssh_dir/authorized_keys"
  grep -qxF "$(cat "$shared/id_ed25519.pub")" "$ssh_dir/authorized_keys" || cat "$shared/id_ed25519.pub" >>"$ssh_dir/authorized_keys"
  chmod 600 "$ssh_dir/authorized_keys"
  # Containers come and go with new host keys: do not pin them.
  cat >"$ssh_dir/config" <<'CONFIG'
Host *
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
CONFIG
  chmod 600 "$ssh_dir/config"
  if [[ -n $run_user && -z ${ZS_SSH_HOME:-} ]]; then
    chown -R "$run_user:" "$ssh_dir"
  fi
}

# Step 3: sshd, key logins only.
start_sshd() {
  [[ $(id -u) -eq 0 ]] || { log "error: ZS_SSH=1 needs the container to start as root (sshd)"; exit 1; }
  mkdir -p /run/sshd
  [[ -f /etc/ssh/ssh_host_ed25519_key ]] || ssh-keygen -A
  /usr/sbin/sshd -o PasswordAuthentication=no -o PermitRootLogin=prohibit-password -o PermitUserEnvironment=no
  log "sshd started"
}

# Step 4: wait for the other containers' sshd.
wait_for_hosts() {
  local deadline=$((SECONDS + ${ZS_WAIT_SECONDS:-120})) host
  local as_user=()
  [[ -n $run_user && $(id -u) -eq 0 ]] && as_user=(runuser -u "$run_user" --)
  for host in ${ZS_WAIT_FOR_HOSTS:-}; do
    until "${as_user[@]}" ssh -o ConnectTimeout=3 "$host" true 2>/dev/null; do
      if ((SECONDS >= deadline)); then
        log "error: $host does not answer ssh after ${ZS_WAIT_SECONDS:-120} s; is its container running with ZS_SSH=1 and the same $shared volume?"
        exit 1
      fi
      sleep 1
    done
    log "$host answers ssh"
  done
}

case "$ssh_mode" in
  0) ;;
  1) shared_key; install_key; start_sshd ;;
  keys) shared_key; install_key ;;
  *) log "error: ZS_SSH='$ssh_mode'; allowed: 0, 1, keys"; exit 2 ;;
esac

if (($# == 0)); then
  set -- bash
fi
if [[ $ssh_mode == 1 ]]; then
  wait_for_hosts
fi
if [[ -n $run_user && $(id -u) -eq 0 ]]; then
  exec runuser -u "$run_user" -- "$@"
fi
exec "$@"
