#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The reference data of test_tokenizer_reference (tests/text/): the corpus, tokenizer files from
# the published vocabularies pinned in tests/clients, and the encodings of the real
# implementations. Reuses OUT when the scripts, the client lock file and the corpus sources are
# unchanged since its last run (a stamp in OUT).
#
#   tests/text/setup_references.sh NODE_MODULES OUT
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# != 2)); then
  echo "setup_references: error: usage: setup_references.sh NODE_MODULES OUT" >&2
  exit 2
fi
modules=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)  # cases.json records absolute paths
for client in @huggingface/tokenizers js-tiktoken llama-tokenizer-js llama3-tokenizer-js mistral-tokenizer-js; do
  if [[ ! -d $modules/$client ]]; then
    echo "setup_references: error: the test client '$client' is missing from $modules; install the test clients" \
      "with scripts/install-clients.sh BUILD_DIR" >&2
    exit 1
  fi
done
if ! /usr/bin/python3 -c 'import sentencepiece' 2>/dev/null; then
  echo "setup_references: error: /usr/bin/python3 cannot import sentencepiece; install python3-sentencepiece" \
    "(scripts/setup.sh --tests)" >&2
  exit 1
fi
# What the data depends on: the scripts, the clients' lock file, and the corpus sources' names and sizes.
stamp=$( (echo "$out"; cat "$here"/corpus.mjs "$here"/make_tokenizers.mjs "$here"/reference.mjs "$here"/sentencepiece_reference.py \
  "$modules"/../package-lock.json 2>/dev/null
  ls -l /usr/share/common-licenses /usr/share/games/fortunes /usr/share/man/man1 2>/dev/null) | sha256sum | cut -d' ' -f1)
if [[ -f $out/stamp && $(cat "$out/stamp") == "$stamp" ]]; then
  echo "setup_references: $out is up to date"
  exit 0
fi
start=$SECONDS
rm -rf "$out"
mkdir -p "$out"
node "$here/corpus.mjs" "$out/corpus.jsonl"
node "$here/make_tokenizers.mjs" "$modules" "$out"
/usr/bin/python3 "$here/sentencepiece_reference.py" "$out"
# The JavaScript references on two cores.
node "$here/reference.mjs" "$modules" "$out" 0/2 &
first=$!
node "$here/reference.mjs" "$modules" "$out" 1/2
wait "$first"
echo "$stamp" >"$out/stamp"
echo "setup_references: reference data in $out in $((SECONDS - start)) s"
