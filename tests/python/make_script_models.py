#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""TorchScript models written in Python for the TorchScript tests (tests/sharding/test_torchscript.cpp).

  make_script_models.py OUT_DIR
  make_script_models.py --gpt FILE [--vocab V] [--dim D] [--heads H] [--layers L] [--seq S]

The second form writes one scripted GPT of the given shape to FILE (for bench_torchscript, which
trains it against the C++ GPT of tests/sharding/models.h; its defaults are the bench's).

Writes into OUT_DIR, with torch.jit.script (or torch.jit.trace where said) and .save:
  mlp.pt           an MLP: inp, layers (ModuleList of 3 residual blocks: ln, fc, out), head; 7 -> 5
  mlp_traced.pt    the same MLP (same weights) through torch.jit.trace
  wide.pt          a wider MLP, 64 -> 12 blocks of 128 -> 8 (about 3 MiB of parameters)
  gpt.pt           the GPT of zs_gpt.py, its blocks in a ModuleList h (h.0, h.1), the output layer
                   tied to the token embedding (lm_head_weight is wte.weight)
  gpt_text.pt      the same GPT with 256 tokens, width 64, sequences of 64 (examples/configs/gpt_tiny's
                   shape), for train_torchscript --task text
  tuple_unit.pt    a unit whose forward returns a tuple of two Tensors, both used by the parent
  other_method.pt  the parent calls a unit's method `scaled` besides its forward (refused)
  twice.pt         the parent calls the same unit twice in its forward (refused at run time)
  dict_unit.pt     a unit whose forward returns a Dict[str, Tensor] (refused)
  two_inputs.pt    a unit whose forward takes two Tensors (fine; refused when checkpointed)
Weights come from torch.manual_seed(0); the C++ test trains the file's own values.
Run with Debian's /usr/bin/python3 (python3-torch 1.13).
"""

import os
import sys
from typing import Dict, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zs_gpt  # noqa: E402


class MlpBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 2 * d)
        self.out = nn.Linear(2 * d, d)

    def forward(self, x):
        return x + self.out(F.gelu(self.fc(self.ln(x))))

    def scaled(self, x):
        return 2.0 * self.forward(x)


class Mlp(nn.Module):
    def __init__(self, d_in=7, d=16, d_out=5, n=3):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.layers = nn.ModuleList([MlpBlock(d) for _ in range(n)])
        self.head = nn.Linear(d, d_out)

    def forward(self, x):
        x = self.inp(x)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class ScriptGpt(nn.Module):
    """zs_gpt.Gpt with its blocks in a ModuleList (TorchScript cannot script getattr by name)."""

    def __init__(self, vocab_size=64, d_model=32, n_head=4, n_layer=2, seq_len=16, mlp_ratio=4, dropout=0.0):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList([zs_gpt.Block(d_model, n_head, mlp_ratio, dropout) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head_weight = self.wte.weight
        with torch.no_grad():
            nn.init.normal_(self.wte.weight, 0.0, 0.02)
            nn.init.normal_(self.wpe.weight, 0.0, 0.02)

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.lm_head_weight)


class PairBlock(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.a = nn.Linear(d, d)
        self.b = nn.Linear(d, d)

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self.a(x)), self.b(x)


class TupleUnit(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(7, 8)
        self.pair = PairBlock(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        u, v = self.pair(self.inp(x))
        return self.head(u * v)


class OtherMethod(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = MlpBlock(7)
        self.head = nn.Linear(7, 5)

    def forward(self, x):
        return self.head(self.block.scaled(x))


class Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = MlpBlock(7)
        self.head = nn.Linear(7, 5)

    def forward(self, x):
        return self.head(self.block(self.block(x)))


class DictBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(7, 5)

    def forward(self, x) -> Dict[str, torch.Tensor]:
        return {"y": self.fc(x)}


class DictUnit(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = DictBlock()

    def forward(self, x):
        return self.block(x)["y"]


class TwoInputBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(7, 7)

    def forward(self, x, skip):
        return self.fc(x) + skip


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(7, 7)
        self.block = TwoInputBlock()
        self.head = nn.Linear(7, 5)

    def forward(self, x):
        h = self.inp(x)
        return self.head(self.block(h, x))


def write_gpt(argv):
    import argparse
    ap = argparse.ArgumentParser(prog="make_script_models.py --gpt")
    ap.add_argument("--gpt", required=True, metavar="FILE")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    a = ap.parse_args(argv)
    torch.manual_seed(0)
    model = ScriptGpt(vocab_size=a.vocab, d_model=a.dim, n_head=a.heads, n_layer=a.layers, seq_len=a.seq)
    torch.jit.script(model).save(a.gpt)


def main():
    if len(sys.argv) > 1 and sys.argv[1].startswith("--gpt"):
        write_gpt(sys.argv[1:])
        return
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    mlp = Mlp()
    torch.jit.script(mlp).save(os.path.join(out, "mlp.pt"))
    torch.jit.trace(mlp, torch.randn(4, 7)).save(os.path.join(out, "mlp_traced.pt"))
    torch.jit.script(Mlp(d_in=64, d=128, d_out=8, n=12)).save(os.path.join(out, "wide.pt"))
    torch.jit.script(ScriptGpt()).save(os.path.join(out, "gpt.pt"))
    torch.jit.script(ScriptGpt(vocab_size=256, d_model=64, n_head=4, n_layer=2, seq_len=64)).save(
        os.path.join(out, "gpt_text.pt"))
    for name, model in (("tuple_unit", TupleUnit()), ("other_method", OtherMethod()), ("twice", Twice()),
                        ("dict_unit", DictUnit()), ("two_inputs", TwoInputs())):
        torch.jit.script(model).save(os.path.join(out, name + ".pt"))


if __name__ == "__main__":
    main()
