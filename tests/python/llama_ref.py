#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A plain-PyTorch forward of Hugging Face's Llama family (LlamaForCausalLM, Mistral, Qwen2), written
from the math, to check zeroshard's models against (fp32, Debian's PyTorch 1.13).

  llama_ref.py nll --jobs jobs.json
      jobs.json: [{"hf_dir": D, "ids": "ids.json", "out": "ref.json", "generate": N, "prompt_len": P}, ...];
      each out: the per-token next-token NLL of the ids, their mean, and the greedy continuation of
      the first P ids by N
  llama_ref.py write-bin --hf-dir D --out DIR [--shards K]
      the same weights as torch.save(state_dict) files: pytorch_model.bin, or K shards
      pytorch_model-0000k-of-0000K.bin with pytorch_model.bin.index.json
  llama_ref.py check-eval --hf-dir D --ids ids.json --bin BUILD/bin --mpirun MPIRUN --ranks N
      runs zeroshard-eval on N ranks (score from the JSON ids and from the same ids as a uint16
      .bin, then a greedy continuation) and compares with this reference: mean NLL within 1e-4
      relative, the two files' results identical, the continuation id for id

Weights are read from the directory as Hugging Face lays it out (model.safetensors, sharded
safetensors with their index, or pytorch_model.bin files), parsed here by hand (no safetensors library).
"""
import argparse
import json
import math
import os
import subprocess
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        t = torch.frombuffer(raw, dtype=DTYPES[info["dtype"]]) if raw else torch.empty(0, dtype=DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).to(torch.float32)
    return out


def read_weights(d):
    for index, reader in (("model.safetensors.index.json", read_safetensors),
                          ("pytorch_model.bin.index.json", lambda p: torch.load(p, map_location="cpu"))):
        if os.path.exists(os.path.join(d, index)):
            files = sorted(set(json.load(open(os.path.join(d, index)))["weight_map"].values()))
            state = {}
            for f in files:
                state.update(reader(os.path.join(d, f)))
            return {k: v.to(torch.float32) for k, v in state.items()}
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_safetensors(os.path.join(d, "model.safetensors"))
    state = torch.load(os.path.join(d, "pytorch_model.bin"), map_location="cpu")
    return {k: v.to(torch.float32) for k, v in state.items()}


def inverse_frequencies(cfg, head_dim):
    """Hugging Face's rotary inverse frequencies (default, linear, llama3), fp32."""
    base = cfg.get("rope_theta", 10000.0)
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type", "default"))
    if kind == "linear":
        return inv / rs["factor"]
    if kind == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        low_wavelen, high_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
        return torch.where(medium, smoothed, scaled)
    assert kind == "default", kind
    return inv


def rms_norm(x, w, eps):
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def linear(x, state, name):
    y = x @ state[name + ".weight"].t()
    if name + ".bias" in state:
        y = y + state[name + ".bias"]
    return y


def forward(cfg, state, ids):
    """Logits [T, vocab] of one sequence of ids."""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    kv_heads = cfg.get("num_key_value_heads", heads)
    head_dim = cfg.get("head_dim", hidden // heads)
    eps = cfg.get("rms_norm_eps", 1e-6)
    t = len(ids)
    x = state["model.embed_tokens.weight"][torch.tensor(ids)]
    freqs = torch.arange(t, dtype=torch.float32)[:, None] * inverse_frequencies(cfg, head_dim)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos()[None], emb.sin()[None]
    future = torch.ones(t, t, dtype=torch.bool).triu(1)
    for layer in range(cfg["num_hidden_layers"]):
        p = "model.layers.%d." % layer
        h = rms_norm(x, state[p + "input_layernorm.weight"], eps)
        q = linear(h, state, p + "self_attn.q_proj").view(t, heads, head_dim).transpose(0, 1)
        k = linear(h, state, p + "self_attn.k_proj").view(t, kv_heads, head_dim).transpose(0, 1)
        v = linear(h, state, p + "self_attn.v_proj").view(t, kv_heads, head_dim).transpose(0, 1)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        scores = (q @ k.transpose(1, 2)) / math.sqrt(head_dim)
        scores = scores.masked_fill(future, float("-inf"))
        y = torch.softmax(scores, dim=-1) @ v
        x = x + linear(y.transpose(0, 1).reshape(t, heads * head_dim), state, p + "self_attn.o_proj")
        h = rms_norm(x, state[p + "post_attention_layernorm.weight"], eps)
        gate = linear(h, state, p + "mlp.gate_proj")
        x = x + linear(torch.nn.functional.silu(gate) * linear(h, state, p + "mlp.up_proj"), state, p + "mlp.down_proj")
    x = rms_norm(x, state["model.norm.weight"], eps)
    head = state.get("lm_head.weight", state["model.embed_tokens.weight"]) if cfg.get("tie_word_embeddings") \
        else state["lm_head.weight"]
    return x @ head.t()


def token_nll(cfg, state, ids):
    logits = forward(cfg, state, ids)
    return torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(ids[1:]), reduction="none").tolist()


