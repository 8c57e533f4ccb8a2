#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A PEFT LoRA adapter applied to its base in plain PyTorch, as PEFT applies it, then the
Hugging Face forward of llama_ref.py (fp32, Debian's PyTorch 1.13): W + B A * scaling for every
module adapter_config.json's target_modules pick (a list: a module named by an entry or ending in
"." + entry; a string: re.fullmatch over the module name), scaling lora_alpha / r (lora_alpha /
sqrt(r) with use_rslora). The adapter's tensors are read by hand from adapter_model.safetensors
under PEFT's names base_model.model.<module>.lora_A.weight [r, in] and .lora_B.weight [out, r].

  peft_ref.py nll --jobs jobs.json
      jobs.json: [{"hf_dir": BASE, "adapter": DIR, "ids": "ids.json", "out": "ref.json"}, ...];
      each out: {"token_nll": [...], "nll": mean, "tokens": n, "adapted": [module, ...]}
"""
import argparse
import json
import math
import os
import re
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llama_ref  # noqa: E402


def targeted(config, modules):
    targets = config["target_modules"]
    if isinstance(targets, str):
        return [m for m in modules if re.fullmatch(targets, m)]
    return [m for m in modules if any(m == t or m.endswith("." + t) for t in targets)]


def apply_adapter(state, adapter_dir):
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        config = json.load(f)
    assert config["peft_type"] == "LORA", config["peft_type"]
    assert config.get("bias", "none") == "none" and not config.get("use_dora", False)
    r, alpha = config["r"], config["lora_alpha"]
    scaling = alpha / math.sqrt(r) if config.get("use_rslora", False) else alpha / r
    weights = llama_ref.read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    modules = [k[:-len(".weight")] for k, v in state.items() if k.endswith(".weight") and v.dim() == 2
               and "embed_tokens" not in k]
    adapted = targeted(config, modules)
    used = set()
    for m in adapted:
        a_name = "base_model.model.%s.lora_A.weight" % m
        b_name = "base_model.model.%s.lora_B.weight" % m
        a, b = weights[a_name], weights[b_name]
        w = state[m + ".weight"]
        assert a.shape == (r, w.shape[1]) and b.shape == (w.shape[0], r), (m, a.shape, b.shape, w.shape)
        state[m + ".weight"] = w + (b @ a) * scaling
        used.update((a_name, b_name))
    unused = sorted(set(weights) - used)
    assert not unused, "adapter tensors no target module picks: %s" % unused
    return adapted


def cmd_nll(a):
    for job in json.load(open(a.jobs)):
        cfg, state = llama_ref.load(job["hf_dir"])
        if cfg.get("tie_word_embeddings") and "lm_head.weight" not in state:
            state["lm_head.weight"] = state["model.embed_tokens.weight"]
        adapted = apply_adapter(state, job["adapter"])
        with torch.no_grad():
            ids = json.load(open(job["ids"]))
            nll = llama_ref.token_nll(cfg, state, ids)
        with open(job["out"], "w") as f:
            json.dump({"token_nll": nll, "nll": sum(nll) / len(nll), "tokens": len(nll), "adapted": adapted}, f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser("nll")
    n.add_argument("--jobs", required=True)
    a = p.parse_args()
    cmd_nll(a)


if __name__ == "__main__":
    main()
