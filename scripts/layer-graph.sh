#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Prints the library layers and their direct dependencies as CMake sees them (cmake --graphviz on a
# scratch configure of this tree): the graph docs/design.md shows. Usage: scripts/layer-graph.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake -S . -B "$tmp/build" -G Ninja -DZS_BUILD_TESTS=OFF -DZS_BUILD_BENCH=OFF --graphviz="$tmp/deps.dot" >/dev/null
# The dot file names both ends of every edge in a comment: "node3" -> "node7"  // zs_io -> zs_core
grep -o '// .* -> .*' "$tmp/deps.dot" | sed 's#^// ##' | awk -F' -> ' '
  function short(n) {
    if (n == "zs_torch") return "LibTorch"
    if (n ~ /liburing/) return "liburing"
    if (n ~ /libaio/) return "libaio"
    if (n ~ /libgomp|OpenMP/) return "OpenMP"
    sub(/::.*/, "", n)
    return n
  }
  $1 ~ /^(zs_|zeroshard-|train_|offload_demo)/ && $1 != "zs_torch" && $2 !~ /protoc$|Threads|pthread/ {
    d = short($2)
    if (index(" " deps[$1] ",", " " d ",") == 0) deps[$1] = deps[$1] (deps[$1] == "" ? " " : ", ") d
  }
  END { for (t in deps) print t " ->" deps[t] }' | sort
