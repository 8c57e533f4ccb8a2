#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The command lines of the Llama export path, end to end, against the references the fixtures
llama_export and llama_export_refs wrote (test_llama_export.cpp):

  mpirun -n 2 zeroshard-ckpt export CKPT DIR --format hf --merge-lora --dtype fp32 --max-shard-size 100KB
  zeroshard-ckpt export CKPT DIR --format peft
  zeroshard-ckpt export CKPT FILE.gguf --format gguf
      -> byte for byte the files the library wrote in the fixture
  mpirun -n 2 zeroshard-eval CKPT --ids ids.json
      -> llama.cpp's mean NLL on the checkpoint's GGUF within 1e-5 relative, and not the base's
  mpirun -n 2 zeroshard-eval BASE --adapter PEFT_DIR --ids ids.json
      -> PyTorch's mean NLL with the adapter applied as PEFT does, within 1e-4 relative
  mpirun -n 2 zeroshard-eval DIR --ids ids.json   (the directory the command line exported)
      -> PyTorch's mean NLL on it, within 1e-4 relative

  check_llama_export.py --work DIR --bin BUILD/bin --mpirun MPIRUN
Prints CHECK PASSED or CHECK FAILED.
"""
import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys


def last_json_line(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit("CHECK FAILED: no JSON line in:\n" + text)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit("CHECK FAILED: %s exited with %d:\n%s%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


def same_files(a, b):
    names_a, names_b = sorted(os.listdir(a)), sorted(os.listdir(b))
    if names_a != names_b:
        return False, "files %s and %s" % (names_a, names_b)
    for n in names_a:
        if not filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False):
            return False, n + " differs"
    return True, "%d files identical" % len(names_a)


def mean_nll(path):
    with open(path) as f:
        return json.load(f)["nll"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--work", required=True)
    p.add_argument("--bin", required=True)
    p.add_argument("--mpirun", required=True)
    a = p.parse_args()
    w = lambda *parts: os.path.join(a.work, *parts)  # noqa: E731
    ckpt_tool, eval_tool = os.path.join(a.bin, "zeroshard-ckpt"), os.path.join(a.bin, "zeroshard-eval")
    mpi2 = [a.mpirun, "-n", "2", "--oversubscribe"]
    for d in ("cli-hf", "cli-peft"):
        shutil.rmtree(w(d), ignore_errors=True)
    if os.path.exists(w("cli.gguf")):
        os.remove(w("cli.gguf"))
    ok = True
    print(run(mpi2 + [ckpt_tool, "export", w("ckpt"), w("cli-hf"), "--format", "hf", "--merge-lora", "--dtype", "fp32",
                      "--max-shard-size", "100KB"]).strip())
    print(run([ckpt_tool, "export", w("ckpt"), w("cli-peft"), "--format", "peft"]).strip())
    print(run([ckpt_tool, "export", w("ckpt"), w("cli.gguf"), "--format", "gguf"]).strip())
    for mine, theirs in (("cli-hf", "hf"), ("cli-peft", "peft")):
        same, why = same_files(w(mine), w(theirs))
        print("%s against the library's %s: %s" % (mine, theirs, why))
        ok = ok and same
    gguf_same = filecmp.cmp(w("cli.gguf"), w("ft.f32.gguf"), shallow=False)
    print("cli.gguf against the library's ft.f32.gguf: %s" % ("identical" if gguf_same else "DIFFERENT"))
    ok = ok and gguf_same
    ids = ["--ids", w("ids.json")]
    checks = [
        ("checkpoint", [w("ckpt")], w("ft.llama_cpp.json"), 1e-5, "llama.cpp on the checkpoint's GGUF"),
        ("base + PEFT adapter", [w("base"), "--adapter", w("cli-peft")], w("peft.torch.json"), 1e-4,
         "PyTorch with the adapter"),
        ("exported directory", [w("cli-hf")], w("hf.torch.json"), 1e-4, "PyTorch on the directory"),
    ]
    results = {}
    for name, model, ref, tol, who in checks:
        got = last_json_line(run(mpi2 + [eval_tool] + model + ids))
        want = mean_nll(ref)
        rel = abs(got["nll"] - want) / abs(want)
        results[name] = got["nll"]
        print("zeroshard-eval %s at 2 ranks: nll %.8f over %d tokens; %s: %.8f (relative difference %.2e, "
              "allowed %.0e)" % (name, got["nll"], got["tokens"], who, want, rel, tol))
        ok = ok and rel <= tol and got["tokens"] == 63
    base = mean_nll(w("base.llama_cpp.json"))
    change = abs(results["checkpoint"] - base) / base
    print("the base model by llama.cpp: %.8f; the fine-tune moved the NLL by %.2f%%" % (base, 100 * change))
    ok = ok and change > 1e-3
    print("CHECK PASSED" if ok else "CHECK FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
