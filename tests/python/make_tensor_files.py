#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the torch archives test_tensor_file reads, each with a reference of the same values.

Usage: make_tensor_files.py OUT_DIR

  state_dict.pt        torch.save of a state dict (OrderedDict with _metadata, as Module.state_dict()
                       returns): every dtype, 0-dim, empty, a transposed view, a slice with a storage
                       offset, a strided slice, two names for one tensor, a 300x257 tensor
  checkpoint.pt        torch.save of a training checkpoint: nested dicts, lists, tuples, a Parameter,
                       integer keys, non-tensor values, more than 256 memo entries
  module_script.pt     torch.jit.save(torch.jit.script(...)) of nested submodules (a ModuleList too),
                       parameters, a buffer, and a weight tied between two submodules
  module_traced.pt     torch.jit.save(torch.jit.trace(...)): a tensor constant (CONSTANTS.c0)
  state_dict_deflated.pt  state_dict.pt re-zipped with compression (a reader must refuse it)

Each X.pt has X.ref.safetensors: the tensors under the names the reader must give, contiguous, in
safetensors format written here with struct and json only (no safetensors library), its
"__metadata__" holding "zeroshard.format" and "zeroshard.aliases" (name=target;...) as expected.
"""

import collections
import json
import os
import struct
import sys
import warnings
import zipfile

try:
    import torch
    import torch.nn as nn
except ImportError as e:
    sys.exit(f"make_tensor_files.py: {sys.executable} cannot import torch ({e}); install Debian's python3-torch "
             "(apt-get install python3-torch), which test_tensor_file needs to make its torch archives")

ST_DTYPES = {
    torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.float64: "F64", torch.int64: "I64",
    torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL",
}


def raw_bytes(t):
    flat = t.detach().contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def write_reference(path, tensors, fmt, aliases):
    """tensors: list of (name, tensor); the safetensors layout by hand."""
    header, blobs, offset = {}, [], 0
    header["__metadata__"] = {
        "zeroshard.format": fmt,
        "zeroshard.aliases": ";".join(f"{k}={v}" for k, v in sorted(aliases.items())),
    }
    for name, t in tensors:
        b = raw_bytes(t)
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def floats(gen, shape, dtype):
    t = torch.randn(shape, generator=gen, dtype=torch.float64) * 3
    flat = t.view(-1)
    specials = [float("nan"), float("inf"), float("-inf"), -0.0]
    for i, v in enumerate(specials[: flat.numel()]):
        flat[i * 7 % flat.numel()] = v
    return t.to(dtype)


def state_dict(gen):
    base = floats(gen, (6, 5), torch.float32)
    long_storage = torch.arange(40, dtype=torch.float32) * 0.5
    big = floats(gen, (300, 257), torch.float32)
    sd = collections.OrderedDict()
    sd["fp32"] = base
    sd["bf16"] = floats(gen, (4, 33), torch.bfloat16)
    sd["fp16"] = floats(gen, (7, 3), torch.float16)
    sd["fp64"] = floats(gen, (5,), torch.float64)
    sd["int64"] = torch.randint(-2**62, 2**62, (3, 4), generator=gen, dtype=torch.int64)
    sd["int32"] = torch.randint(-2**31, 2**31 - 1, (9,), generator=gen, dtype=torch.int32)
    sd["int16"] = torch.randint(-2**15, 2**15 - 1, (2, 3), generator=gen, dtype=torch.int16)
    sd["int8"] = torch.randint(-128, 127, (5,), generator=gen, dtype=torch.int8)
    sd["uint8"] = torch.randint(0, 255, (2, 2, 3), generator=gen, dtype=torch.uint8)
    sd["bool"] = torch.rand((11,), generator=gen) > 0.5
    sd["scalar"] = torch.tensor(2.75)
    sd["empty"] = torch.empty(0, 4)
    sd["transposed"] = base.t()                      # shares fp32's storage, strides (1, 5)
    sd["slice"] = long_storage[7:19]                 # storage offset 7
    sd["strided"] = long_storage.view(8, 5)[1:7:2, ::2]  # offset 5, strides (10, 2)
    sd["tied"] = base                                # the same tensor as fp32
    sd["block.0.weight"] = big
    sd._metadata = collections.OrderedDict([("", {"version": 1}), ("block", {"version": 1})])
    aliases = {"tied": "fp32"}
    return sd, list(sd.items()), aliases


def checkpoint(gen):
    """A training checkpoint: nested dicts, lists, tuples, an nn.Parameter, non-tensor values (ints of
    1, 2, 4 and 8 bytes, floats, strings, None), integer keys, and enough values for 4-byte memo keys."""
    model = collections.OrderedDict((f"layers.{i}.weight", floats(gen, (3, 2), torch.float32)) for i in range(80))
    exp_avg = floats(gen, (3, 2), torch.float32)
    ckpt = {
        "model": model,
        "step": 12345678, "vocab": 50257, "lr": 0.1, "big": 2**40, "neg": -5, "name": "run-7", "flags": [True, None, False],
        "list": [floats(gen, (2, 3), torch.float64), torch.arange(5)],
        "tuple": (torch.ones(2, dtype=torch.float16),),
        "opt": {"state": {0: {"exp_avg": exp_avg, "step": torch.tensor(3.0)}},
                "param_groups": [{"lr": 0.1, "betas": (0.9, 0.95), "params": [0]}]},
        "param": nn.Parameter(floats(gen, (4,), torch.float32)),
    }
    tensors = [(f"model.{k}", v) for k, v in model.items()] + [
        ("list.0", ckpt["list"][0]), ("list.1", ckpt["list"][1]), ("tuple.0", ckpt["tuple"][0]),
        ("opt.state.0.exp_avg", exp_avg), ("opt.state.0.step", ckpt["opt"]["state"][0]["step"]),
        ("param", ckpt["param"])]
    return ckpt, tensors


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.attn = nn.Linear(dim, 3 * dim)
        self.norm = nn.LayerNorm(dim)
        self.register_buffer("mask", torch.tril(torch.ones(dim, dim)).to(torch.bool))

    def forward(self, x):
        return self.attn(self.norm(x))[:, : x.shape[1]]


class Tiny(nn.Module):
    def __init__(self, vocab=11, dim=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.h = nn.ModuleList([Block(dim), Block(dim)])
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.wte.weight           # tied, as GPTs do
        self.register_buffer("steps", torch.tensor([3, 1, 4], dtype=torch.int64))
        self.scale = nn.Parameter(torch.full((dim,), 0.5, dtype=torch.float64))

    def forward(self, idx):
        x = self.wte(idx)
        for b in self.h:
            x = b(x)
        return self.head(x * self.scale.float())


def module_script(gen):
    torch.manual_seed(1)
    m = Tiny()
    with torch.no_grad():
        m.h[1].attn.weight.copy_(floats(gen, m.h[1].attn.weight.shape, torch.float32))
    # Every name a tensor is reachable under (named_parameters() drops the tied head.weight).
    tensors = [(f"{prefix}{'.' if prefix else ''}{name}", t) for prefix, mod in m.named_modules()
               for name, t in list(mod._parameters.items()) + list(mod._buffers.items()) if t is not None]
    return torch.jit.script(m), tensors, {"head.weight": "wte.weight"}


class WithConstant(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)

    def forward(self, x):
        return self.lin(x) + torch.tensor([1.5, -2.25])


def module_traced():
    torch.manual_seed(2)
    m = WithConstant()
    with warnings.catch_warnings():  # "torch.tensor results are registered as constants": wanted here
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(m, torch.ones(1, 2))
    tensors = list(m.named_parameters()) + [("CONSTANTS.c0", torch.tensor([1.5, -2.25]))]
    return traced, tensors


def deflated_copy(src, dst):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info.filename))


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_tensor_files.py OUT_DIR")
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    gen = torch.Generator().manual_seed(1234)
    with torch.no_grad():
        sd, sd_tensors, sd_aliases = state_dict(gen)
        torch.save(sd, os.path.join(out, "state_dict.pt"))
        write_reference(os.path.join(out, "state_dict.ref.safetensors"), sd_tensors, "torch", sd_aliases)
        deflated_copy(os.path.join(out, "state_dict.pt"), os.path.join(out, "state_dict_deflated.pt"))

        ckpt, ck_tensors = checkpoint(gen)
        torch.save(ckpt, os.path.join(out, "checkpoint.pt"))
        write_reference(os.path.join(out, "checkpoint.ref.safetensors"), ck_tensors, "torch", {})

        scripted, ms_tensors, ms_aliases = module_script(gen)
        torch.jit.save(scripted, os.path.join(out, "module_script.pt"))
        write_reference(os.path.join(out, "module_script.ref.safetensors"), ms_tensors, "torchscript", ms_aliases)

        traced, tr_tensors = module_traced()
        torch.jit.save(traced, os.path.join(out, "module_traced.pt"))
        write_reference(os.path.join(out, "module_traced.ref.safetensors"), tr_tensors, "torchscript", {})
    print(f"make_tensor_files.py: wrote torch archives and references to {out} (torch {torch.__version__})")


if __name__ == "__main__":
    main()
