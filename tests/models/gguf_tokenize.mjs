// SPDX-License-Identifier: Apache-2.0
// llama.cpp's tokenizer (through node-llama-cpp, pinned in tests/clients) on the vocabulary of GGUF
// files: each text tokenized with special-token text parsed (no BOS/EOS added) and the ids
// detokenized back, plus whether llama.cpp adds BOS/EOS. Only the vocabulary is loaded.
//
//   node gguf_tokenize.mjs --modules DIR/node_modules --jobs jobs.json
//     jobs.json: [{"gguf": "m.gguf", "texts": ["..."], "out": "m.json"}, ...]
//     each out: {"ids": [[...], ...], "text": ["...", ...], "add_bos": bool, "add_eos": bool, "bos": id|null}
// Exit status 3 (with a message naming scripts/install-clients.sh) when node-llama-cpp is missing.
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const argv = process.argv.slice(2);
const arg = (name) => argv[argv.indexOf(name) + 1];
const modules = arg("--modules");
const entry = path.join(modules ?? "", "node-llama-cpp", "dist", "index.js");
if (!modules || !fs.existsSync(entry)) {
  console.error(`gguf_tokenize: node-llama-cpp is not installed at '${entry}': run scripts/install-clients.sh BUILD_DIR`);
  process.exit(3);
}

async function main() {
  const nlc = await import(pathToFileURL(entry).href);
  const llama = await nlc.getLlama({ gpu: false, build: "never", maxThreads: 1, logLevel: nlc.LlamaLogLevel.error });
  for (const job of JSON.parse(fs.readFileSync(arg("--jobs"), "utf8"))) {
    const model = await llama.loadModel({ modelPath: job.gguf, gpuLayers: 0, vocabOnly: true });
    const ids = job.texts.map((t) => Array.from(model.tokenize(t, true)));
    const text = ids.map((t) => model.detokenize(t, true));
    fs.writeFileSync(job.out, JSON.stringify({ ids, text, add_bos: model.tokens.shouldPrependBosToken,
      add_eos: model.tokens.shouldAppendEosToken, bos: model.tokens.bos ?? null }) + "\n");
    await model.dispose();
  }
  await llama.dispose();
}

main().catch((e) => {
  console.error(`gguf_tokenize: ${e?.stack ?? e}`);
  process.exit(1);
});
