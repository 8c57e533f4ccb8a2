// SPDX-License-Identifier: Apache-2.0
// llama.cpp (through node-llama-cpp, pinned in tests/clients) on a GGUF file: the next-token
// negative log-likelihood of every id after the first, and a greedy continuation, printed as one
// JSON object. CPU only, flash attention off, F32 key/value cache, so what is compared is
// llama.cpp's reading of the file and its math. One thread: llama.cpp's worker threads spin while
// they wait, which on a busy shared machine turns milliseconds into minutes.
//
//   node llama_cpp_nll.mjs --modules DIR/node_modules --jobs jobs.json
//     jobs.json: [{"gguf": "m.gguf", "ids": "ids.json", "out": "m.json", "generate": 32, "prompt_len": 8}, ...]
//     each out: {"token_nll": [...], "nll": mean, "tokens": n, "prompt": [...], "generated": [...]}
//   node llama_cpp_nll.mjs --modules DIR/node_modules --info model.gguf
//     -> the file's metadata and tensor list as node-llama-cpp's GGUF reader sees them
// Exit status 3 (with a message naming scripts/install-clients.sh) when node-llama-cpp is missing.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

function args() {
  const a = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (k === "--modules") a.modules = v;
    else if (k === "--jobs") a.jobs = v;
    else if (k === "--info") a.info = v;
    else throw new Error(`unknown argument ${k}`);
  }
  return a;
}

async function client(modules) {
  const entry = path.join(modules ?? "", "node-llama-cpp", "dist", "index.js");
  if (!modules || !fs.existsSync(entry)) {
    console.error(`llama_cpp_nll: node-llama-cpp is not installed at '${entry}': run scripts/install-clients.sh BUILD_DIR`);
    process.exit(3);
  }
  return import(pathToFileURL(entry).href);
}

function bigintSafe(key, value) {
  return typeof value === "bigint" ? Number(value) : value;
}

// One GGUF: the NLL of each next id, then the greedy continuation of the first prompt_len ids.
async function run(llama, job) {
  const ids = JSON.parse(fs.readFileSync(job.ids, "utf8"));
  const model = await llama.loadModel({ modelPath: job.gguf, gpuLayers: 0 });
  const context = await model.createContext({
    contextSize: 256, batchSize: 256, flashAttention: false, threads: 1,
    experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
  });
  const seq = context.getSequence();
  const input = ids.map((t, i) => (i + 1 < ids.length ? [t, { generateNext: { probabilities: true } }] : t));
  const res = await seq.controlledEvaluate(input);
  const tokenNll = [];
  for (let i = 0; i + 1 < ids.length; i++) {
    const p = res[i]?.next?.probabilities?.get(ids[i + 1]);
    tokenNll.push(p === undefined ? null : -Math.log(p));
  }
  const out = { token_nll: tokenNll, nll: tokenNll.reduce((s, x) => s + x, 0) / tokenNll.length, tokens: tokenNll.length };
  if (job.generate > 0) {
    await seq.clearHistory();
    const prompt = ids.slice(0, job.prompt_len);
    const greedy = { generateNext: { token: true, options: { temperature: 0 } } };
    const generated = [];
    let step = prompt.map((t, i) => (i + 1 < prompt.length ? t : [t, greedy]));
    for (let n = 0; n < job.generate; n++) {
      const r = await seq.controlledEvaluate(step);
      const next = r[step.length - 1]?.next?.token;
      if (next === undefined || next === null) throw new Error(`${job.gguf}: no token generated at step ${n}`);
      generated.push(next);
      step = [[next, greedy]];
    }
    out.prompt = prompt;
    out.generated = generated;
  }
  fs.writeFileSync(job.out, JSON.stringify(out) + "\n");
  await context.dispose();
  await model.dispose();
}

async function main() {
  const a = args();
  const nlc = await client(a.modules);
  if (a.info) {
    const info = await nlc.readGgufFileInfo(a.info, { readTensorInfo: true, logWarnings: false });
    const tensors = info.fullTensorInfo.map((t) => ({ name: t.name, dims: t.dimensions.map(Number), type: t.ggmlType, offset: Number(t.offset) }));
    process.stdout.write(JSON.stringify({ version: info.version, metadata: info.metadata, tensors }, bigintSafe) + "\n");
    return;
  }
  const llama = await nlc.getLlama({ gpu: false, build: "never", maxThreads: 1, logLevel: nlc.LlamaLogLevel.error });
  for (const job of JSON.parse(fs.readFileSync(a.jobs, "utf8"))) await run(llama, job);
  await llama.dispose();
}

main().catch((e) => {
  console.error(`llama_cpp_nll: ${e?.stack ?? e}`);
  process.exit(1);
});