def greedy(cfg, state, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(forward(cfg, state, ids)[-1].argmax()))
    return ids[len(prompt):]


def load(d):
    with open(os.path.join(d, "config.json")) as f:
        return json.load(f), read_weights(d)


def cmd_nll(a):
    for job in json.load(open(a.jobs)):
        cfg, state = load(job["hf_dir"])
        with torch.no_grad():
            ids = json.load(open(job["ids"]))
            nll = token_nll(cfg, state, ids)
            out = {"token_nll": nll, "nll": sum(nll) / len(nll), "tokens": len(nll)}
            if job.get("generate"):
                out["prompt"] = ids[:job["prompt_len"]]
                out["generated"] = greedy(cfg, state, out["prompt"], job["generate"])
        with open(job["out"], "w") as f:
            json.dump(out, f)


def cmd_write_bin(a):
    cfg, state = load(a.hf_dir)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(state)
    if a.shards <= 1:
        torch.save(state, os.path.join(a.out, "pytorch_model.bin"))
        return
    weight_map = {}
    per = (len(names) + a.shards - 1) // a.shards
    for k in range(a.shards):
        file = "pytorch_model-%05d-of-%05d.bin" % (k + 1, a.shards)
        part = {n: state[n] for n in names[k * per:(k + 1) * per]}
        torch.save(part, os.path.join(a.out, file))
        weight_map.update({n: file for n in part})
    total = sum(v.numel() * 4 for v in state.values())
    with open(os.path.join(a.out, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def last_json_line(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit("CHECK FAILED: zeroshard-eval printed no JSON line:\n" + text)


def cmd_check_eval(a):
    cfg, state = load(a.hf_dir)
    ids = json.load(open(a.ids))
    run = [a.mpirun, "-n", str(a.ranks), "--oversubscribe", os.path.join(a.bin, "zeroshard-eval"), a.hf_dir]
    with torch.no_grad():
        # zeroshard-eval's windows: --context ids each, overlapping by one, so every id but the
        # first is predicted once, from the ids of its own window.
        nll, step = [], a.context - 1
        for begin in range(0, len(ids) - 1, step):
            nll += token_nll(cfg, state, ids[begin:begin + a.context])
        want = sum(nll) / len(nll)
        prompt = ids[:8]
        want_ids = greedy(cfg, state, prompt, 16)
    got = last_json_line(subprocess.run(run + ["--ids", a.ids, "--context", str(a.context)], check=True,
                                        capture_output=True, text=True).stdout)
    gen = last_json_line(subprocess.run(run + ["--generate", "16", "--prompt-ids", ",".join(map(str, prompt))],
                                        check=True, capture_output=True, text=True).stdout)
    # The same ids as a raw uint16 file.
    raw = os.path.splitext(a.ids)[0] + ".u16.bin"
    with open(raw, "wb") as f:
        f.write(b"".join(i.to_bytes(2, "little") for i in ids))
    got_bin = last_json_line(subprocess.run(run + ["--ids", raw, "--ids-dtype", "uint16", "--context", str(a.context)],
                                            check=True, capture_output=True, text=True).stdout)
    rel = abs(got["nll"] - want) / abs(want)
    print("zeroshard-eval at %d ranks: nll %.8f over %d tokens; PyTorch: %.8f over %d (relative difference %.2e)"
          % (a.ranks, got["nll"], got["tokens"], want, len(nll), rel))
    print("greedy continuation: zeroshard %s, PyTorch %s" % (gen["generated"], want_ids))
    print("the ids as uint16 .bin: nll %.8f over %d tokens" % (got_bin["nll"], got_bin["tokens"]))
    ok = rel <= 1e-4 and got["tokens"] == len(nll) and gen["generated"] == want_ids and gen["prompt"] == prompt \
        and got_bin == got
    print("CHECK PASSED" if ok else "CHECK FAILED")
    sys.exit(0 if ok else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser("nll")
    n.add_argument("--jobs", required=True)
    w = sub.add_parser("write-bin")
    w.add_argument("--hf-dir", required=True)
    w.add_argument("--out", required=True)
    w.add_argument("--shards", type=int, default=1)
    c = sub.add_parser("check-eval")
    c.add_argument("--hf-dir", required=True)
    c.add_argument("--ids", required=True)
    c.add_argument("--bin", required=True)
    c.add_argument("--mpirun", required=True)
    c.add_argument("--ranks", type=int, default=2)
    c.add_argument("--context", type=int, default=24)
    a = p.parse_args()
    {"nll": cmd_nll, "write-bin": cmd_write_bin, "check-eval": cmd_check_eval}[a.command](a)


if __name__ == "__main__":
    main()
