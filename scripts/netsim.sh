#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# A cluster with real links on one machine (root): every "node" is a network namespace of its own,
# joined to the others through a bridge in one more namespace by a veth pair whose two ends are
# limited by tc (a token bucket, tbf, for the rate each way; netem for rate and a one-way delay
# where the kernel has it). All addresses (10.213.0.0/24) live inside
# these namespaces; nothing is reachable from them beyond each other, and the script deletes them
# when it ends, however it ends.
#
# An MPI job runs across the nodes as on a cluster: mpirun in node 0 starts one Open MPI daemon in
# each node through an agent that enters the node's namespace (what ssh does on a cluster), the
# ranks of one node talk through shared memory, ranks of different nodes through TCP over the
# limited links (btl tcp; MPI_Comm_split_type and zeroshard's HYBRID_SHARD see the nodes).
#
#   scripts/netsim.sh [OPTIONS] -- PROGRAM [ARGS...]      # PROGRAM on every rank under mpirun
#   scripts/netsim.sh [OPTIONS] --shell -- COMMAND...     # COMMAND once, in node 0's namespace,
#                                                         # with ZS_NETSIM_MPIRUN set (below)
# Options:
#   --nodes N            namespaces (default 2)
#   --ranks-per-node K   MPI ranks in each (default 1)
#   --rate RATE          each link's rate each way, tc's units (default 1gbit; 10gbit, 25gbit, 100mbit);
#                        0: no limit (the veth pairs as fast as the machine moves bytes)
#   --delay DELAY        each link end's one-way delay (default 0: none; a round trip between two
#                        nodes crosses 4 limited ends: 4 x DELAY). Needs the kernel's sch_netem: a
#                        delay asked of a kernel without it is an error, not a link without delay
#   --stats FILE         write the bytes and packets each node sent and received on its link (tc's
#                        counters) as JSON to FILE at the end
#
# ZS_NETSIM_MPIRUN (with --shell): the mpirun command line, without -n and the program, that
# places ranks on the nodes (e.g. $ZS_NETSIM_MPIRUN -n 4 build/bin/train_gpt ...), for scripts that
# run several jobs over one set of links. ZS_NETSIM_MASTER is node 0's address, for peers that
# rendezvous over TCP (torch.distributed's MASTER_ADDR).
#
# Exit status: the command's; 77 when network namespaces cannot be made here (not root, or the
# kernel or container does not allow them; the message says which); 2 for a bad option.
set -euo pipefail

nodes=2
per_node=1
rate=1gbit
delay=0
stats=
shell=0
usage() {
  echo "netsim: error: $1" >&2
  echo "usage: scripts/netsim.sh [--nodes N] [--ranks-per-node K] [--rate RATE] [--delay DELAY] [--stats FILE] [--shell] -- COMMAND..." >&2
  exit 2
}
while (($#)); do
  case $1 in
    --nodes) nodes=${2:?--nodes needs a value}; shift 2 ;;
    --ranks-per-node) per_node=${2:?--ranks-per-node needs a value}; shift 2 ;;
    --rate) rate=${2:?--rate needs a value}; shift 2 ;;
    --delay) delay=${2:?--delay needs a value}; shift 2 ;;
    --stats) stats=${2:?--stats needs a value}; shift 2 ;;
    --shell) shell=1; shift ;;
    --) shift; break ;;
    *) usage "unknown option '$1'" ;;
  esac
