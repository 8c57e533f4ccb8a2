# SPDX-License-Identifier: Apache-2.0
"""The built-in GPT (models/src/gpt.cpp) written in PyTorch, with what the Python-side tests need around it.

One Python copy of the model for the round-trip tests (weights from Python into train_gpt and back),
the speed peer and the TorchScript tests. It mirrors models/src/gpt.cpp exactly: the same
module names (wte, wpe, h0..h{n-1} with ln1, qkv, proj, ln2, fc, out; ln_f; lm_head_weight tied to
wte.weight), LayerNorm eps 1e-5, exact GELU, a causal mask, softmax in fp32, a bias-free qkv.

Also here: the byte corpus split of zeroshard::load_text_corpus, the validation loss train_gpt
reports (the mean over windows of each window's mean token loss), and safetensors written and read
with struct + json only (no safetensors library), as an independent check of zeroshard's own.
Run with Debian's /usr/bin/python3 (python3-torch 1.13).
"""

import json
import math
import os
import struct

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint


class Block(nn.Module):
    def __init__(self, d_model, n_head, mlp_ratio, dropout):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, mlp_ratio * d_model)
        self.out = nn.Linear(mlp_ratio * d_model, d_model)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.n_head
        q, k, v = self.qkv(self.ln1(x)).chunk(3, -1)
        q = q.view(b, t, self.n_head, hd).transpose(1, 2)
        k = k.view(b, t, self.n_head, hd).transpose(1, 2)
        v = v.view(b, t, self.n_head, hd).transpose(1, 2)
        att = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        future = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        att = att.masked_fill(future, float("-inf"))
        att = self.attn_drop(torch.softmax(att, -1, dtype=torch.float32).to(q.dtype))
        y = att.matmul(v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.resid_drop(self.proj(y))
        return x + self.resid_drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class Gpt(nn.Module):
    def __init__(self, vocab_size=256, d_model=128, n_head=4, n_layer=4, seq_len=128, mlp_ratio=4, dropout=0.0):
        super().__init__()
        self.seq_len = seq_len
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.n_layer = n_layer
        for i in range(n_layer):
            self.add_module(f"h{i}", Block(d_model, n_head, mlp_ratio, dropout))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head_weight = self.wte.weight  # the output layer: the same tensor
        # True: each block's activations are recomputed in backward (torch.utils.checkpoint), as
        # train_gpt's activation_checkpointing every_n_blocks: 1 does; used by the speed peer.
        self.checkpoint_blocks = False
        self.reset_parameters()

    def blocks(self):
        return [getattr(self, f"h{i}") for i in range(self.n_layer)]

    def reset_parameters(self):
        with torch.no_grad():
            nn.init.normal_(self.wte.weight, 0.0, 0.02)
            nn.init.normal_(self.wpe.weight, 0.0, 0.02)
            residual_std = 0.02 / math.sqrt(2.0 * self.n_layer)
            for b in self.blocks():
                for lin, std in ((b.qkv, 0.02), (b.fc, 0.02), (b.proj, residual_std), (b.out, residual_std)):
                    nn.init.normal_(lin.weight, 0.0, std)
                    if lin.bias is not None:
                        nn.init.zeros_(lin.bias)

    def forward(self, idx):
        t = idx.shape[1]
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for b in self.blocks():
            if self.checkpoint_blocks and self.training and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(b, x)
            else:
                x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def model_from_config(cfg):
    """cfg: dict of model.* keys (n_layer, n_head, d_model, seq_len, vocab_size, mlp_ratio, dropout)."""
    return Gpt(vocab_size=cfg.get("vocab_size", 256), d_model=cfg["d_model"], n_head=cfg["n_head"],
               n_layer=cfg["n_layer"], seq_len=cfg["seq_len"], mlp_ratio=cfg.get("mlp_ratio", 4),
               dropout=cfg.get("dropout", 0.0))


# ---- data: what zeroshard::load_text_corpus and TokenWindowDataset do ----

def corpus_files(path):
    if os.path.isfile(path):
        return [path]
    names = sorted(n for n in os.listdir(path)
                   if not n.endswith(".dat") and os.path.isfile(os.path.join(path, n))
                   and not os.path.islink(os.path.join(path, n)))
    return [os.path.join(path, n) for n in names]


def split_corpus(path, val_fraction):
    """(train bytes, validation bytes): from each file the last val_fraction, extended back to the
    start of its first line, goes to validation (train/src/text.cpp)."""
    train, val = bytearray(), bytearray()
    for f in corpus_files(path):
        data = open(f, "rb").read()
        n = len(data)
        cut = n - int(n * val_fraction)
        line_start = cut
        while 0 < line_start < n and data[line_start - 1] != ord("\n"):
            line_start -= 1
        if line_start > 0:
            cut = line_start
        train += data[:cut]
        val += data[cut:]
    return bytes(train), bytes(val)


def validation_loss(model, val_bytes, seq_len, windows, batch=64):
    """The mean over the first `windows` windows of each window's mean next-token loss."""
    tokens = torch.tensor(list(val_bytes), dtype=torch.long)
    available = (len(tokens) - 1) // seq_len
    n = min(windows, available) if windows > 0 else available
    total = 0.0
    model.eval()
    with torch.no_grad():
        for start in range(0, n, batch):
            idx = torch.arange(start, min(n, start + batch))
            data = torch.stack([tokens[i * seq_len:i * seq_len + seq_len] for i in idx.tolist()])
            target = torch.stack([tokens[i * seq_len + 1:i * seq_len + seq_len + 1] for i in idx.tolist()])
            logits = model(data).float()
            per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none")
            total += per_token.view(len(idx), -1).mean(1).double().sum().item()
    return total / n


# ---- safetensors by hand ----

ST_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64",
             torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}
ST_TORCH = {v: k for k, v in ST_DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor)."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors:
        flat = t.detach().contiguous().reshape(-1)
        b = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """(dict name -> tensor, metadata dict)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    metadata = header.pop("__metadata__", {})
    out = {}
    for name, h in header.items():
        begin, end = h["data_offsets"]
        raw = bytearray(data[base + begin:base + end])
        dtype = ST_TORCH[h["dtype"]]
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(h["shape"]).clone()
    return out, metadata
