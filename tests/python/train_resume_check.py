#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""The Trainer's programs resume at another world size with the uninterrupted run's data.

  train_resume_check.py --bin BUILD/bin --mpirun MPIRUN --config gpt_tiny.textproto --work DIR

train_gpt (fp32) for 8 steps at 2 ranks, against 3 steps at 2 ranks, resumed for 3 at 4 ranks and
for 2 at 1 rank with 2 micro-batches (the same global batch): every step's loss within 1e-6 of the
uninterrupted run's (the same samples each step; only the order of floating-point sums differs).
Then a resume with another global batch is refused with its message. Prints CHECK PASSED or CHECK
FAILED (with what differed) as its last line.
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys

FAILED = []


def check(ok, what):
    print(("ok:     " if ok else "FAILED: ") + what)
    if not ok:
        FAILED.append(what)


def finish():
    print("CHECK FAILED: " + "; ".join(FAILED) if FAILED else "CHECK PASSED")
    sys.exit(1 if FAILED else 0)


def train(a, ranks, steps, metrics, *extra, expect_ok=True):
    args = [a.mpirun, "-n", str(ranks), "--oversubscribe", os.path.join(a.bin, "train_gpt"), "--config", a.config,
            "--set", "precision.param_dtype=FP32", "--set", "sample.tokens=0", "--set", "logging.progress=LINES",
            "--set", "train.steps=%d" % steps, "--metrics-out", metrics] + list(extra)
    p = subprocess.run(args, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        print(" ".join(args) + "\n" + p.stdout + p.stderr)
        check(False, "train_gpt at %d rank(s) exited with %d" % (ranks, p.returncode))
        finish()
    return p


def losses(metrics):
    out = {}
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if "loss" in r and "step" in r:
                out[r["step"]] = r["loss"]
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True)
    p.add_argument("--mpirun", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    w = lambda name: os.path.join(a.work, name)
    train(a, 2, 8, w("whole.jsonl"))
    whole = losses(w("whole.jsonl"))
    ckpt = ["--set", "checkpoint.dir=" + w("ckpt")]
    split = {}
    for ranks, steps, extra in ((2, 3, []), (4, 6, ["--resume"]), (1, 8, ["--resume", "--set", "train.micro_batches=2"])):
        metrics = w("split-%d.jsonl" % ranks)
        train(a, ranks, steps, metrics, *(ckpt + extra))
        got = losses(metrics)
        print("%d rank(s): steps %s" % (ranks, sorted(got)))
        split.update(got)
    check(sorted(whole) == list(range(1, 9)) and sorted(split) == list(range(1, 9)),
          "both runs report steps 1..8 (%s, %s)" % (sorted(whole), sorted(split)))
    worst = 0.0
    for s in sorted(whole):
        if s in split:
            print("step %d: uninterrupted %.9f, 2 -> 4 -> 1 rank(s) %.9f" % (s, whole[s], split[s]))
            d = abs(whole[s] - split[s])
            worst = max(worst, d if math.isfinite(d) else math.inf)
    check(worst <= 1e-6, "every step's loss within 1e-6 of the uninterrupted run's (largest difference %.3g)" % worst)
    r = train(a, 2, 10, w("other.jsonl"), *(ckpt + ["--resume", "--set", "train.batch_size=32"]), expect_ok=False)
    message = ("was trained with train.batch_size = 16, this run has 32: resuming the data exactly needs the same "
               "global batch (model.init_from starts a new run from the checkpoint's weights)")
    check(r.returncode != 0 and message in r.stderr, "another global batch is refused: %r%s" %
          (message, "" if message in r.stderr else " not in:\n" + r.stderr[-1500:]))
    finish()


if __name__ == "__main__":
    main()
