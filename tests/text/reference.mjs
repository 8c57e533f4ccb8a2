// SPDX-License-Identifier: Apache-2.0
// Reference encodings of the corpus by implementations nobody here wrote: Hugging Face's
// tokenizers.js for tokenizer.json files, js-tiktoken for tiktoken rank files, and
// llama3-tokenizer-js as a second opinion on Llama 3. For each case of OUT/cases.json, writes
// OUT/NAME.reference.jsonl: per corpus document {"ids": [...], "decoded": "..."} (decoded: the
// reference's decode of those ids), plus "ids2" where a second reference exists.
//
//   node reference.mjs NODE_MODULES OUT            (OUT holds cases.json and corpus.jsonl)

import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, out, part = '0/1'] = process.argv.slice(2);
const [partIndex, parts] = part.split('/').map(Number);
if (!modules || !out) {
  console.error('usage: node reference.mjs NODE_MODULES OUT');
  process.exit(2);
}
const load = async (rel) => import(pathToFileURL(path.join(modules, rel)).href);
const { Tokenizer } = await load('@huggingface/tokenizers/dist/tokenizers.mjs');
const { Tiktoken } = await load('js-tiktoken/dist/lite.js');

const cases = JSON.parse(fs.readFileSync(path.join(out, 'cases.json'), 'utf8')).filter((_, i) => i % parts === partIndex);
const FULL = new Set(['gpt2', 'llama3', 'llama2', 'cl100k_base.tiktoken', 'llama3-original']);
const docs = fs.readFileSync(path.join(out, 'corpus.jsonl'), 'utf8').split('\n').filter(Boolean)
  .map((l) => JSON.parse(l).text);

// Llama 3's split pattern without the case-insensitive group JavaScript lacks (as js-tiktoken
// spells cl100k's).
const LLAMA3_JS_PATTERN = "('s|'S|'t|'T|'re|'rE|'Re|'RE|'ve|'vE|'Ve|'VE|'m|'M|'ll|'lL|'Ll|'LL|'d|'D)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

async function encoderFor(c) {
  if (c.kind === 'tokenizer.json') {
    const json = JSON.parse(fs.readFileSync(path.join(c.path, 'tokenizer.json'), 'utf8'));
    const config = JSON.parse(fs.readFileSync(path.join(c.path, 'tokenizer_config.json'), 'utf8'));
    const tok = new Tokenizer(json, config);
    return {
      encode: (text) => tok.encode(text).ids,
      decode: (ids) => (ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : ''),
    };
  }
  let ranks;
  if (c.js) {
    ranks = (await load(c.js)).default;
  } else {  // Llama 3's tokenizer.model
    const lines = fs.readFileSync(path.join(c.path, 'tokenizer.model'), 'utf8').split('\n').filter(Boolean);
    const special = Object.fromEntries(c.llama3_specials.map((t, i) => [t, 128000 + i]));
    ranks = { pat_str: LLAMA3_JS_PATTERN, special_tokens: special, bpe_ranks: '! 0 ' + lines.map((l) => l.split(' ')[0]).join(' ') };
  }
  const tok = new Tiktoken(ranks);
  return { encode: (text) => tok.encode(text, 'all'), decode: (ids) => tok.decode(ids) };
}

const llama3js = (await load('llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js')).default;

for (const c of cases) {
  const start = Date.now();
  const enc = await encoderFor(c);
  const loaded = Date.now();
  const lines = [];
  let tokens = 0;
  for (const [index, text] of docs.entries()) {
    if (!FULL.has(c.name) && index % 3 !== 0 && text.length >= 64) {
      lines.push('{"skip":true}');
      continue;
    }
    const ids = enc.encode(text);
    tokens += ids.length;
    const row = { ids, decoded: enc.decode(ids) };
    if (c.js_llama3) row.ids2 = llama3js.encode(text, { bos: true, eos: false });
    lines.push(JSON.stringify(row));
  }
  fs.writeFileSync(path.join(out, `${c.name}.reference.jsonl`), lines.join('\n') + '\n');
  console.log(`reference ${c.name}: ${tokens} tokens (load ${loaded - start} ms, encode+decode ${Date.now() - loaded} ms)`);
}
