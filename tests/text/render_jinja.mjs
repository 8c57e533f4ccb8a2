// SPDX-License-Identifier: Apache-2.0
// Renders template cases with @huggingface/jinja (the reference for test_chat_template).
//   node render_jinja.mjs CASES.json OUT.json NODE_MODULES
// CASES.json: {"cases": [{"name", "template", "context", "now": [y, m, d, H, M, S] | null}]}
// OUT.json:   {"<name>": {"output": "..."} | {"error": "..."}}
// strftime_now() reads the current date: with "now" set, Date is replaced for that render.
// Node 20 or newer (String.prototype.isWellFormed).
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";

const [casesPath, outPath, nodeModules] = process.argv.slice(2);
if (!nodeModules) {
  console.error("usage: node render_jinja.mjs CASES.json OUT.json NODE_MODULES");
  process.exit(2);
}
const require = createRequire(`${nodeModules}/`);
const { Template } = await import(pathToFileURL(require.resolve("@huggingface/jinja")).href);

const RealDate = Date;
function withNow(now, render) {
  if (!now) return render();
  globalThis.Date = class extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(now[0], now[1] - 1, now[2], now[3], now[4], now[5]);
      else super(...args);
    }
  };
  try {
    return render();
  } finally {
    globalThis.Date = RealDate;
  }
}

const results = {};
const parsed = new Map();  // template text -> Template (many cases share one)
for (const c of JSON.parse(readFileSync(casesPath, "utf8")).cases) {
  try {
    if (!parsed.has(c.template)) parsed.set(c.template, new Template(c.template));
    const output = withNow(c.now, () => parsed.get(c.template).render(c.context));
    // JSON cannot carry a lone surrogate (a string cut inside a UTF-16 pair) as text.
    results[c.name] = output.isWellFormed() ? { output } : { error: "the output has a lone UTF-16 surrogate" };
  } catch (e) {
    results[c.name] = { error: String(e && e.message ? e.message : e) };
  }
}
writeFileSync(outPath, JSON.stringify(results));
