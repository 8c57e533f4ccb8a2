#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""zeroshard's finetune_llama against PyTorch DDP on the same Llama model, side by side in one run.

  /usr/bin/python3 bench/bench_llama_vs_pytorch.py [--bin build/bin] [--ranks 2] [--rounds 3] [--steps 5]
      [--warmup 1] [--work DIR] [--mpirun mpirun] [--gemm-seconds 3] [--hidden 768] [--intermediate 2048]
      [--layers 12] [--heads 12] [--kv-heads 4] [--vocab 32000] [--seq-len 256] [--global-batch 4]

The model (defaults): a Llama-3-style Hugging Face directory written here: hidden 768, MLP 2048,
12 layers, 12 query heads of 64 over 4 key/value heads (grouped-query attention), vocab_size 32000,
untied LM head, RMSNorm eps 1e-5, rope_theta 500000, fp32; 124.7M parameters, 100.1M of them in
the matrix products (the embedding table is a lookup). Weights are random as Hugging Face
initialises Llama (every matrix and the embedding N(0, 0.02), the norms 1). The tokenizer is a
byte-level BPE (tokenizer.json with 128 merges learned here from the corpus, BOS and EOS special
tokens, tokenizer_config.json): it uses the first 386 ids of the 32000, which changes nothing in
the cost of a step. The data is a JSONL file of {"text"} records, the fortunes of
/usr/share/games/fortunes (Debian package `fortunes`, in scripts/setup.sh) in file order, as many
as the run's steps need; finetune_llama packs them into samples of --seq-len tokens whose tokens
attend only inside their own document, positions restarting at each one.

What runs:
- zeroshard: `mpirun -n N --oversubscribe /bin/sh -c '/usr/bin/time ...' BIN/finetune_llama DIR
  --data corpus.jsonl --seq-len L --global-batch B --steps S --no-shuffle --lr 3e-4 --weight-decay 0.1`:
  every weight trained (no LoRA), fp32, FULL_SHARD, AdamW (betas 0.9/0.999, eps 1e-8, the decay on
  every parameter: finetune_llama makes no parameter groups), constant rate, no gradient clipping.
  Every rank runs under GNU time (its own output file) for its peak RSS. Its tokens/s: the steps
  after warm-up x B x L tokens / the sum of their `time T s` on rank 0's step lines (the wall time
  of the step, ended by collectives over all ranks).
- PyTorch: the same model (LlamaPeer below: Hugging Face's LlamaForCausalLM math, with
  tests/python/llama_ref.py's rotary frequencies and RMSNorm, per-document positions and the same
  document-and-causal attention mask; F.scaled_dot_product_attention where PyTorch has it, as
  zeroshard uses it where LibTorch has it) under DistributedDataParallel over gloo, one process
  per rank from torch.multiprocessing, loaded from the same weights; AdamW with the same
  hyperparameters and one parameter group; the same samples every step (read from the token
  shards `zeroshard-data shards` writes for the same JSONL, packed as finetune_llama packs them),
  the same loss (summed NLL over the global batch's trained tokens, whose count is all-reduced,
  as finetune_llama does), and the step's loss all-reduced for the report, as finetune_llama's
  step line. Its tokens/s: rank 0's wall time of batch + forward + backward + AdamW step over the
  steps after warm-up. Peak RSS: getrusage(RUSAGE_SELF).ru_maxrss in every rank process.
- Threads: both sides get OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = cores // ranks (the peer also
  torch.set_num_threads), so each rank has its share of the cores.
- Same math first: finetune_llama trains 2 steps of a second directory, the same config and
  tokenizer with sharp random weights (Hugging Face's N(0, 0.02) makes a model that predicts
  almost uniformly, whose loss hardly depends on the math: see random_weights); in one process,
  PyTorch computes the loss of step 1's samples (the ids on its step line) from the same weights,
  takes the AdamW step on its gradient, and computes step 2's loss. Both losses must agree with
  finetune_llama's within 1e-4 relative, else the script fails naming both values: the model,
  the samples with their masks and positions, the loss normalisation and the learning rate are
  then the same on both sides. (Adam's first step does not depend on the betas, and a decay of
  lr x 0.1 changes step 2's loss by less than the tolerance: those hyperparameters are the same
  by construction, passed to both from one place.)
