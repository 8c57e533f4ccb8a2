// SPDX-License-Identifier: Apache-2.0
// The test corpus, about 1.3 MB of varied text as JSON lines {"text": ...}: Debian's fortunes,
// licenses, man page sources and C headers, plus generated Unicode (CJK, Greek with final sigma,
// Cyrillic, Arabic, Hebrew, Devanagari, Thai, emoji with ZWJ sequences, combining marks,
// compatibility characters, whitespace runs, long digit runs, code, contractions, special-token
// strings). Deterministic for a given machine's files.
//
// Left out on purpose, where the JavaScript references cannot agree with Hugging Face's Rust
// tokenizers (and so with zeroshard): U+0085 and U+FEFF (JavaScript's \s and trim() treat them
// the other way round from Unicode's White_Space), U+017F (case-insensitive (?i:'s) matches it,
// the expanded 's|'S of JavaScript ports does not), and characters newer than Unicode 14 (PCRE2's
// tables).
//
//   node corpus.mjs OUT.jsonl

import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';

const out = process.argv[2];
if (!out) {
  console.error('usage: node corpus.mjs OUT.jsonl');
  process.exit(2);
}

function rng(seed) {  // mulberry32
  return () => {
    seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const random = rng(20240520);
const pick = (list) => list[Math.floor(random() * list.length)];
const int = (lo, hi) => lo + Math.floor(random() * (hi - lo + 1));

const decoder = new TextDecoder('utf-8', { fatal: true });
const excluded = /[\u0085\uFEFF\u017F]/g;
function readText(file, gz = false) {
  try {
    let bytes = fs.readFileSync(file);
    if (gz) bytes = zlib.gunzipSync(bytes);
    return decoder.decode(bytes).replace(excluded, '');
  } catch {
    return null;  // missing, unreadable or not UTF-8
  }
}

// Documents of 200..4000 characters cut at line ends.
function documents(text) {
  const docs = [];
  const lines = text.split('\n');
  let doc = '';
  let want = int(200, 4000);
  for (const line of lines) {
    doc += line + '\n';
    if (doc.length >= want) {
      docs.push(doc);
      doc = '';
      want = int(200, 4000);
    }
  }
  if (doc.trim().length > 0) docs.push(doc);
  return docs;
}

const docs = [];
let budget = 0;
function addSource(files, limit, gz = false) {
  let used = 0;
  for (const file of files) {
    if (used >= limit) break;
    const text = readText(file, gz);
    if (!text) continue;
    for (const d of documents(text.slice(0, limit - used))) {
      docs.push(d);
      used += d.length;
    }
  }
  budget += used;
  return used;
}

const listDir = (dir, filter) => {
  try {
    return fs.readdirSync(dir).filter(filter).sort().map((f) => path.join(dir, f));
  } catch {
    return [];
  }
};

addSource(listDir('/usr/share/common-licenses', () => true), 300000);
addSource(listDir('/usr/share/man/man1', (f) => f.endsWith('.1.gz')).filter((_, i) => i % 37 === 0), 250000, true);
addSource(['stdio.h', 'stdlib.h', 'string.h', 'unistd.h', 'pthread.h', 'math.h', 'signal.h', 'fcntl.h', 'zlib.h']
  .map((h) => path.join('/usr/include', h)), 100000);
// Fortunes fill up to 1.05 MB of Debian text in all.
addSource(listDir('/usr/share/games/fortunes', (f) => !f.includes('.')), Math.max(400000, 1050000 - budget));

// ---- generated Unicode ----
const pieces = {
  cjk: ['漢字', '東京都', '北京市', '中华人民共和国', '日本語のテキスト', 'ひらがな', 'カタカナ', '한국어 문장입니다', '사랑해요', '我爱你',
    '机器学习', '深度学习模型', '分布式训练', '你好，世界！', '「こんにちは」', '。', '、', '：', '（括弧）'],
  greek: ['ΟΔΟΣ', 'Οδυσσεύς', 'ΣΟΦΟΣ ΣΟΦΟΣ', 'σοφός', 'ΑΣ.', 'ΚΑΛΗΜΕΡΑ ΚΟΣΜΕ', 'Σ', 'ΌΣΟΣ', 'ΦΙΛΟΣΟΦΙΑΣ,', 'αΣ'],
  cyrillic: ['Привет, мир!', 'Москва', 'ЗДРАВСТВУЙТЕ', 'ёлка', 'Україна', 'Ҳақиқат'],
  rtl: ['مرحبا بالعالم', 'العربية', 'שלום עולם', 'עִבְרִית', 'فارسی'],
  indic: ['नमस्ते दुनिया', 'हिन्दी', 'ভাষা', 'தமிழ்', 'ภาษาไทย', 'สวัสดีครับ', 'ພາສາລາວ'],
  emoji: ['😀', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇩🇪', '🇯🇵', '❤️', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '✊🏻', '🙈🙉🙊', '⭐️', '🔥🔥🔥'],
  combining: ['e\u0301', 'a\u0308', 'n\u0303', 'Z\u0351\u0354\u0333a\u0306\u0325l\u030Cg\u0350o\u0358', 'o\u0328\u0304',
    'ﬁ', 'ﬂ', '①②③', 'Ａｂｃ１２３', '㍿', 'ｶﾀｶﾅ', '½', 'x²', 'Ⅻ', 'İstanbul', 'İİ', 'ǅ', 'ß', 'Straße', 'ÀÉÎÕÜ', 'µ'],
  space: [' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\r\n', ' \n', '\n ', '    ', '\u00A0', '\u3000', '\u2003',
    '\u200B', ' \t \n', '        ', '\u2028', '\v', '\f'],
  digits: ['0', '7', '42', '1234567890123456789012345678901234567890', '3.14159265358979', '1,000,000', '٠١٢٣٤٥٦٧٨٩',
    '０１２３', '१२३', '2024-05-20', '0x7FFFFFFF', '1e-9', '१०००'],
  code: ['int main(int argc, char** argv) {', '  return 0;\n}', 'for (size_t i = 0; i < n; ++i)', 'def f(x):\n    return x**2',
    'x += y >> 2;', '#include <vector>', 'std::vector<int32_t> ids;', '// comment', '/* block */', 'if (a && b || !c)',
    'console.log(`${a}`);', 'SELECT * FROM t WHERE id = 1;', '$ ls -la | grep "*.txt"', '{"key": [1, 2, 3]}', '<div class="a">',
    'fn main() -> Result<(), Box<dyn Error>> {', '==>', '!==', '...', '-->', '@@ -1,3 +1,4 @@'],
  words: ['Hello', 'world', 'the', 'The', 'quick', 'brown', 'fox', 'jumps', 'over', 'lazy', 'dog', 'sharding', 'ZeRO-3',
    'tokenizer', 'GPU', 'NVMe', 'offload', 'HTTPS', 'camelCase', 'snake_case', 'UPPER', 'Mixed', 'iPhone', 'naïve', 'café',
    'résumé', 'Zürich', 'Ærøskøbing', 'São', 'Paulo', 'façade', 'coöperate'],
  contractions: ["it's", "IT'S", "we'll", "WE'LL", "they've", "I'm", "you're", "she'd", "don't", "can't", "it’s",
    "O'Neil", "'s", "'S", "'ll", "'Ll", "''", "'"],
  specials: ['<|endoftext|>', '<s>', '</s>', '<unk>', '<|begin_of_text|>', '<|eot_id|>', '<|start_header_id|>',
    '<|end_header_id|>', '<|fim_prefix|>', '<|endofprompt|>', '<mask>', '[RSTRIP]', ' <mask> ', '  [RSTRIP]  '],
  punct: ['.', ',', '!', '?', ';', ':', '—', '–', '…', '«', '»', '“', '”', '‘', '’', '(', ')', '[', ']', '-', '/', '\\', '|',
    '&', '%', '$', '€', '£', '¥', '§', '©', '®', '™', '°', '±', '×', '÷', '→', '⇒', '∀', '∑', '√', '∞', '≠', '≤'],
};
const kinds = Object.keys(pieces);
const weights = { words: 6, space: 5, punct: 3, code: 2, specials: 1 };
const weighted = kinds.flatMap((k) => Array(weights[k] ?? 2).fill(k));

function generated(length) {
  let s = '';
  while (s.length < length) {
    const kind = pick(weighted);
    let piece = pick(pieces[kind]);
    if (kind === 'words' && random() < 0.3) piece = piece.toUpperCase();
    if (kind === 'space' && random() < 0.1) piece = piece.repeat(int(2, 40));
    if (kind === 'digits' && random() < 0.1) piece = piece.repeat(int(2, 30));
    s += piece;
    if (kind !== 'space' && random() < 0.6) s += ' ';
  }
  return s;
}

// Edge cases first: empty, lone spaces, a long run of one character, a long word.
docs.push('', ' ', '  ', '\n', 'a', ' a', '  leading spaces', 'trailing spaces  ', '\t\ttabs', '\r\n\r\n');
docs.push(' '.repeat(3000), '\n'.repeat(500), 'a'.repeat(2000), 'ab'.repeat(1000), '9'.repeat(1500),
  'Supercalifragilisticexpialidocious'.repeat(30), '👍'.repeat(300), '漢'.repeat(600));
for (let i = 0; i < 120; ++i) docs.push(generated(int(300, 3500)));

fs.writeFileSync(out, docs.map((text) => JSON.stringify({ text })).join('\n') + '\n');
const bytes = docs.reduce((n, d) => n + Buffer.byteLength(d), 0);
console.log(`corpus: ${docs.length} documents, ${bytes} bytes of UTF-8 -> ${out}`);
