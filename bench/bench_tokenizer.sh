#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tokens per second on one core, zeroshard (bench_tokenizer) against Hugging Face's tokenizers.js
# (bench_tokenizer.mjs), same tokenizer files, same corpus, one after the other on the same core
# (taskset). Uses the tokenizer tests' reference data (built first when missing: it needs the test
# clients, scripts/install-clients.sh BUILD_DIR). Prints a table and a last JSON line.
#
#   bench/bench_tokenizer.sh [--build DIR] [--seconds S] [NAME...]     (default: gpt2 llama3 llama2 o200k)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$here/../build seconds=3 names=()
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n 2,7p "${BASH_SOURCE[0]}"; exit 0 ;;
    -*) echo "bench_tokenizer: error: unknown option '$1'" >&2; exit 2 ;;
    *) names+=("$1"); shift ;;
  esac
done
((${#names[@]})) || names=(gpt2 llama3 llama2 o200k)
build=$(cd "$build" && pwd)
modules=$build/clients/node_modules data=$build/tests/text/reference
[[ -x $build/bin/bench_tokenizer ]] || { echo "bench_tokenizer: error: build bench_tokenizer first" >&2; exit 1; }
"$here/../tests/text/setup_references.sh" "$modules" "$data" >/dev/null
core=$(($(nproc) - 1))
printf '%-16s %14s %14s %7s %16s\n' tokenizer "zeroshard/s" "tokenizers.js/s" ratio "zeroshard batch/s"
json="{"
for name in "${names[@]}"; do
  ours=$(taskset -c "$core" "$build/bin/bench_tokenizer" --tokenizer "$data/$name" --corpus "$data/corpus.jsonl" \
    --seconds "$seconds" --threads 1)
  batch=$("$build/bin/bench_tokenizer" --tokenizer "$data/$name" --corpus "$data/corpus.jsonl" --seconds "$seconds")
  theirs=$(taskset -c "$core" node "$here/bench_tokenizer.mjs" "$modules" "$data/$name" "$data/corpus.jsonl" "$seconds")
  # shellcheck disable=SC2016  # JavaScript, not shell
  row=$(node -e '
    const [o, b, t] = process.argv.slice(1).map(JSON.parse);
    if (o.tokens !== t.tokens) throw new Error(`token counts differ: ${o.tokens} vs ${t.tokens}`);
    const r = o.tokens_per_s / t.tokens_per_s;
    console.log([o.tokens_per_s.toFixed(0), t.tokens_per_s.toFixed(0), r.toFixed(2), b.batch_tokens_per_s.toFixed(0)].join(" "));
  ' "$ours" "$batch" "$theirs")
  read -r o t r b <<<"$row"
  printf '%-16s %14s %14s %7s %16s\n' "$name" "$o" "$t" "${r}x" "$b"
  json+="\"$name\": {\"zeroshard_tokens_per_s\": $o, \"tokenizers_js_tokens_per_s\": $t, \"ratio\": $r, \"zeroshard_batch_tokens_per_s\": $b}, "
done
echo "${json%, }, \"core\": $core, \"cores\": $(nproc)}"
