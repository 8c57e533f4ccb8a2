#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""zeroshard's train_gpt against the real PyTorch peer, side by side in one run.

  /usr/bin/python3 bench/bench_vs_pytorch.py [--bin build/bin] [--ranks 2] [--rounds 3] [--steps 20]
      [--warmup 5] [--variants fp32,bf16,bf16_ckpt] [--work DIR] [--mpirun mpirun] [--gemm-seconds 3]

What runs:
- zeroshard: `mpirun -n N --oversubscribe /bin/sh -c '/usr/bin/time ...' BIN/train_gpt --config
  examples/configs/gpt_demo.textproto --set ...` with the model, batch and optimizer set explicitly
  (below), FULL_SHARD (the demo config's strategy), every rank wrapped in GNU time (its own output file) for its peak RSS.
  Its tokens/s: train_gpt's --metrics-out step lines carry a throughput averaged over the last 20
  steps' busy time (train/src/progress.cpp); the busy time of every step is recovered from them
  exactly, and the rate is (steps after warm-up x tokens per step) / their busy time.
- PyTorch: the same GPT (tests/python/zs_gpt.py, the Python copy of the built-in GPT, models/src/gpt.cpp) under
  DistributedDataParallel over gloo, one process per rank started with torch.multiprocessing,
  torch.set_num_threads(cores // ranks) and OPENBLAS_NUM_THREADS the same (as train_gpt sets both),
  AdamW with train_gpt's hyperparameters and param groups (no decay on 1-D parameters and embedding
  tables, as zeroshard's default), gradient clipping, random byte windows of the training
  corpus. Its tokens/s: rank 0's wall time of forward+backward+clip+step over the steps after
  warm-up (DDP's all-reduce keeps the ranks in step). Peak RSS: getrusage(RUSAGE_SELF).ru_maxrss
  in every rank process.
- Rows: fp32; fp32 + activation checkpointing of every block (fp32_ckpt, not in the default set); bf16 compute (zeroshard with param_dtype BF16, and with autocast; PyTorch with
  torch.autocast('cpu', bfloat16)); bf16 + activation checkpointing of every block (PyTorch:
  torch.utils.checkpoint per block). The systems alternate in short rounds (each round runs every
  row's zeroshard configurations and the peer, the order flipped every round) so machine drift
  hits both; per row: the median over rounds of each system's tokens/s, the ratio
  zeroshard / PyTorch of the medians, and its spread (min..max of the per-round ratios).
- Same math first: Python builds the GPT, saves its state dict (torch.save), computes its
  validation loss on train_gpt's held-out windows; train_gpt starts from that file (fp32) and its
  step-0 evaluation must agree within 1e-4 relative, else the script fails. Every run (both
  systems, every round) starts from those weights.
- The physical limit, after the rounds: every row's compute dtype's GEMM peak with the same rank
  layout (one process per rank doing [1024 x 1024] products at once, the same threads), and each
  system's model-FLOPs utilisation (MFU: tokens/s x training FLOPs per token, recomputation not
  counted, over that peak). Checkpointing's cost: when a row runs with and without it, the share of
  its own throughput each system loses.
The last line printed is one JSON object with every figure. Exits non-zero with the reason on any
failure.
"""

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
except ImportError as e:
    sys.exit(f"bench_vs_pytorch.py: {sys.executable} cannot import torch ({e}); run it with Debian's "
             "/usr/bin/python3 and python3-torch (apt-get install python3-torch)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import zs_gpt  # noqa: E402
from peer_common import fail, free_port, gemm_peak, run_ranks  # noqa: E402

CONFIG = os.path.join(ROOT, "examples", "configs", "gpt_demo.textproto")
# The demo model (examples/configs/gpt_demo.textproto), set explicitly on train_gpt's command line
# too, so both sides build the same shape whatever the config file says.
MODEL = {"n_layer": 4, "n_head": 4, "d_model": 128, "seq_len": 128, "vocab_size": 256, "mlp_ratio": 4, "dropout": 0.0}
GLOBAL_BATCH = 32
OPT = {"lr": 0.003, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.1, "grad_clip_norm": 1.0}
CORPUS = "/usr/share/games/fortunes"  # train_gpt's default data.path
VAL_FRACTION = 0.05
PROGRESS_WINDOW = 20  # ProgressBar's default window: the steps a metrics line's tokens_per_s averages

# Rows: name -> (zeroshard configurations {label: --set values}, PyTorch autocast bf16, checkpointing).
VARIANTS = {
    "fp32": ({"fp32": ["precision.param_dtype=FP32", "activation_checkpointing.enabled=false"]}, False, False),
    "fp32_ckpt": ({"fp32": ["precision.param_dtype=FP32", "activation_checkpointing.enabled=true",
                            "activation_checkpointing.every_n_blocks=1"]}, False, True),
    "bf16": ({"param_dtype": ["precision.param_dtype=BF16", "activation_checkpointing.enabled=false"],
              "autocast": ["precision.param_dtype=BF16", "precision.autocast=true",
                           "activation_checkpointing.enabled=false"]}, True, False),
    "bf16_ckpt": ({"param_dtype": ["precision.param_dtype=BF16", "activation_checkpointing.enabled=true",
                                   "activation_checkpointing.every_n_blocks=1"],
                   "autocast": ["precision.param_dtype=BF16", "precision.autocast=true",
                                "activation_checkpointing.enabled=true", "activation_checkpointing.every_n_blocks=1"]},
                  True, True),
}


def common_sets(init_from, eval_windows, steps):
    sets = [f"model.{k}={v}" for k, v in MODEL.items()]
    sets += [f"model.init_from={init_from}", f"data.path={CORPUS}", f"data.val_fraction={VAL_FRACTION}",
             f"data.limit_eval_samples={eval_windows}", f"train.batch_size={GLOBAL_BATCH}", f"train.steps={steps}",
             "train.eval_interval=0", "runtime.device=CPU", "sample.tokens=0", "logging.progress=LINES",
             "sharding.strategy=FULL_SHARD", "optimizer.type=ADAMW"]
    sets += [f"optimizer.{k}={v}" for k, v in OPT.items()]
    return sets


def run_zeroshard(a, sets, metrics):
    """One train_gpt run; returns (its output, peak RSS of every rank in KiB)."""
    argv = [os.path.join(a.bin, "train_gpt"), "--config", CONFIG, "--metrics-out", metrics]
    for s in sets:
        argv += ["--set", s]
    return run_ranks(a.mpirun, a.ranks, argv, metrics + ".rss")


def read_metrics(path):
    steps, evals = [], []
    for line in open(path):
        rec = json.loads(line)
        if rec.get("eval") == "val_loss":
            evals.append((rec["step"], rec["value"]))
        elif "tokens_per_s" in rec and "step" in rec:
            steps.append((rec["step"], rec["tokens_per_s"]))
    return steps, evals


def zeroshard_rate(path, warmup, tokens_per_step):
    """tokens/s over the steps after `warmup`, from the windowed rates of the step lines: the line of
    step n averages the busy time since step max(0, n - 20), so busy(n) = busy(n - k) + k * tokens / rate(n)."""
    steps, _ = read_metrics(path)
    if not steps:
        fail(f"{path} has no step line with tokens_per_s")
    busy = [0.0]
    for i, (step, rate) in enumerate(steps, 1):
        if step != i or not rate > 0:
            fail(f"{path}: step line {i} is step {step} with tokens_per_s {rate}; expected every step in order")
        k = min(i, PROGRESS_WINDOW)
        busy.append(busy[i - k] + k * tokens_per_step / rate)
    measured = len(steps) - warmup
    if measured < 1:
        fail(f"{path}: {len(steps)} steps, none after {warmup} warm-up steps")
    return measured * tokens_per_step / (busy[-1] - busy[warmup])


# ---- the PyTorch peer ----

def peer_rank(rank, cfg):
    os.environ["MASTER_ADDR"] = cfg.get("master", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(cfg["port"])
    # PyTorch >= 2.4 asks its TCPStore for libuv, which Debian's python3-torch 2.6 is built without
    # ("use_libuv was requested but PyTorch was build without libuv support"); 1.13 ignores this.
    os.environ.setdefault("USE_LIBUV", "0")
    torch.set_num_threads(cfg["threads"])
    dist.init_process_group("gloo", rank=rank, world_size=cfg["ranks"])
    model = zs_gpt.model_from_config(MODEL)
    model.load_state_dict(torch.load(cfg["init_from"]))
    model.checkpoint_blocks = cfg["checkpoint"]
    model.train()
    ddp = DistributedDataParallel(model)
    # The param groups zeroshard's default (optimizer.no_decay_1d_and_embeddings) makes: no decay on
    # 1-D parameters and embedding tables.
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    no_decay = [p for p in model.parameters() if p.dim() < 2 or id(p) in embeddings]
    decay = [p for p in model.parameters() if not (p.dim() < 2 or id(p) in embeddings)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": OPT["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]), eps=OPT["eps"])
    train, _ = zs_gpt.split_corpus(CORPUS, VAL_FRACTION)
    tokens = torch.frombuffer(bytearray(train), dtype=torch.uint8).long()
    seq = MODEL["seq_len"]
    per_rank = GLOBAL_BATCH // cfg["ranks"]
    gen = torch.Generator().manual_seed(1000 + rank)
    offsets = torch.arange(seq + 1)
    times = []
    for _ in range(cfg["warmup"] + cfg["steps"]):
        starts = torch.randint(0, len(tokens) - seq - 1, (per_rank, 1), generator=gen)
        window = tokens[starts + offsets]
        x, y = window[:, :-1].contiguous(), window[:, 1:].contiguous()
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg["bf16"]):
            logits = ddp(x)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["grad_clip_norm"])
        opt.step()
        times.append(time.perf_counter() - t0)
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    with open(os.path.join(cfg["out"], f"rank{rank}.json"), "w") as f:
        json.dump({"times": times, "rss_kib": rss_kib, "loss": loss.item()}, f)
    dist.barrier()
    dist.destroy_process_group()


def run_peer(a, init_from, bf16, checkpoint, out):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    cfg = {"ranks": a.ranks, "threads": a.threads, "init_from": init_from, "bf16": bf16, "checkpoint": checkpoint,
           "warmup": a.warmup, "steps": a.steps, "out": out, "port": free_port()}
    try:
        mp.spawn(peer_rank, args=(cfg,), nprocs=a.ranks, join=True)
    except Exception as e:  # a rank's exception, with its traceback in the message
        fail(f"the PyTorch peer failed: {e}")
    ranks = [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(a.ranks)]
    measured = ranks[0]["times"][a.warmup:]
    rate = len(measured) * GLOBAL_BATCH * MODEL["seq_len"] / sum(measured)
    return rate, [r["rss_kib"] for r in ranks]


# ---- the physical limit ----

def model_flops_per_token(m):
    """Training FLOPs per token of the GPT (forward + backward = 3 x forward; recomputation not
    counted, as model-FLOPs utilisation is defined): per block the qkv, projection and MLP products
    (4 + 2 * mlp_ratio) * d^2 multiply-adds, the output layer d * vocab, attention scores and
    weighted sum 2 * seq * d per layer (all positions, the causal mask not discounted)."""
    d, layers, seq = m["d_model"], m["n_layer"], m["seq_len"]
    forward = 2 * ((4 + 2 * m["mlp_ratio"]) * d * d * layers + d * m["vocab_size"]) + 4 * layers * seq * d
    return 3 * forward


# ---- main ----

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"), help="directory holding train_gpt")
    ap.add_argument("--mpirun", default=shutil.which("mpirun") or "mpirun")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20, help="measured steps per run, after the warm-up")
    ap.add_argument("--warmup", type=int, default=5, help="steps per run excluded from the rate")
    ap.add_argument("--variants", default="fp32,bf16,bf16_ckpt", help="comma-separated: " + ",".join(VARIANTS))
    ap.add_argument("--eval-windows", type=int, default=512, help="held-out windows of the same-math check")
    ap.add_argument("--gemm-seconds", type=float, default=3.0, help="length of the GEMM peak measurement per dtype")
    ap.add_argument("--work", default=None, help="scratch directory (default: a new one under /tmp)")
    a = ap.parse_args()
    variants = [v for v in a.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        ap.error(f"--variants: unknown {unknown}; choose from {','.join(VARIANTS)}")
    if a.ranks < 1 or GLOBAL_BATCH % a.ranks:
        ap.error(f"--ranks {a.ranks}: must divide the global batch {GLOBAL_BATCH}")
    if a.rounds < 1 or a.steps < 1 or a.warmup < 0:
        ap.error("--rounds and --steps must be >= 1, --warmup >= 0")
    train_gpt = os.path.join(a.bin, "train_gpt")
    if not os.access(train_gpt, os.X_OK):
        fail(f"{train_gpt} is not an executable: build it (ninja -C build train_gpt) or pass --bin")
    if not os.access("/usr/bin/time", os.X_OK):
        fail("/usr/bin/time (GNU time, Debian package 'time') is needed for zeroshard's peak RSS per rank")
    work = a.work or os.path.join("/tmp", f"bench_vs_pytorch.{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    cores = os.cpu_count() or 1
    a.threads = max(1, cores // a.ranks)
    os.environ["OPENBLAS_NUM_THREADS"] = str(a.threads)  # read by the peer's ranks when they load torch
    tokens_per_step = GLOBAL_BATCH * MODEL["seq_len"]
    print(f"bench_vs_pytorch: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {cores} cores, {a.ranks} ranks x "
          f"{a.threads} intra-op thread(s), torch {torch.__version__}; model {MODEL}, global batch {GLOBAL_BATCH} x "
          f"{MODEL['seq_len']} tokens; {a.rounds} round(s) of {a.warmup} warm-up + {a.steps} measured steps per run",
          flush=True)

    # 1. Same weights, same math: train_gpt's step-0 evaluation against Python's.
    torch.manual_seed(1234)
    model = zs_gpt.model_from_config(MODEL)
    init_from = os.path.join(work, "initial.pt")
    torch.save(model.state_dict(), init_from)
    _, val = zs_gpt.split_corpus(CORPUS, VAL_FRACTION)
    py_loss = zs_gpt.validation_loss(model, val, MODEL["seq_len"], a.eval_windows)
    check = os.path.join(work, "check.jsonl")
    run_zeroshard(a, common_sets(init_from, a.eval_windows, 1) + VARIANTS["fp32"][0]["fp32"], check)
    _, evals = read_metrics(check)
    if not evals or evals[0][0] != 0:
        fail(f"{check} has no step-0 val_loss line (train_gpt evaluates before the first step)")
    zs_loss = evals[0][1]
    rel = abs(zs_loss - py_loss) / abs(py_loss)
    print(f"same math (fp32, same weights, {a.eval_windows} held-out windows): validation loss PyTorch "
          f"{py_loss:.8f}, train_gpt {zs_loss:.8f}, relative difference {rel:.2e}", flush=True)
    if rel > 1e-4:
        fail(f"train_gpt's initial validation loss {zs_loss:.8f} differs from PyTorch's {py_loss:.8f} by "
             f"{rel:.2e} relative (> 1e-4): the two sides do not compute the same model")

    # 2. Interleaved rounds.
    results = {v: {"pytorch": [], "pytorch_rss_kib": []} for v in variants}
    for v in variants:
        for label in VARIANTS[v][0]:
            results[v]["zs_" + label] = []
            results[v]["zs_" + label + "_rss_kib"] = []
    sets = common_sets(init_from, 32, a.warmup + a.steps)
    for rnd in range(a.rounds):
        for v in variants:
            zs_cfgs, bf16, ckpt = VARIANTS[v]
            runs = [("zs_" + label, extra) for label, extra in zs_cfgs.items()] + [("pytorch", None)]
            if rnd % 2 == 1:
                runs.reverse()
            for name, extra in runs:
                if extra is None:
                    rate, rss = run_peer(a, init_from, bf16, ckpt, os.path.join(work, "peer"))
                else:
                    metrics = os.path.join(work, f"{v}_{name}_{rnd}.jsonl")
                    _, rss = run_zeroshard(a, sets + extra, metrics)
                    rate = zeroshard_rate(metrics, a.warmup, tokens_per_step)
                results[v][name].append(rate)
                results[v][name + "_rss_kib"].append(max(rss))
                print(f"round {rnd + 1}/{a.rounds} {v:9s} {name:15s} {rate:10.0f} tokens/s, peak RSS per rank "
                      f"{' '.join(f'{k / 1024:.0f}' for k in rss)} MiB", flush=True)

    # 3. The physical limit: each dtype's GEMM peak with this rank layout (after the runs, on the
    # same warm machine), and each row's model-FLOPs utilisation against it.
    flops_per_token = model_flops_per_token(MODEL)
    peaks = {}
    for dtype in sorted({"bf16" if v.startswith("bf16") else "fp32" for v in variants}):
        peaks[dtype] = gemm_peak(dtype, a.ranks, a.threads, a.gemm_seconds)
        print(f"GEMM peak {dtype}: {peaks[dtype] / 1e9:.1f} GFLOP/s ({a.ranks} processes x {a.threads} thread(s), "
              f"[1024 x 1024] products at once); model FLOPs per token {flops_per_token:,}", flush=True)

    # 4. The table.
    summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": cores, "ranks": a.ranks,
               "model_flops_per_token": flops_per_token, "gemm_peak_flops": peaks,
               "threads_per_rank": a.threads, "torch": torch.__version__, "model": MODEL, "global_batch": GLOBAL_BATCH,
               "rounds": a.rounds, "warmup_steps": a.warmup, "measured_steps": a.steps,
               "same_math": {"pytorch_val_loss": py_loss, "zeroshard_val_loss": zs_loss, "relative_difference": rel},
               "rows": {}}
    print("\nhow: zeroshard = train_gpt FULL_SHARD under mpirun, tokens/s from its --metrics-out step lines' busy time "
          "after warm-up, peak RSS per rank from GNU time (%M); PyTorch = zs_gpt.Gpt under DDP/gloo in "
          "torch.multiprocessing ranks, tokens/s from rank 0's wall time of forward+backward+clip+AdamW after "
          "warm-up, peak RSS per rank from getrusage ru_maxrss; runs alternate in rounds, order flipped each round")
    print("median tokens/s over rounds; ratio = zeroshard / PyTorch of the medians [min..max of per-round ratios]; "
          "peak RSS = the largest rank's, max over rounds; MFU = tokens/s x model FLOPs per token / the GEMM peak "
          "of the row's compute dtype (bf16 rows: bf16, whether autocast or param_dtype)")
    print(f"{'variant':10s} {'zeroshard config':16s} {'zeroshard':>10s} {'PyTorch':>10s} {'ratio':>6s} "
          f"{'spread':>13s} {'zs RSS':>8s} {'PT RSS':>8s} {'zs MFU':>7s} {'PT MFU':>7s}")
    for v in variants:
        r = results[v]
        pt = statistics.median(r["pytorch"])
        pt_rss = max(r["pytorch_rss_kib"]) / 1024
        peak = peaks["bf16" if v.startswith("bf16") else "fp32"]
        mfu = lambda rate: rate * flops_per_token / peak  # noqa: E731
        row = {"pytorch_tokens_per_s": pt, "pytorch_rounds": r["pytorch"], "pytorch_peak_rss_mib": pt_rss,
               "pytorch_mfu": mfu(pt), "gemm_peak_flops": peak, "zeroshard": {}}
        for label in VARIANTS[v][0]:
            zs = statistics.median(r["zs_" + label])
            ratios = [z / p for z, p in zip(r["zs_" + label], r["pytorch"])]
            zs_rss = max(r["zs_" + label + "_rss_kib"]) / 1024
            row["zeroshard"][label] = {"tokens_per_s": zs, "rounds": r["zs_" + label], "ratio": zs / pt,
                                       "ratio_min": min(ratios), "ratio_max": max(ratios), "peak_rss_mib": zs_rss,
                                       "mfu": mfu(zs)}
            print(f"{v:10s} {label:16s} {zs:10.0f} {pt:10.0f} {zs / pt:6.2f} {min(ratios):6.2f}..{max(ratios):5.2f} "
                  f"{zs_rss:6.0f}Mi {pt_rss:6.0f}Mi {mfu(zs):7.2f} {mfu(pt):7.2f}")
        summary["rows"][v] = row
    # What checkpointing every block costs each system: the share of its own throughput it loses
    # (median over rounds of the per-round cost, each round's two runs of a system close in time).
    summary["checkpointing_cost"] = {}
    for plain, ck in (("fp32", "fp32_ckpt"), ("bf16", "bf16_ckpt")):
        if plain not in variants or ck not in variants:
            continue
        def cost(name):
            return statistics.median(1 - c / p for c, p in zip(results[ck][name], results[plain][name]))
        costs = {"pytorch": cost("pytorch")}
        for label in VARIANTS[ck][0]:
            if label in VARIANTS[plain][0]:
                costs["zeroshard_" + label] = cost("zs_" + label)
        summary["checkpointing_cost"][plain] = costs
        print(f"checkpointing every block ({plain}) costs: " +
              ", ".join(f"{k} {100 * c:.0f}%" for k, c in costs.items()) + " of the throughput without it")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