done
(($#)) || usage "no command after --"
if ! [[ $nodes =~ ^[0-9]+$ ]] || ((nodes < 1 || nodes > 32)); then usage "--nodes must be 1..32, got '$nodes'"; fi
if ! [[ $per_node =~ ^[0-9]+$ ]] || ((per_node < 1)); then usage "--ranks-per-node must be >= 1, got '$per_node'"; fi
[[ $rate == 0 || $rate =~ ^[0-9.]+([kmgt]?bit)$ ]] || usage "--rate must be 0 or a tc rate such as 1gbit or 100mbit, got '$rate'"
[[ $rate != 0 || $delay == 0 ]] || usage "--delay needs a --rate"

[[ $delay == 0 || $delay =~ ^[0-9.]+(us|ms|s)$ ]] || usage "--delay must be 0 or a tc time such as 0.1ms or 50us, got '$delay'"

skip() {
  echo "netsim: cannot make network namespaces here: $1" >&2
  exit 77
}
((EUID == 0)) || skip "not root (ip netns needs CAP_SYS_ADMIN and CAP_NET_ADMIN)"
for tool in ip tc mpirun; do command -v "$tool" >/dev/null || skip "'$tool' is not installed"; done

# Names unique to this run, short enough for interface names (15 characters).
id=zs$$
hub=$id-hub
ns() { echo "$id-n$1"; }
addr() { echo "10.213.0.$(($1 + 1))"; }
work=$(mktemp -d)
# shellcheck disable=SC2317  # run by the trap
cleanup() {
  local s=$?
  for ((i = 0; i < nodes; ++i)); do ip netns del "$(ns "$i")" 2>/dev/null || true; done
  ip netns del "$hub" 2>/dev/null || true
  rm -rf "$work"
  exit "$s"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$hub" 2>"$work/err" || skip "ip netns add failed: $(cat "$work/err")"
ip -n "$hub" link set lo up
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
# tbf's bucket must hold at least a timer tick's worth of bytes at the rate (and a 64 KiB GSO
# packet); its queue holds 50 ms of traffic before it drops.
rate_bits=$(awk -v r="$rate" 'BEGIN {
  sub(/bit$/, "", r); m = 1; u = substr(r, length(r))
  if (u == "k") m = 1e3; else if (u == "m") m = 1e6; else if (u == "g") m = 1e9; else if (u == "t") m = 1e12;
  if (m > 1) r = substr(r, 1, length(r) - 1); printf "%.0f", r * m }')
burst=$(awk -v r="$rate_bits" 'BEGIN { b = r / 8 / 250; printf "%d", (b < 131072 ? 131072 : b) }')
shape() {  # NAMESPACE DEVICE
  if [[ $rate == 0 ]]; then
    return
  elif [[ $delay == 0 ]]; then
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst "$burst" latency 50ms 2>"$work/err" \
      || skip "tc tbf failed in $1 on $2: $(cat "$work/err")"
  elif ! ip netns exec "$1" tc qdisc add dev "$2" root netem rate "$rate" delay "$delay" limit 100000 2>"$work/err"; then
    echo "netsim: error: --delay $delay needs tc netem, which this kernel does not offer ($(cat "$work/err")):" \
      "links can be limited in rate (--delay 0) but not delayed here" >&2
    exit 1
  fi
}
for ((i = 0; i < nodes; ++i)); do
  n=$(ns "$i")
  ip netns add "$n"
  ip link add "${id}p$i" netns "$hub" type veth peer name eth0 netns "$n"
  ip -n "$hub" link set "${id}p$i" master br0 up
  ip -n "$n" link set lo up
  ip -n "$n" addr add "$(addr "$i")/24" dev eth0
  ip -n "$n" link set eth0 up
  shape "$n" eth0              # what node i sends
  shape "$hub" "${id}p$i"      # what node i receives
done

# The agent mpirun starts daemons through: "AGENT HOST COMMAND..." runs COMMAND in HOST's namespace.
agent=$work/agent
# shellcheck disable=SC2016  # the agent's own variables, expanded when it runs
{
  echo '#!/bin/sh'
  echo 'host=$1; shift'
  echo 'case $host in'
  for ((i = 0; i < nodes; ++i)); do echo "  $(addr "$i")) n=$(ns "$i") ;;"; done
  echo '  *) echo "netsim agent: unknown node $host" >&2; exit 1 ;;'
  echo 'esac'
  # Each node its own host name (a UTS namespace): Open MPI names its session directories and
  # shared-memory segments after it, and two nodes sharing one would share those files.
  echo 'exec ip netns exec "$n" unshare --uts /bin/sh -c "hostname $n && $*"'
} >"$agent"
chmod +x "$agent"
hostfile=$work/hosts
for ((i = 0; i < nodes; ++i)); do echo "$(addr "$i") slots=$per_node"; done >"$hostfile"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun_line="mpirun --hostfile $hostfile --map-by slot --mca plm_rsh_agent $agent --mca btl self,vader,tcp \
--mca btl_tcp_if_include 10.213.0.0/24 --mca oob_tcp_if_include 10.213.0.0/24 -x PATH"
[[ -n ${LD_LIBRARY_PATH:-} ]] && mpirun_line+=" -x LD_LIBRARY_PATH"
ZS_NETSIM_MASTER=$(addr 0)
export ZS_NETSIM_MPIRUN=$mpirun_line ZS_NETSIM_MASTER
echo "netsim: $nodes node(s) x $per_node rank(s), links $([[ $rate == 0 ]] && echo "without a limit" || echo "$rate each way, $delay one-way delay per end")" >&2

status=0
# shellcheck disable=SC2016  # $0 and $@ of the inner shell
in_node0() { ip netns exec "$(ns 0)" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$(ns 0)" "$@"; }
if ((shell)); then
  in_node0 "$@" || status=$?
else
  # shellcheck disable=SC2086
  in_node0 $mpirun_line -n $((nodes * per_node)) "$@" || status=$?
fi

# Each node's link: sent = what its own end transmitted, received = what the hub's end transmitted
# (the interfaces' counters; with a limit they equal what tc's queues passed).
sent_bytes() {  # NAMESPACE DEVICE -> "bytes packets"
  ip netns exec "$1" sh -c "cat /sys/class/net/$2/statistics/tx_bytes /sys/class/net/$2/statistics/tx_packets" | tr '\n' ' '
}
json="{\"nodes\": $nodes, \"ranks_per_node\": $per_node, \"rate\": \"$rate\", \"delay\": \"$delay\", \"links\": ["
for ((i = 0; i < nodes; ++i)); do
  read -r sb sp <<<"$(sent_bytes "$(ns "$i")" eth0)"
  read -r rb rp <<<"$(sent_bytes "$hub" "${id}p$i")"
  echo "netsim: node $i ($(addr "$i")): sent $sb bytes in $sp packets, received $rb bytes in $rp packets" >&2
  ((i > 0)) && json+=", "
  json+="{\"node\": $i, \"sent_bytes\": $sb, \"sent_packets\": $sp, \"received_bytes\": $rb, \"received_packets\": $rp}"
done
json+="]}"
[[ -n $stats ]] && echo "$json" >"$stats"
exit "$status"
