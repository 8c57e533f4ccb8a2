#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Weights from real PyTorch into zeroshard and back (a CTest job test; Debian's python3-torch).

  round_trip.py --bin BUILD/bin --mpirun MPIRUN --work DIR [--ranks N] [--format torch|safetensors]

1. Python builds and initialises the built-in GPT of zeroshard/models/gpt.h (tests/python/zs_gpt.py) and saves its
   state dict: with torch.save (--format torch) or as safetensors written by hand (--format
   safetensors); it computes the validation loss of those weights on the held-out windows.
2. train_gpt at N ranks starts from that file (model.init_from), fp32: its first evaluation must
   equal Python's loss within 1e-4 relative. It fine-tunes, checkpoints, and reports the final
   validation loss (read from its --metrics-out file, full precision).
3. zeroshard-ckpt exports the checkpoint as safetensors (fp32) and consolidates it as a LibTorch
   archive. Python loads both (safetensors by hand; the archive with torch.jit.load and
   named_parameters()/named_buffers()) into its GPT and reproduces the final validation loss
   within 1%.
4. train_gpt starts again from the consolidated archive (model.init_from): its first evaluation
   equals the final loss within 1e-4 relative.
Exits non-zero with the reason on the first mismatch.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
except ImportError as e:
    sys.exit(f"round_trip.py: {sys.executable} cannot import torch ({e}); install Debian's python3-torch "
             "(apt-get install python3-torch): scripts/test.sh does")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import zs_gpt  # noqa: E402

MODEL = {"n_layer": 2, "n_head": 4, "d_model": 64, "seq_len": 32, "vocab_size": 256, "mlp_ratio": 4, "dropout": 0.0}
CORPUS = "/usr/share/games/fortunes/computers"
VAL_FRACTION = 0.05
EVAL_WINDOWS = 64
STEPS = 30


def fail(msg):
    print(f"ROUND TRIP FAILED: {msg}", flush=True)
    sys.exit(1)


