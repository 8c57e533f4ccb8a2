// SPDX-License-Identifier: Apache-2.0
// Writes real vocabularies as the files users download: Hugging Face tokenizer.json (with a
// tokenizer_config.json beside it) and tiktoken rank files, from the published vocabularies pinned
// in tests/clients (js-tiktoken's GPT-2 / cl100k / o200k ranks, llama-tokenizer-js (Llama 2),
// llama3-tokenizer-js (Llama 3), mistral-tokenizer-js). The tokenizer.json files have the shapes
// Hugging Face's own conversions give these families (byte-level BPE with GPT-2's or a Split
// regex; SentencePiece-style BPE with byte fallback), plus variants that exercise normalizers
// and added-token options. Writes OUT/cases.json listing them.
//
//   node make_tokenizers.mjs NODE_MODULES OUT

import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, out] = process.argv.slice(2);
if (!modules || !out) {
  console.error('usage: node make_tokenizers.mjs NODE_MODULES OUT');
  process.exit(2);
}
const load = async (rel) => (await import(pathToFileURL(path.join(modules, rel)).href)).default;

// ---- GPT-2's byte <-> character table ----
const byteToChar = (() => {
  const table = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    table[b] = String.fromCodePoint(printable ? b : next++);
  }
  return table;
})();
const charToByte = new Map(byteToChar.map((c, b) => [c, b]));
const bytesToTokenString = (bytes) => Array.from(bytes, (b) => byteToChar[b]).join('');
const tokenStringToBytes = (s) => Buffer.from(Array.from(s, (c) => charToByte.get(c)));

// ---- tiktoken ranks (js-tiktoken's compressed form: "! OFFSET tok tok ..." lines) ----
function tiktokenRanks(data) {
  const ranks = [];  // [Buffer, rank]
  for (const line of data.bpe_ranks.split('\n').filter(Boolean)) {
    const [, offset, ...tokens] = line.split(' ');
    tokens.forEach((t, i) => ranks.push([Buffer.from(t, 'base64'), Number(offset) + i]));
  }
  return ranks;
}
const rankFile = (ranks) => ranks.map(([b, r]) => `${b.toString('base64')} ${r}`).join('\n') + '\n';

// Vocabulary and merges from ranks, as transformers' TikTokenConverter derives them: every split
// of a token into two tokens is a merge, ordered by the token's rank, then the halves' ranks.
function bpeFromRanks(ranks) {
  const rankOf = new Map(ranks.map(([b, r]) => [b.toString('latin1'), r]));
  const vocab = {};
  const merges = [];
  for (const [bytes, rank] of ranks) {
    vocab[bytesToTokenString(bytes)] = rank;
    if (bytes.length < 2) continue;
    const local = [];
    const key = bytes.toString('latin1');
    for (let i = 1; i < key.length; ++i) {
      const l = key.slice(0, i), r = key.slice(i);
      if (rankOf.has(l) && rankOf.has(r)) local.push([l, r, rank, rankOf.get(l), rankOf.get(r)]);
    }
    local.sort((a, b) => a[3] - b[3] || a[4] - b[4]);
    merges.push(...local);
  }
  merges.sort((a, b) => a[2] - b[2]);
  const str = (latin1) => bytesToTokenString(Buffer.from(latin1, 'latin1'));
  return { vocab, merges: merges.map(([l, r]) => [str(l), str(r)]) };
}

