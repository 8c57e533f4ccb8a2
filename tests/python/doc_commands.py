#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Runs the commands of README.md and docs/*.md that are marked runnable, as written.

  doc_commands.py --source REPO --build BUILD --finetune-fixture DIR --work DIR [FILE.md ...]
  doc_commands.py --list [--source REPO]     (which blocks are runnable, and where)

A fenced block whose info string holds the word `runnable` (```bash runnable) is run by bash
(-e -u -o pipefail) as it stands; the runnable blocks of one file run in order in one folder, so a
later block uses what an earlier one made. The folder holds what the commands name and a new user
would have: `build` (this build), `examples`, `scripts` and `tests` of the source tree, and a
tiny Llama-family model directory `Llama-3.2-1B` in Hugging Face's layout with its tokenizer and
chat template (made from tests/python/finetune_llama_check.py's fixture), `chat.jsonl` (chat
records) and `ids.json` (held-out token ids). Prints CHECK PASSED, or CHECK FAILED naming FILE:LINE
of each block that failed, with its output.
"""
import argparse
import glob
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*(.*)$")


def blocks(path):
    """[(first line number, info, text)] of the fenced blocks marked runnable in `path`."""
    out, open_fence, start, info, body = [], None, 0, "", []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = FENCE.match(line.rstrip("\n"))
            if open_fence is None and m:
                open_fence, start, info, body = m.group(2), n, m.group(3), []
            elif open_fence is not None and m and m.group(2).startswith(open_fence) and not m.group(3):
                if "runnable" in info.split():
                    out.append((start, info, "".join(body)))
                open_fence = None
            elif open_fence is not None:
                body.append(line)
    return out


def load_fixture_module(source):
    path = os.path.join(source, "tests", "python", "finetune_llama_check.py")
    spec = importlib.util.spec_from_file_location("finetune_llama_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare(work, a):
    """The folder a new user would run the commands in (see the module's description)."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for name, target in (("build", a.build), ("examples", os.path.join(a.source, "examples")),
                         ("scripts", os.path.join(a.source, "scripts")), ("tests", os.path.join(a.source, "tests"))):
        os.symlink(os.path.abspath(target), os.path.join(work, name))
    fx = load_fixture_module(a.source)
    model = os.path.join(work, "Llama-3.2-1B")
    shutil.copytree(os.path.join(a.finetune_fixture, "model"), model)
    # The tokenizer without the fixture's reserved token outside the model's vocabulary, and room
    # for the commands' default lengths (--seq-len 512, --context 2048).
    shutil.copy(os.path.join(a.finetune_fixture, "gguf_tokenizer", "tokenizer.json"), model)
    config = json.load(open(os.path.join(model, "config.json")))
    config["max_position_embeddings"] = 4096
    config["_name_or_path"] = "Llama-3.2-1B"
    with open(os.path.join(model, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    # Enough chats for a global batch of 8 samples of 512 tokens.
    fx.write_jsonl(os.path.join(work, "chat.jsonl"), fx.conversations(random.Random(7), 1200))
    ids = subprocess.run([os.path.join(a.build, "bin", "zeroshard-data"), "encode", "--tokenizer", model, "--jsonl",
                          "--no-special-tokens", os.path.join(a.finetune_fixture, "eval_text.jsonl")],
                         capture_output=True, text=True, check=True).stdout
    with open(os.path.join(work, "ids.json"), "w") as f:
        json.dump([i for line in ids.splitlines() for i in json.loads(line)], f)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    p.add_argument("--build")
    p.add_argument("--finetune-fixture")
    p.add_argument("--work")
    p.add_argument("--list", action="store_true")
    p.add_argument("files", nargs="*")
    a = p.parse_args()
    files = a.files or [os.path.join(a.source, "README.md")] + sorted(glob.glob(os.path.join(a.source, "docs", "*.md")))
    runnable = [(f, b) for f in files for b in blocks(f)]
    if a.list:
        for f, (line, info, text) in runnable:
            print("%s:%d (%d lines)" % (os.path.relpath(f, a.source), line, text.count("\n")))
        return
    if not (a.build and a.finetune_fixture and a.work):
        p.error("--build, --finetune-fixture and --work are needed to run the blocks")
    if not runnable:
        print("CHECK FAILED: no block of %s is marked runnable" % ", ".join(files))
        sys.exit(1)
    failed = []
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for f in files:
        mine = [b for g, b in runnable if g == f]
        if not mine:
            continue
        work = os.path.join(a.work, os.path.splitext(os.path.basename(f))[0])
        prepare(work, a)
        for line, info, text in mine:
            where = "%s:%d" % (os.path.relpath(f, a.source), line)
            print("---- %s ----\n%s" % (where, text.rstrip()))
            r = subprocess.run(["bash", "-euo", "pipefail", "-c", text], cwd=work, env=env, capture_output=True,
                               text=True)
            tail = (r.stdout + r.stderr)[-3000:]
            print(tail.rstrip())
            if r.returncode != 0:
                failed.append(where)
                print("FAILED: %s exited with %d" % (where, r.returncode))
                break  # later blocks of the file build on this one
            print("ok:     %s" % where)
    print("CHECK FAILED: " + ", ".join(failed) if failed else "CHECK PASSED: %d block(s)" % len(runnable))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
