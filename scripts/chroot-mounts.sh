# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by the scripts that build and run in a debootstrap root (check-libtorch2.sh,
# check-fresh-demo.sh): mounts made with mnt are undone, newest first, by unmount_all_mounts,
# which the sourcing script calls from its EXIT trap.

mounted=()

mnt() {  # mnt TARGET MOUNT-ARGS...
  local target=$1
  shift
  mkdir -p "$target"
  mount "$@" "$target"
  mounted+=("$target")
}

# What a root needs to build and to run MPI jobs: /proc, /sys, /dev, /dev/pts, and a tmpfs of
# SHM_SIZE on /dev/shm (Open MPI's shared-memory transport).
mount_system_dirs() {  # mount_system_dirs ROOT SHM_SIZE
  mnt "$1/proc" -t proc proc
  mnt "$1/sys" -t sysfs sysfs
  mnt "$1/dev" --bind /dev
  mnt "$1/dev/pts" --bind /dev/pts
  mnt "$1/dev/shm" -t tmpfs -o size="$2" tmpfs
}

unmount_all_mounts() {  # unmount_all_mounts WHO (WHO names the script in warnings)
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null ||
      echo "$1: warning: could not unmount ${mounted[i]}" >&2
  done
  mounted=()
}