const added = (id, content, extra = {}) => ({
  id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true, ...extra,
});
const byteLevel = (extra = {}) => ({ type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true, ...extra });
const split = (regex) => ({ type: 'Split', pattern: { Regex: regex }, behavior: 'Isolated', invert: false });
const template = (bos) => ({
  type: 'TemplateProcessing',
  single: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
  pair: [{ SpecialToken: { id: bos, type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
    { SpecialToken: { id: bos, type_id: 1 } }, { Sequence: { id: 'B', type_id: 1 } }],
  special_tokens: {},
});
function bpe(vocab, merges, extra = {}) {
  return { type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
    fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges, ...extra };
}
const tokenizerJson = (parts) => ({ version: '1.0', truncation: null, padding: null, added_tokens: [], normalizer: null,
  pre_tokenizer: null, post_processor: null, decoder: null, ...parts });

const cases = [];
function writeCase(name, json, config, extra = {}) {
  const dir = path.join(out, name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(json));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify({ clean_up_tokenization_spaces: false, ...config }));
  cases.push({ name, kind: 'tokenizer.json', path: dir, ...extra });
}
function withTemplate(processor, bos, bosId) {
  processor.special_tokens[bos] = { id: bos, ids: [bosId], tokens: [bos] };
  return processor;
}

const LLAMA3_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_PATTERN = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const O200K_PATTERN = [
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
  '\\p{N}{1,3}', ' ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*', '\\s*[\\r\\n]+', '\\s+(?!\\S)', '\\s+'].join('|');

// ---- GPT-2 family (js-tiktoken's ranks) ----
const gpt2 = await load('js-tiktoken/dist/ranks/gpt2.js');
const cl100k = await load('js-tiktoken/dist/ranks/cl100k_base.js');
const o200k = await load('js-tiktoken/dist/ranks/o200k_base.js');
const rankSets = { gpt2: tiktokenRanks(gpt2), cl100k_base: tiktokenRanks(cl100k), o200k_base: tiktokenRanks(o200k) };
for (const [name, ranks] of Object.entries(rankSets)) {
  const file = path.join(out, `${name}.tiktoken`);
  fs.mkdirSync(out, { recursive: true });
  fs.writeFileSync(file, rankFile(ranks));
  cases.push({ name: `${name}.tiktoken`, kind: 'tiktoken', path: file, js: `js-tiktoken/dist/ranks/${name}.js` });
}

{  // GPT-2: ByteLevel pre-tokenizer with its regex; RoBERTa-style added tokens with lstrip/rstrip.
  const { vocab, merges } = bpeFromRanks(rankSets.gpt2);
  const addedTokens = [added(50256, '<|endoftext|>'), added(50257, '<mask>', { lstrip: true }),
    added(50258, '[RSTRIP]', { rstrip: true, special: false }), added(50259, 'GNU General', { special: false, normalized: true })];
  const json = tokenizerJson({ added_tokens: addedTokens, pre_tokenizer: byteLevel(), post_processor: byteLevel(),
    decoder: byteLevel(), model: bpe(vocab, merges) });
  writeCase('gpt2', json, { bos_token: '<|endoftext|>', eos_token: '<|endoftext|>', chat_template: '{{ bos_token }}' });
  // The same with normalizers: strip, NFKC, lowercase (a normalized added token is matched in its
  // normalized form).
  json.normalizer = { type: 'Sequence', normalizers: [{ type: 'Strip', strip_left: true, strip_right: true },
    { type: 'NFKC' }, { type: 'Lowercase' }] };
  json.pre_tokenizer = byteLevel({ add_prefix_space: true });
  writeCase('gpt2-normalized', json, { eos_token: '<|endoftext|>' });
  // And with accents stripped after NFD, split at whitespace, a space before every word.
  json.normalizer = { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'StripAccents' }, { type: 'Lowercase' }] };
  json.pre_tokenizer = { type: 'Sequence', pretokenizers: [{ type: 'WhitespaceSplit' },
    byteLevel({ add_prefix_space: true, use_regex: false })] };
  writeCase('gpt2-nfd-wsplit', json, { eos_token: '<|endoftext|>' });
}
{  // cl100k (GPT-4) and a Qwen2-style variant: a Split regex then ByteLevel without its own regex.
  const { vocab, merges } = bpeFromRanks(rankSets.cl100k_base);
  const specials = Object.entries(cl100k.special_tokens).map(([c, id]) => added(id, c));
  writeCase('cl100k', tokenizerJson({ added_tokens: specials,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split(LLAMA3_PATTERN), byteLevel({ use_regex: false })] },
    post_processor: byteLevel(), decoder: byteLevel(), model: bpe(vocab, merges, { ignore_merges: true }) }),
  { eos_token: '<|endoftext|>' });
  writeCase('qwen2-style', tokenizerJson({ added_tokens: specials, normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split(QWEN2_PATTERN), byteLevel({ use_regex: false })] },
    post_processor: byteLevel(), decoder: byteLevel(), model: bpe(vocab, merges) }),
  { eos_token: '<|endoftext|>', pad_token: '<|endoftext|>' });
}
{  // o200k (GPT-4o).
  const { vocab, merges } = bpeFromRanks(rankSets.o200k_base);
  const specials = Object.entries(o200k.special_tokens).map(([c, id]) => added(id, c));
  writeCase('o200k', tokenizerJson({ added_tokens: specials,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split(O200K_PATTERN), byteLevel({ use_regex: false })] },
    post_processor: byteLevel(), decoder: byteLevel(), model: bpe(vocab, merges, { ignore_merges: true }) }),
  { eos_token: '<|endoftext|>' });
}
{  // Llama 3: its own vocabulary and merges, Split + ByteLevel, ignore_merges, 256 special tokens, BOS.
  const llama3 = await load('llama3-tokenizer-js/bundle/llama3-tokenizer-with-baked-data.js');
  const vocab = {};
  llama3.vocabById.slice(0, 128000).forEach((t, id) => { vocab[t] = id; });
  const merges = [...llama3.merges.keys()].map((k) => k.split(' '));
  if (merges.some((m) => m.length !== 2)) throw new Error('llama3 merges: a token with a space');
  const specials = llama3.vocabById.slice(128000).map((c, i) => added(128000 + i, c));
  writeCase('llama3', tokenizerJson({ added_tokens: specials,
    pre_tokenizer: { type: 'Sequence', pretokenizers: [split(LLAMA3_PATTERN), byteLevel({ add_prefix_space: false, use_regex: false })] },
    post_processor: { type: 'Sequence', processors: [byteLevel(), withTemplate(template('<|begin_of_text|>'), '<|begin_of_text|>', 128000)] },
    decoder: byteLevel(), model: bpe(vocab, merges, { ignore_merges: true }) }),
  { bos_token: '<|begin_of_text|>', eos_token: '<|eot_id|>' }, { js_llama3: true });
  // Meta's original tokenizer.model: the same vocabulary as a tiktoken rank file.
  const ranks = llama3.vocabById.slice(0, 128000).map((t, id) => [tokenStringToBytes(t), id]);
  const dir = path.join(out, 'llama3-original');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, 'tokenizer.model'), rankFile(ranks));
  cases.push({ name: 'llama3-original', kind: 'tiktoken', path: dir, llama3_specials: llama3.vocabById.slice(128000),
    pattern: LLAMA3_PATTERN });
}
// ---- SentencePiece-style BPE (Llama 2, Mistral): Prepend + Replace normalizer, byte fallback ----
for (const [name, module, bos] of [['llama2', 'llama-tokenizer-js/llama-tokenizer.js', '<s>'],
  ['mistral', 'mistral-tokenizer-js/mistral-tokenizer.js', '<s>']]) {
  const tok = await load(module);
  const vocab = {};
  tok.vocabById.forEach((t, id) => { vocab[t] = id; });
  const merges = [...tok.merges.keys()].map((k) => k.split(' '));
  if (merges.some((m) => m.length !== 2)) throw new Error(`${name} merges: a token with a space`);
  const specials = [added(0, '<unk>'), added(1, '<s>'), added(2, '</s>')];
  const decoder = { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '▁' }, content: ' ' },
    { type: 'ByteFallback' }, { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] };
  const model = bpe(vocab, merges, { unk_token: '<unk>', fuse_unk: true, byte_fallback: true });
  const config = { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', add_bos_token: true, add_eos_token: false,
    chat_template: "{% for m in messages %}{{ m['content'] }}{% endfor %}" };
  writeCase(name, tokenizerJson({ added_tokens: specials,
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '▁' },
      { type: 'Replace', pattern: { String: ' ' }, content: '▁' }] },
    post_processor: withTemplate(template(bos), bos, 1), decoder, model }), config);
  if (name === 'llama2') {
    // The newer conversion: no normalizer, a Metaspace pre-tokenizer prepending only at the start.
    writeCase('llama2-metaspace', tokenizerJson({ added_tokens: specials,
      pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first', split: false },
      post_processor: withTemplate(template(bos), bos, 1), decoder, model }), config);
  }
}

fs.writeFileSync(path.join(out, 'cases.json'), JSON.stringify(cases, null, 1));
console.log(`tokenizers: ${cases.map((c) => c.name).join(', ')} -> ${out}`);
