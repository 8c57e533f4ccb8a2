#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# zeroshard-data end to end on the tokenizer tests' files: known ids of real vocabularies (GPT-2,
# Llama 2, Llama 3), encode | decode round trips, JSONL in and out, and each error's exact text
# and exit status. Prints "zeroshard-data: all N checks passed" or the first difference.
#
#   tests/text/check_data_tool.sh ZEROSHARD_DATA REFERENCE_DIR
set -uo pipefail
tool=$1 ref=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checks=0

fail() {
  echo "FAIL: $1" >&2
  exit 1
}
# expect NAME EXPECTED_STATUS EXPECTED_OUTPUT COMMAND...: stdout and stderr together, exactly.
expect() {
  local name=$1 status=$2 want=$3
  shift 3
  local got rc
  got=$("$@" 2>&1)
  rc=$?
  [[ $rc == "$status" ]] || fail "$name: exit status $rc, expected $status; output: $got"
  [[ $got == "$want" ]] || fail "$name: output
  got:      $got
  expected: $want"
  checks=$((checks + 1))
}

printf 'Hello world\n' >"$work/hello.txt"
expect "gpt2 ids" 0 "[15496,995]" "$tool" encode --tokenizer "$ref/gpt2" "$work/hello.txt"
expect "llama2 ids with BOS" 0 "[1,15043,3186]" "$tool" encode --tokenizer "$ref/llama2" "$work/hello.txt"
expect "llama2 ids without" 0 "[15043,3186]" "$tool" encode --no-special-tokens --tokenizer "$ref/llama2" "$work/hello.txt"
printf '{"text": "Hello world"}\n{"id": 7, "body": "Hello world"}\n' >"$work/in.jsonl"
expect "llama3 jsonl" 0 "[128000,9906,1917]
[128000,9906,1917]" sh -c "head -1 '$work/in.jsonl' | '$tool' encode --jsonl --tokenizer '$ref/llama3' -; \
  tail -1 '$work/in.jsonl' | '$tool' encode --jsonl --field body --tokenizer '$ref/llama3' --threads 1"
expect "llama3's original tokenizer.model" 0 "[128000,9906,1917]" "$tool" encode --tokenizer "$ref/llama3-original" "$work/hello.txt"

# Round trips of varied lines (the corpus's first 300 lines) through the byte-level tokenizers.
node -e '
  const fs = require("fs");
  const lines = fs.readFileSync(process.argv[1], "utf8").split("\n").filter(Boolean).slice(0, 300)
    .flatMap((l) => JSON.parse(l).text.split("\n"));
  fs.writeFileSync(process.argv[2], lines.join("\n") + "\n");' "$ref/corpus.jsonl" "$work/lines.txt"
for name in gpt2 o200k llama3-original; do
  "$tool" encode --no-special-tokens --tokenizer "$ref/$name" "$work/lines.txt" >"$work/ids"
  "$tool" decode --tokenizer "$ref/$name" "$work/ids" >"$work/back.txt"
  cmp -s "$work/lines.txt" "$work/back.txt" || fail "$name: decode(encode(lines)) differs: $(diff "$work/lines.txt" "$work/back.txt" | head -5)"
  [[ $(wc -l <"$work/ids") == $(wc -l <"$work/lines.txt") ]] || fail "$name: not one line of ids per line of text"
  checks=$((checks + 1))
done
expect "decode --jsonl keeps newlines in one line" 0 '{"text":"a\nb"}' sh -c "echo '[64, 198, 65]' | '$tool' decode --jsonl --tokenizer '$ref/gpt2'"
expect "decode --skip-special-tokens" 0 "Hello world" sh -c "echo '[128000, 9906, 1917, 128009]' | '$tool' decode --skip-special-tokens --tokenizer '$ref/llama3'"

# Errors: one line, the file and line, exit 1 (2 for the command line).
expect "id outside the vocabulary" 1 "zeroshard-data: <stdin>:2: $ref/gpt2/tokenizer.json: decode: token id 999999 (position 1) is not in the vocabulary (50260 ids)" \
  sh -c "printf '[1]\n[1, 999999]\n' | '$tool' decode --tokenizer '$ref/gpt2' >/dev/null"
expect "ids that are not JSON" 1 "zeroshard-data: $work/bad.jsonl:1: column 4: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal" \
  sh -c "echo '[1,' >'$work/bad.jsonl'; '$tool' decode --tokenizer '$ref/gpt2' '$work/bad.jsonl'"
expect "text that is not UTF-8" 1 "zeroshard-data: <stdin>:2: $ref/gpt2/tokenizer.json: encode: the text is not valid UTF-8 (byte 0 of 1)" \
  sh -c "printf 'ok\n\377\n' | '$tool' encode --tokenizer '$ref/gpt2' >/dev/null"
expect "a JSONL record without the field" 1 "zeroshard-data: <stdin>:1: expected a JSON object with a string \"text\"" \
  sh -c "echo '{\"txt\": 1}' | '$tool' encode --jsonl --tokenizer '$ref/gpt2'"
expect "unknown command" 2 "zeroshard-data: usage error: unknown command 'encod' (commands: decode, encode, index, inspect, shards; zeroshard-data --help)" \
  "$tool" encod
expect "no --tokenizer" 2 "zeroshard-data: usage error: --tokenizer is required (usage: zeroshard-data encode --tokenizer DIR [OPTIONS] [FILE|-]; zeroshard-data encode --help lists the options)" \
  "$tool" encode
expect "missing tokenizer" 1 "zeroshard-data: $work/none: cannot load a tokenizer: No such file or directory (errno 2)" \
  "$tool" encode --tokenizer "$work/none" "$work/hello.txt"
echo "zeroshard-data: all $checks checks passed"