def run(cmd):
    print("+ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(p.stdout, flush=True)
    if p.returncode != 0:
        fail(f"{cmd[0]} exited with status {p.returncode}")
    return p.stdout


def save_initial(model, path, fmt):
    state = model.state_dict()
    if fmt == "torch":
        torch.save(state, path)
    else:  # tied weights once, as Hugging Face files do: lm_head_weight is wte.weight
        zs_gpt.write_safetensors(path, [(k, v) for k, v in state.items() if k != "lm_head_weight"])


def eval_values(metrics_path):
    """The val_loss evaluation lines of a metrics file, in order: [(step, value)]."""
    out = []
    for line in open(metrics_path):
        rec = json.loads(line)
        if rec.get("eval") == "val_loss":
            out.append((rec["step"], rec["value"]))
    if not out:
        fail(f"{metrics_path} has no val_loss evaluation line")
    return out


def load_into(model, tensors, where):
    # One tensor under two names: a file may hold either (torch.jit's named_parameters() lists a
    # shared tensor once, under the name it meets first).
    for a, b in (("wte.weight", "lm_head_weight"), ("lm_head_weight", "wte.weight")):
        if a not in tensors and b in tensors:
            tensors[a] = tensors[b]
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    missing = [m for m in missing if m != "lm_head_weight"]  # tied to wte.weight, loaded with it
    if missing or unexpected:
        fail(f"{where}: missing {missing}, unexpected {unexpected}")


def close(a, b, rel):
    return abs(a - b) <= rel * abs(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--format", choices=["torch", "safetensors"], default="torch")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.manual_seed(1234)

    # 1. Python's model, its file and its validation loss.
    model = zs_gpt.model_from_config(MODEL)
    initial = os.path.join(a.work, "initial." + ("pt" if a.format == "torch" else "safetensors"))
    save_initial(model, initial, a.format)
    _, val = zs_gpt.split_corpus(CORPUS, VAL_FRACTION)
    python_initial = zs_gpt.validation_loss(model, val, MODEL["seq_len"], EVAL_WINDOWS)
    print(f"python: validation loss of the initial weights {python_initial:.8f}", flush=True)

    # 2. train_gpt from those weights.
    metrics = os.path.join(a.work, "metrics.jsonl")
    ckpt = os.path.join(a.work, "ckpt")
    sets = [f"model.{k}={v}" for k, v in MODEL.items()] + [
        f"model.init_from={initial}", f"data.path={CORPUS}", f"data.val_fraction={VAL_FRACTION}",
        f"data.limit_eval_samples={EVAL_WINDOWS}", f"train.steps={STEPS}", "train.batch_size=16",
        "optimizer.lr=0.003", "precision.param_dtype=FP32", "sample.tokens=0", "logging.progress=LINES",
        f"checkpoint.dir={ckpt}"]
    cmd = [a.mpirun, "-n", str(a.ranks), "--oversubscribe", os.path.join(a.bin, "train_gpt"), "--metrics-out", metrics]
    for s in sets:
        cmd += ["--set", s]
    out = run(cmd)
    if "loaded pretrained weights from" not in out and "pretrained" not in out:
        print("(train_gpt logs the load at info level)", flush=True)
    evals = eval_values(metrics)
    zs_initial, zs_final = evals[0][1], evals[-1][1]
    print(f"train_gpt: validation loss {zs_initial:.8f} -> {zs_final:.8f}", flush=True)
    if not close(zs_initial, python_initial, 1e-4):
        fail(f"train_gpt's first validation loss {zs_initial:.8f} differs from Python's {python_initial:.8f} "
             f"by more than 1e-4 relative: the weights did not arrive as Python saved them")
    if not zs_final < zs_initial:
        fail(f"fine-tuning did not lower the validation loss ({zs_initial} -> {zs_final})")

    # 3. Out again: safetensors and the consolidated archive, read by Python.
    st_path = os.path.join(a.work, "final.safetensors")
    pt_path = os.path.join(a.work, "final.pt")
    ckpt_tool = os.path.join(a.bin, "zeroshard-ckpt")
    run([ckpt_tool, "export", ckpt, st_path, "--format", "safetensors", "--dtype", "float32"])
    run([ckpt_tool, "consolidate", ckpt, pt_path])

    tensors, meta = zs_gpt.read_safetensors(st_path)
    aliases = dict(kv.split("=") for kv in meta.get("zeroshard.aliases", "").split(";") if kv)
    if aliases.get("lm_head_weight") != "wte.weight" and aliases.get("wte.weight") != "lm_head_weight":
        fail(f"{st_path}: the tied weights are not noted in the metadata (zeroshard.aliases = {aliases})")
    from_st = zs_gpt.model_from_config(MODEL)
    load_into(from_st, tensors, st_path)
    st_loss = zs_gpt.validation_loss(from_st, val, MODEL["seq_len"], EVAL_WINDOWS)

    archive = torch.jit.load(pt_path)
    state = {k: v for k, v in archive.named_parameters()}
    state.update({k: v for k, v in archive.named_buffers()})
    from_pt = zs_gpt.model_from_config(MODEL)
    load_into(from_pt, state, pt_path)
    pt_loss = zs_gpt.validation_loss(from_pt, val, MODEL["seq_len"], EVAL_WINDOWS)
    print(f"python: validation loss of the exported weights: safetensors {st_loss:.8f}, "
          f"consolidated archive {pt_loss:.8f}", flush=True)
    for what, loss in (("safetensors", st_loss), ("consolidated archive", pt_loss)):
        if not close(loss, zs_final, 1e-2):
            fail(f"the {what} export gives validation loss {loss:.8f} in Python, train_gpt reported {zs_final:.8f}")

    # 4. zeroshard's own consolidated archive as pretrained weights: the next run starts where this
    # one ended (its first evaluation, before any step, is the final loss above).
    again = os.path.join(a.work, "again.jsonl")
    cmd = [a.mpirun, "-n", str(a.ranks), "--oversubscribe", os.path.join(a.bin, "train_gpt"), "--metrics-out", again]
    for s in [x for x in sets if not x.startswith(("model.init_from=", "train.steps=", "checkpoint.dir="))] + [
            f"model.init_from={pt_path}", "train.steps=1"]:
        cmd += ["--set", s]
    run(cmd)
    restart = eval_values(again)[0][1]
    if not close(restart, zs_final, 1e-4):
        fail(f"train_gpt started from its own consolidated archive evaluates {restart:.8f}, it ended at {zs_final:.8f}")
    print(f"ROUND TRIP PASSED ({a.format} in, safetensors and LibTorch archive out, {a.ranks} ranks): "
          f"initial {python_initial:.6f} (python) = {zs_initial:.6f} (train_gpt); final {zs_final:.6f} (train_gpt) = "
          f"{st_loss:.6f} (safetensors) = {pt_loss:.6f} (archive) = {restart:.6f} (train_gpt from the archive)",
          flush=True)


if __name__ == "__main__":
    main()