- Rounds: the systems alternate (the order flipped every round) so machine drift hits both; per
  system the median over rounds of tokens/s, the ratio zeroshard / PyTorch of the medians and its
  spread (min..max of the per-round ratios), the peak RSS of the largest rank (max over rounds)
  and the ratio zeroshard / PyTorch. Every run checks that zeroshard trained on the samples the
  peer did (the step lines' global ids: rank r's share is the r-th slice on both sides) and
  reports the largest relative difference of the two systems' step losses (informative only: from
  Hugging Face's initialisation they stay near ln(vocab) whatever the math; the check above is
  the proof).
- The physical limit, after the rounds: the fp32 GEMM peak of the same rank layout (one process
  per rank doing [1024 x 1024] products at once, the same threads; bench/peer_common.py) and each
  system's model-FLOPs utilisation (tokens/s x training FLOPs per token / that peak).
Only an fp32 row: finetune_llama has no bf16 or activation-checkpointing option.
The last line printed is one JSON object with every figure. Exits non-zero with the reason on any
failure.
"""

import argparse
import json
import math
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
except ImportError as e:
    sys.exit(f"bench_llama_vs_pytorch.py: {sys.executable} cannot import torch ({e}); run it with Debian's "
             "/usr/bin/python3 and python3-torch (apt-get install python3-torch)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import finetune_llama_check  # noqa: E402  (byte-level BPE and safetensors writers)
import llama_ref  # noqa: E402  (Hugging Face's rotary frequencies and RMSNorm)
import zs_gpt  # noqa: E402  (the corpus files train_gpt reads)
from peer_common import fail, free_port, gemm_peak, run_ranks  # noqa: E402

CORPUS = "/usr/share/games/fortunes"
MERGES = 128
BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"
INIT_STD = 0.02  # Hugging Face's initializer_range for Llama


# ---- the model directory and the data ----

def hf_config(a, bos_id, eos_id):
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": a.vocab,
            "hidden_size": a.hidden, "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
            "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
            "max_position_embeddings": max(2048, a.seq_len), "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "tie_word_embeddings": False, "hidden_act": "silu", "torch_dtype": "float32",
            "initializer_range": INIT_STD, "bos_token_id": bos_id, "eos_token_id": eos_id}


def random_weights(cfg, seed, sharp=False):
    """Hugging Face's Llama initialisation: matrices and the embedding N(0, 0.02), norms 1. Such a
    model predicts almost uniformly (its loss is ln(vocab) give or take 1e-3), so a loss says little
    about the math behind it; `sharp` weights are for the same-math check: matrices N(0, 1 / fan_in)
    (unit-scale outputs, attention scores of order 1), the head's 2 / sqrt(fan_in) (logits of
    order 2), the embedding N(0, 1), norms 1 + N(0, 0.1)."""
    g = torch.Generator().manual_seed(seed)
    h, f, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d = h // cfg["num_attention_heads"]
    q, kv = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d

    def matrix(rows, cols, gain=1.0):
        return torch.randn(rows, cols, generator=g) * (gain / math.sqrt(cols) if sharp else INIT_STD)

    def norm(n):
        return 1 + torch.randn(n, generator=g) * 0.1 if sharp else torch.ones(n)

    w = {"model.embed_tokens.weight": torch.randn(v, h, generator=g) * (1.0 if sharp else INIT_STD)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "self_attn.q_proj.weight"] = matrix(q, h)
        w[p + "self_attn.k_proj.weight"] = matrix(kv, h)
        w[p + "self_attn.v_proj.weight"] = matrix(kv, h)
        w[p + "self_attn.o_proj.weight"] = matrix(h, q)
        w[p + "mlp.gate_proj.weight"] = matrix(f, h)
        w[p + "mlp.up_proj.weight"] = matrix(f, h)
        w[p + "mlp.down_proj.weight"] = matrix(h, f)
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "post_attention_layernorm.weight"] = norm(h)
    w["model.norm.weight"] = norm(h)
    w["lm_head.weight"] = matrix(v, h, 2.0)
    return w


def fortunes(min_bytes):
    """The fortunes of CORPUS in file order, as many as make min_bytes of text."""
    if not os.path.isdir(CORPUS):
        fail(f"{CORPUS} is missing: install Debian's 'fortunes' package (scripts/setup.sh does)")
    docs, size = [], 0
    for path in zs_gpt.corpus_files(CORPUS):
        text = open(path, "rb").read().decode("utf-8", "replace")
        for d in text.split("\n%\n"):
            d = d.strip("%\n")
            if d.strip():
                docs.append(d)
                size += len(d.encode())
                if size >= min_bytes:
                    return docs
    fail(f"{CORPUS} holds only {size} bytes of fortunes; this run's samples need {min_bytes}")


def tokenizer_json(merges, symbols):
    vocab = {symbols[b]: b for b in range(256)}
    for x, y in merges:
        vocab.setdefault(x + y, len(vocab))
    added = [{"id": len(vocab) + i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, s in enumerate((BOS, EOS))]
    bos = {"SpecialToken": {"id": BOS, "type_id": 0}}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos,
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {BOS: {"id": BOS, "ids": [added[0]["id"]], "tokens": [BOS]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": vocab,
                  "merges": ["%s %s" % m for m in merges]},
    }


def write_model(path, cfg, tok, state):
    os.makedirs(path)
    with open(os.path.join(path, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": BOS, "eos_token": EOS}, f)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    finetune_llama_check.write_safetensors(os.path.join(path, "model.safetensors"), state)


def write_fixture(a, work):
    """corpus.jsonl and two model directories of the same config and tokenizer: `model` (Hugging
    Face's initialisation, what the runs train; its weights also as initial.pt for the peer) and
    `check_model` (sharp weights, for the same-math check). Returns (model, check_model, its
    weights, corpus, config, documents)."""
    needed_tokens = max(a.warmup + a.steps, 2) * a.global_batch * a.seq_len + 1
    # A token is at least one byte (BOS and EOS aside), so 4x the bytes leaves room for the merges.
    docs = fortunes(4 * needed_tokens)
    corpus = os.path.join(work, "corpus.jsonl")
    finetune_llama_check.write_jsonl(corpus, [{"text": d} for d in docs])
    symbols = finetune_llama_check.byte_symbols()
    merges = finetune_llama_check.learn_merges(docs[:200], symbols, MERGES)
    tok = tokenizer_json(merges, symbols)
    bos_id, eos_id = (t["id"] for t in tok["added_tokens"])
    if eos_id >= a.vocab:
        fail(f"--vocab {a.vocab} is below the tokenizer's {eos_id + 1} ids")
    cfg = hf_config(a, bos_id, eos_id)
    model, check_model = os.path.join(work, "model"), os.path.join(work, "check_model")
    state = random_weights(cfg, 1234)
    write_model(model, cfg, tok, state)
    torch.save(state, os.path.join(work, "initial.pt"))  # what the peer's ranks load
    del state
    check_state = random_weights(cfg, 99, sharp=True)
    write_model(check_model, cfg, tok, check_state)
    return model, check_model, check_state, corpus, cfg, len(docs)


def read_shards(bin_dir, work, model, corpus):
    """(tokens, loss mask, document offsets) of the token shards `zeroshard-data shards` writes for the
    corpus with the model's tokenizer (the encoder finetune_llama's ranks build theirs with)."""
    out = os.path.join(work, "shards")
    p = subprocess.run([os.path.join(bin_dir, "zeroshard-data"), "shards", "--tokenizer", model, "--out", out,
                        "--progress", "none", corpus], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        fail(f"zeroshard-data shards exited with status {p.returncode}:\n{p.stdout}")
    names = sorted(n for n in os.listdir(out) if n.endswith(".bin"))
    tokens, mask, offsets = [], [], [0]
    for n in names:
        base = os.path.join(out, n[:-len(".bin")])
        raw = open(base + ".bin", "rb").read()
        magic, _, count = (int.from_bytes(raw[4 * i:4 * i + 4], "little") for i in range(3))
        if magic != 20240520:
            fail(f"{base}.bin: llm.c magic {magic}, expected 20240520 (uint16 tokens)")
        t = torch.frombuffer(bytearray(raw[1024:1024 + 2 * count]), dtype=torch.int16).long() & 0xFFFF
        docs = open(base + ".docs", "rb").read()
        nd = int.from_bytes(docs[16:24], "little")
        offs = torch.frombuffer(bytearray(docs[24:24 + 8 * (nd + 1)]), dtype=torch.int64)
        m = open(base + ".mask", "rb").read()
        bits = torch.frombuffer(bytearray(m[16:]), dtype=torch.uint8).long()
        bits = ((bits[:, None] >> torch.arange(8)) & 1).reshape(-1)[:count].bool()
        base_offset = offsets[-1]
        tokens.append(t)
        mask.append(bits)
        offsets += [base_offset + int(o) for o in offs[1:]]
    return torch.cat(tokens), torch.cat(mask), torch.tensor(offsets)


def pack(tokens, mask, offsets, seq_len, count):
    """The first `count` samples as finetune_llama packs them (data/packing.h): sample i reads tokens
    [i L, i L + L + 1); a target is trained when the mask marks it and it is in its input's
    document; attention stays inside a document, whose positions restart at 0 in each sample.
    Returns int64 [count, L] ids, positions, documents and targets (-100: not trained)."""
    available = (len(tokens) - 1) // seq_len
    if available < count:
        fail(f"the corpus packs into {available} samples of {seq_len} tokens; the run needs {count}")
    n = count * seq_len + 1
    starts = torch.zeros(n, dtype=torch.long)
    inner = offsets[(offsets > 0) & (offsets < n)]
    starts.index_add_(0, inner, torch.ones_like(inner))
    doc_of = starts.cumsum(0)  # document number of every token
    idx = torch.arange(count)[:, None] * seq_len + torch.arange(seq_len)[None, :]
    ids, targets = tokens[idx], tokens[idx + 1]
    docs = doc_of[idx]
    trained = mask[idx + 1] & (doc_of[idx + 1] == docs)
    targets = torch.where(trained, targets, torch.full_like(targets, -100))
    docs = docs - docs[:, :1]
    # Positions: the index minus the index of the document's first token in the sample.
    col = torch.arange(seq_len).expand(count, seq_len)
    first = torch.ones_like(docs, dtype=torch.bool)
    first[:, 1:] = docs[:, 1:] != docs[:, :-1]
    positions = col - torch.where(first, col, torch.zeros_like(col)).cummax(1).values
    return {"ids": ids, "positions": positions, "documents": docs, "targets": targets}


# ---- the PyTorch model: Hugging Face's LlamaForCausalLM, batched, with document masks ----

class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.empty(dim, device="meta"))

    def forward(self, x):
        return llama_ref.rms_norm(x, self.weight, self.eps)


def meta_linear(n_in, n_out):
    return torch.nn.Linear(n_in, n_out, bias=False, device="meta")


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, f = c["hidden_size"], c["intermediate_size"]
        self.heads, self.kv_heads = c["num_attention_heads"], c["num_key_value_heads"]
        self.head_dim = h // self.heads
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.self_attn = torch.nn.Module()
        self.self_attn.q_proj = meta_linear(h, self.heads * self.head_dim)
        self.self_attn.k_proj = meta_linear(h, self.kv_heads * self.head_dim)
        self.self_attn.v_proj = meta_linear(h, self.kv_heads * self.head_dim)
        self.self_attn.o_proj = meta_linear(self.heads * self.head_dim, h)
        self.mlp = torch.nn.Module()
        self.mlp.gate_proj = meta_linear(h, f)
        self.mlp.up_proj = meta_linear(h, f)
        self.mlp.down_proj = meta_linear(f, h)

    def attention(self, x, cos, sin, allowed):
        b, t, _ = x.shape
        at = self.self_attn

        def heads(y, n):
            return y.view(b, t, n, self.head_dim).transpose(1, 2)

        q, k, v = heads(at.q_proj(x), self.heads), heads(at.k_proj(x), self.kv_heads), heads(at.v_proj(x), self.kv_heads)
        q = q * cos + llama_ref.rotate_half(q) * sin
        k = k * cos + llama_ref.rotate_half(k) * sin
        rep = self.heads // self.kv_heads
        if rep > 1:  # kv head h serves query heads h * rep ... (Hugging Face's repeat_kv)
            k = k[:, :, None].expand(b, self.kv_heads, rep, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
            v = v[:, :, None].expand(b, self.kv_heads, rep, t, self.head_dim).reshape(b, self.heads, t, self.head_dim)
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        else:
            scores = (q @ k.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim))
            scores = scores.masked_fill(~allowed, float("-inf"))
            y = torch.softmax(scores, dim=-1) @ v
        return at.o_proj(y.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))

    def forward(self, x, cos, sin, allowed):
        x = x + self.attention(self.input_layernorm(x), cos, sin, allowed)
        h = self.post_attention_layernorm(x)
        return x + self.mlp.down_proj(F.silu(self.mlp.gate_proj(h)) * self.mlp.up_proj(h))


class LlamaPeer(torch.nn.Module):
    """LlamaForCausalLM (untied head) whose parameters are the given state dict's tensors (no copy);
    forward(ids, positions, documents) -> logits [B, T, vocab]."""

    def __init__(self, c, state):
        super().__init__()
        self.config = c
        h = c["hidden_size"]
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(c["vocab_size"], h, device="meta")
        self.model.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.model.norm = RMSNorm(h, c["rms_norm_eps"])
        self.lm_head = meta_linear(h, c["vocab_size"])
        names = {n for n, _ in self.named_parameters()}
        if names != set(state):
            fail(f"LlamaPeer: parameters {sorted(names ^ set(state))[:4]} are in only one of the model and the "
                 "weights")
        for name, t in state.items():
            owner, attr = self.get_submodule(name.rsplit(".", 1)[0]), name.rsplit(".", 1)[1]
            setattr(owner, attr, torch.nn.Parameter(t))
        head_dim = h // c["num_attention_heads"]
        self.register_buffer("inv_freq", llama_ref.inverse_frequencies(c, head_dim), persistent=False)

    def forward(self, ids, positions, documents):
        t = ids.shape[1]
        freqs = positions.float()[..., None] * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        allowed = ((documents[:, :, None] == documents[:, None, :]) & causal)[:, None]
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, allowed)
        return self.lm_head(self.model.norm(x))


def nll_sum(model, batch):
    logits = model(batch["ids"], batch["positions"], batch["documents"])
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch["targets"].reshape(-1),
                           ignore_index=-100, reduction="sum")


def adamw(params, a):
    return torch.optim.AdamW(params, lr=a.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=a.weight_decay)


def rows(samples, ids):
    return {k: v[ids] for k, v in samples.items()}


# ---- zeroshard ----

def finetune_argv(a, model, corpus, steps):
    return [os.path.join(a.bin, "finetune_llama"), model, "--data", corpus, "--seq-len", str(a.seq_len),
            "--global-batch", str(a.global_batch), "--steps", str(steps), "--no-shuffle", "--lr", repr(a.lr),
            "--weight-decay", repr(a.weight_decay)]


STEP_LINE = re.compile(r"^step (\d+) loss (\S+) samples \[([0-9, ]*)\] time ([0-9.]+) s$", re.M)


def run_zeroshard(a, model, corpus, steps, rss_dir, env):
    """One finetune_llama run: ([(loss, sample ids, seconds) per step], [peak RSS per rank, KiB])."""
    out, rss = run_ranks(a.mpirun, a.ranks, finetune_argv(a, model, corpus, steps), rss_dir, env)
    found = [(int(m.group(1)), float(m.group(2)), [int(x) for x in m.group(3).split(",") if x.strip()],
              float(m.group(4))) for m in STEP_LINE.finditer(out)]
    if [s for s, *_ in found] != list(range(1, steps + 1)):
        print(out, flush=True)
        fail(f"finetune_llama printed step lines {[s for s, *_ in found]}, expected 1..{steps} (output above)")
    return [(loss, ids, sec) for _, loss, ids, sec in found], rss


def same_math(a, model, corpus, state, cfg, samples, env):
    """finetune_llama's first two step losses against PyTorch's on the same samples (one process,
    the whole global batch): step 1 from the initial weights, step 2 after one AdamW step."""
    steps, _ = run_zeroshard(a, model, corpus, 2, os.path.join(a.work, "check.rss"), env)
    peer = LlamaPeer(cfg, state)
    opt = adamw(peer.parameters(), a)
    ours = []
    for i, (_, ids, _) in enumerate(steps):
        batch = rows(samples, torch.tensor(ids))
        trained = int((batch["targets"] != -100).sum())
        if i == 0:
            loss = nll_sum(peer, batch) / trained
            loss.backward()
            opt.step()
        else:
            with torch.no_grad():
                loss = nll_sum(peer, batch) / trained
        ours.append(loss.item())
    result = []
    for i, ((zs, ids, _), pt) in enumerate(zip(steps, ours), 1):
        rel = abs(zs - pt) / abs(pt)
        print(f"same math, step {i} (samples {ids}{', after one AdamW step' if i > 1 else ''}): loss "
              f"finetune_llama {zs:.8f}, PyTorch {pt:.8f}, relative difference {rel:.2e}", flush=True)
        if not rel <= 1e-4:
            fail(f"step {i}: finetune_llama's loss {zs:.8f} differs from PyTorch's {pt:.8f} by {rel:.2e} relative "
                 "(> 1e-4): the two sides do not compute the same training step")
        result.append({"samples": ids, "zeroshard_loss": zs, "pytorch_loss": pt, "relative_difference": rel})
    return result


# ---- the PyTorch peer ----

def peer_rank(rank, cfg):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(cfg["port"])
    os.environ.setdefault("USE_LIBUV", "0")  # see bench_vs_pytorch.py
    torch.set_num_threads(cfg["threads"])
    dist.init_process_group("gloo", rank=rank, world_size=cfg["ranks"])
    model = LlamaPeer(cfg["config"], torch.load(cfg["init_from"]))
    model.train()
    ddp = DistributedDataParallel(model)
    a = argparse.Namespace(lr=cfg["lr"], weight_decay=cfg["weight_decay"])
    opt = adamw(model.parameters(), a)
    samples = torch.load(cfg["samples"])
    b, per_rank = cfg["global_batch"], cfg["global_batch"] // cfg["ranks"]
    times, losses = [], []
    for step in range(cfg["warmup"] + cfg["steps"]):
        t0 = time.perf_counter()
        first = step * b + rank * per_rank
        batch = rows(samples, slice(first, first + per_rank))
        trained = (batch["targets"] != -100).sum().double()
        dist.all_reduce(trained)
        nll = nll_sum(ddp, batch)
        opt.zero_grad(set_to_none=True)
        (nll * (cfg["ranks"] / trained.item())).backward()  # DDP averages over ranks
        opt.step()
        total = nll.detach().double()
        dist.all_reduce(total)
        losses.append(total.item() / trained.item())
        times.append(time.perf_counter() - t0)
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with open(os.path.join(cfg["out"], f"rank{rank}.json"), "w") as f:
        json.dump({"times": times, "losses": losses, "rss_kib": rss_kib}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_peer(a, cfg_model, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cfg = {"ranks": a.ranks, "threads": a.threads, "config": cfg_model, "init_from": os.path.join(a.work, "initial.pt"),
           "samples": os.path.join(a.work, "samples.pt"), "global_batch": a.global_batch, "lr": a.lr,
           "weight_decay": a.weight_decay, "warmup": a.warmup, "steps": a.steps, "out": out, "port": free_port()}
    try:
        mp.spawn(peer_rank, args=(cfg,), nprocs=a.ranks, join=True)
    except Exception as e:  # a rank's exception, with its traceback in the message
        fail(f"the PyTorch peer failed: {e}")
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(a.ranks)]
    return ranks[0]["times"], ranks[0]["losses"], [r["rss_kib"] for r in ranks]


# ---- figures ----

def param_count(c):
    h, f, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = h // c["num_attention_heads"]
    q, kv = c["num_attention_heads"] * d, c["num_key_value_heads"] * d
    per_layer = 2 * h * q + 2 * h * kv + 3 * h * f
    matmul = c["num_hidden_layers"] * per_layer + h * v
    return matmul + v * h + (2 * c["num_hidden_layers"] + 1) * h, matmul


def model_flops_per_token(c, seq_len):
    """Training FLOPs per token (forward + backward = 3 x forward; model FLOPs, nothing recomputed):
    the matrix products of every layer and the LM head (2 FLOPs per weight), attention's scores and
    weighted sum 2 x 2 x seq x (heads x head_dim) per layer (all positions: neither the causal nor
    the document mask is discounted). The embedding lookup, norms and activations are not counted."""
    _, matmul = param_count(c)
    h = c["hidden_size"]
    attention = 4 * seq_len * h * c["num_hidden_layers"]
    return 3 * (2 * matmul + attention)


def rate(times, warmup, tokens_per_step):
    measured = times[warmup:]
    return len(measured) * tokens_per_step / sum(measured)


# ---- main ----

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"),
                    help="directory holding finetune_llama and zeroshard-data")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run, after the warm-up")
    ap.add_argument("--warmup", type=int, default=1, help="steps per run excluded from the rate")
    ap.add_argument("--gemm-seconds", type=float, default=3.0, help="length of the GEMM peak measurement")
    ap.add_argument("--work", default=None, help="scratch directory (default: a new one under /tmp)")
    shape = ap.add_argument_group("the model and the batch (defaults: the ~100M model)")
    shape.add_argument("--hidden", type=int, default=768)
    shape.add_argument("--intermediate", type=int, default=2048)
    shape.add_argument("--layers", type=int, default=12)
    shape.add_argument("--heads", type=int, default=12)
    shape.add_argument("--kv-heads", type=int, default=4)
    shape.add_argument("--vocab", type=int, default=32000)
    shape.add_argument("--seq-len", type=int, default=256)
    shape.add_argument("--global-batch", type=int, default=4, help="samples per step over all ranks")
    shape.add_argument("--lr", type=float, default=3e-4)
    shape.add_argument("--weight-decay", type=float, default=0.1)
    a = ap.parse_args()
    if a.ranks < 1 or a.global_batch % a.ranks:
        ap.error(f"--ranks {a.ranks}: must divide --global-batch {a.global_batch}")
    if a.rounds < 1 or a.steps < 1 or a.warmup < 0:
        ap.error("--rounds and --steps must be >= 1, --warmup >= 0")
    if a.heads < 1 or a.kv_heads < 1 or a.hidden % a.heads or a.heads % a.kv_heads or (a.hidden // a.heads) % 2:
        ap.error(f"--hidden {a.hidden}, --heads {a.heads}, --kv-heads {a.kv_heads}: the heads must divide the hidden "
                 "size into an even head dimension, and the key/value heads the heads")
    return a


def main():
    a = parse_args()
    for tool in ("finetune_llama", "zeroshard-data"):
        if not os.access(os.path.join(a.bin, tool), os.X_OK):
            fail(f"{os.path.join(a.bin, tool)} is not an executable: build it (ninja -C build {tool}) or pass --bin")
    if not os.access("/usr/bin/time", os.X_OK):
        fail("/usr/bin/time (GNU time, Debian package 'time') is needed for zeroshard's peak RSS per rank")
    a.work = a.work or os.path.join("/tmp", f"bench_llama_vs_pytorch.{os.getpid()}")
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    cores = os.cpu_count() or 1
    a.threads = max(1, cores // a.ranks)
    # Each rank's share of the cores, on both sides (the peer's ranks read these when they load torch).
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    env = dict(os.environ)
    total_steps = a.warmup + a.steps
    tokens_per_step = a.global_batch * a.seq_len

    model, check_model, check_state, corpus, cfg, n_docs = write_fixture(a, a.work)
    params, matmul_params = param_count(cfg)
    tokens, mask, offsets = read_shards(a.bin, a.work, model, corpus)
    samples = pack(tokens, mask, offsets, a.seq_len, max(total_steps, 2) * a.global_batch)  # the check takes 2
    torch.save(samples, os.path.join(a.work, "samples.pt"))
    shape = {k: cfg[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                 "num_key_value_heads", "vocab_size", "rope_theta", "tie_word_embeddings")}
    print(f"bench_llama_vs_pytorch: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {cores} cores, {a.ranks} ranks x "
          f"{a.threads} intra-op thread(s), torch {torch.__version__}; Llama {shape}, {params / 1e6:.1f}M parameters "
          f"({matmul_params / 1e6:.1f}M in matrix products), fp32; global batch {a.global_batch} x {a.seq_len} tokens "
          f"({n_docs} fortunes, {len(tokens)} tokens, packed); AdamW lr {a.lr} weight decay {a.weight_decay}; "
          f"{a.rounds} round(s) of {a.warmup} warm-up + {a.steps} measured steps per run", flush=True)

    # 1. Same weights, same samples, same math.
    check = same_math(a, check_model, corpus, check_state, cfg, samples, env)
    del check_state

    # 2. Interleaved rounds.
    res = {"zeroshard": [], "pytorch": [], "zeroshard_rss_kib": [], "pytorch_rss_kib": [], "loss_difference": []}
    expected_ids = [list(range(s * a.global_batch, (s + 1) * a.global_batch)) for s in range(total_steps)]
    for rnd in range(a.rounds):
        order = ["zeroshard", "pytorch"] if rnd % 2 == 0 else ["pytorch", "zeroshard"]
        losses = {}
        for name in order:
            if name == "zeroshard":
                steps, rss = run_zeroshard(a, model, corpus, total_steps, os.path.join(a.work, f"zs_{rnd}.rss"), env)
                if [ids for _, ids, _ in steps] != expected_ids:
                    fail(f"finetune_llama trained on samples {[ids for _, ids, _ in steps]}, the peer on {expected_ids}")
                times, losses[name] = [sec for _, _, sec in steps], [loss for loss, _, _ in steps]
            else:
                times, losses[name], rss = run_peer(a, cfg, os.path.join(a.work, "peer"))
            tps = rate(times, a.warmup, tokens_per_step)
            res[name].append(tps)
            res[name + "_rss_kib"].append(max(rss))
            print(f"round {rnd + 1}/{a.rounds} {name:9s} {tps:9.1f} tokens/s ({statistics.median(times[a.warmup:]):.3f} "
                  f"s per step), peak RSS per rank {' '.join(f'{k / 1024:.0f}' for k in rss)} MiB", flush=True)
        diff = max(abs(z - p) / abs(p) for z, p in zip(losses["zeroshard"], losses["pytorch"]))
        res["loss_difference"].append(diff)
        print(f"round {rnd + 1}/{a.rounds}: the step losses of the two systems differ by at most {diff:.2e} relative",
              flush=True)

    # 3. The physical limit: the fp32 GEMM peak of this rank layout, after the runs.
    flops_per_token = model_flops_per_token(cfg, a.seq_len)
    peak = gemm_peak("fp32", a.ranks, a.threads, a.gemm_seconds)
    print(f"GEMM peak fp32: {peak / 1e9:.1f} GFLOP/s ({a.ranks} processes x {a.threads} thread(s), [1024 x 1024] "
          f"products at once); model FLOPs per token {flops_per_token:,}", flush=True)

    # 4. The table.
    zs, pt = statistics.median(res["zeroshard"]), statistics.median(res["pytorch"])
    ratios = [z / p for z, p in zip(res["zeroshard"], res["pytorch"])]
    zs_rss, pt_rss = max(res["zeroshard_rss_kib"]) / 1024, max(res["pytorch_rss_kib"]) / 1024
    row = {"zeroshard_tokens_per_s": zs, "zeroshard_rounds": res["zeroshard"], "pytorch_tokens_per_s": pt,
           "pytorch_rounds": res["pytorch"], "ratio": zs / pt, "ratio_min": min(ratios), "ratio_max": max(ratios),
           "zeroshard_peak_rss_mib": zs_rss, "pytorch_peak_rss_mib": pt_rss, "rss_ratio": zs_rss / pt_rss,
           "zeroshard_mfu": zs * flops_per_token / peak, "pytorch_mfu": pt * flops_per_token / peak,
           "step_loss_max_relative_difference": res["loss_difference"]}
    print("\nhow: zeroshard = finetune_llama (all weights, FULL_SHARD) under mpirun, tokens/s from rank 0's step times "
          "after warm-up, peak RSS per rank from GNU time (%M); PyTorch = the same Llama under DDP/gloo in "
          "torch.multiprocessing ranks, tokens/s from rank 0's wall time of forward+backward+AdamW after warm-up, "
          "peak RSS per rank from getrusage ru_maxrss; runs alternate in rounds, order flipped each round")
    print("median tokens/s over rounds; ratio = zeroshard / PyTorch of the medians [min..max of per-round ratios]; "
          "peak RSS = the largest rank's, max over rounds; MFU = tokens/s x model FLOPs per token / the fp32 GEMM peak")
    print(f"{'variant':8s} {'zeroshard':>10s} {'PyTorch':>10s} {'ratio':>6s} {'spread':>13s} {'zs RSS':>8s} "
          f"{'PT RSS':>8s} {'RSS ratio':>9s} {'zs MFU':>7s} {'PT MFU':>7s}")
    print(f"{'fp32':8s} {zs:10.1f} {pt:10.1f} {zs / pt:6.2f} {min(ratios):6.2f}..{max(ratios):5.2f} {zs_rss:6.0f}Mi "
          f"{pt_rss:6.0f}Mi {zs_rss / pt_rss:9.2f} {row['zeroshard_mfu']:7.3f} {row['pytorch_mfu']:7.3f}")
    summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": cores, "ranks": a.ranks,
               "threads_per_rank": a.threads, "torch": torch.__version__, "model": shape, "parameters": params,
               "matmul_parameters": matmul_params, "seq_len": a.seq_len, "global_batch": a.global_batch,
               "lr": a.lr, "weight_decay": a.weight_decay, "rounds": a.rounds, "warmup_steps": a.warmup,
               "measured_steps": a.steps, "model_flops_per_token": flops_per_token, "gemm_peak_flops": {"fp32": peak},
               "same_math": check, "rows": {"fp32": row}}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
