// SPDX-License-Identifier: Apache-2.0
// The reference side of bench_tokenizer.sh: Hugging Face's tokenizers.js encoding the same corpus
// with the same tokenizer files, one thread, warm (one pass first). Prints one JSON line like
// bench_tokenizer's.
//
//   node bench_tokenizer.mjs NODE_MODULES TOKENIZER_DIR CORPUS.jsonl SECONDS

import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, dir, corpus, seconds] = process.argv.slice(2);
const { Tokenizer } = await import(pathToFileURL(path.join(modules, '@huggingface/tokenizers/dist/tokenizers.mjs')).href);
const docs = fs.readFileSync(corpus, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).text);
const t0 = performance.now();
const tok = new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
  JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')));
const load = (performance.now() - t0) / 1000;
const pass = () => docs.reduce((n, d) => n + tok.encode(d).ids.length, 0);
const tokens = pass();
let done = 0;
const start = performance.now();
let elapsed = 0;
do {
  done += pass();
  elapsed = (performance.now() - start) / 1000;
} while (elapsed < Number(seconds));
console.log(JSON.stringify({ tokenizer: dir, documents: docs.length, tokens, load_s: load, tokens_per_s: done / elapsed }));
