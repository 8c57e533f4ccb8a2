#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the test clients (tests/clients/package.json: llama.cpp through node-llama-cpp, Hugging
# Face's tokenizers and Jinja, tiktoken, published vocabularies; exact versions from the lock file)
# into BUILD_DIR/clients/node_modules with `npm ci`. Skips the install when the lock file is
# unchanged since the last one (a stamp beside node_modules). Needs Node.js >= 20 and npm.
#
#   scripts/install-clients.sh BUILD_DIR
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if (($# != 1)); then
  echo "install-clients: error: usage: scripts/install-clients.sh BUILD_DIR" >&2
  exit 2
fi
dest=$1/clients
for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "install-clients: error: '$tool' not found; install Node.js 20 or newer with npm" >&2
    exit 1
  fi
done
node_major=$(node -p 'process.versions.node.split(".")[0]')
if ((node_major < 20)); then
  echo "install-clients: error: Node.js $(node --version) is too old: node-llama-cpp 3.21.1 needs 20 or newer" >&2
  exit 1
fi
mkdir -p "$dest"
stamp=$dest/.installed-lock.sha256
want=$(sha256sum tests/clients/package-lock.json | cut -d' ' -f1)
if [[ -d $dest/node_modules && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  exit 0
fi
cp tests/clients/package.json tests/clients/package-lock.json "$dest/"
start=$SECONDS
# --omit=optional: node-llama-cpp lists a prebuilt llama.cpp per platform as optional; the lock
# file pins the CPU build for linux-x64 as a direct dependency, the others (CUDA, Vulkan: 600 MB)
# are skipped.
(cd "$dest" && npm ci --omit=optional --no-audit --no-fund --loglevel=error)
echo "$want" >"$stamp"
echo "install-clients: test clients installed into $dest in $((SECONDS - start)) s"
