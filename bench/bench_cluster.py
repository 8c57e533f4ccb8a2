#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""zeroshard's sharding strategies against PyTorch DDP over simulated cluster links, in one run.

  /usr/bin/python3 bench/bench_cluster.py [--rates unlimited,10gbit,1gbit] [--nodes 2] [--ranks-per-node 2]
      [--rounds 2] [--steps 10] [--warmup 3] [--strategies FULL_SHARD,SHARD_GRAD_OP,HYBRID_SHARD] [--bin build/bin]

Needs root (scripts/netsim.sh makes the network namespaces). For each link rate, netsim.sh puts
--nodes namespaces ("nodes") of --ranks-per-node ranks each behind links of that rate each way
("unlimited": the same namespaces and veth links without a limit), and inside it this script
runs, in interleaved rounds (the order flipped every round), train_gpt with each strategy
(HYBRID_SHARD: a shard group per node; FULL_SHARD:INT8: with int8 parameter gathers;
FULL_SHARD:QGRAD: with int8 gradient reduce-scatters; FULL_SHARD:INT8:QGRAD: both;
FULL_SHARD:HPZ: hpZ, backward's parameter gathers inside each node;
FULL_SHARD:ONE_CALL: each collective over all ranks at once instead of in two stages) and the
PyTorch peer: the same GPT (tests/python/zs_gpt.py)
under DistributedDataParallel over gloo, one process per rank started by the same mpirun, so both
cross the same links. Both start from the same weights (bench_vs_pytorch.py checks the two compute
the same model) and train the demo model in fp32 with AdamW.

With "unlimited" among the rates, each zeroshard system's step time there stands for its compute,
and zeroshard-estimate --link-gbps --compute-s predicts its step at every limited rate from it; the
table after the results prints predicted against measured step time (goal: within 25%).

Per run: tokens/s over the measured steps (train_gpt: from its --metrics-out busy time; PyTorch:
rank 0's wall time of forward+backward+clip+step), the bytes node 0 sent and received over its
link (its interface's counters, the whole run: start-up, warm-up and measured steps, divided by the
steps run), and for train_gpt the bytes its collectives moved per step by the engine's own counters.
Printed per rate and strategy: median tokens/s, the ratio to DDP, the link bytes per step, and the
exposed share of communication: 1 - tokens/s at this rate / tokens/s unlimited (when "unlimited" is
among the rates). The last line is one JSON object with every figure.
"""

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import bench_vs_pytorch as bvp  # noqa: E402
from peer_common import fail  # noqa: E402

NETSIM = os.path.join(ROOT, "scripts", "netsim.sh")
# What a strategy's ":VARIANT" suffix sets.
VARIANTS = {"INT8": "sharding.gather_quantization=INT8", "QGRAD": "sharding.reduce_quantization=INT8",
            "ONE_CALL": "comm.node_stages=false", "HPZ": "sharding.hpz_group_size=0"}


def link_bytes():
    """Bytes node 0's interface sent + received so far (this process runs in node 0's namespace)."""
    stats = "/sys/class/net/eth0/statistics/"
    return sum(int(open(stats + k).read()) for k in ("tx_bytes", "rx_bytes"))


def mpirun_line():
    line = os.environ.get("ZS_NETSIM_MPIRUN")
    if not line:
        fail("ZS_NETSIM_MPIRUN is not set: the inside of a rate runs under scripts/netsim.sh --shell")
    return shlex.split(line)


def gbps(rate):
    """tc's rate ("1gbit", "100mbit", "25gbit") in Gb/s."""
    for unit, scale in (("gbit", 1.0), ("mbit", 1e-3), ("kbit", 1e-6)):
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    fail(f"--rates: '{rate}' is not a rate in gbit, mbit or kbit")


def estimated_step_s(a, name, rate, compute_s):
    """zeroshard-estimate's step time (middle, min, max) for system `name` over links of `rate`."""
    strategy, *variants = name.split(":")
    m = bvp.MODEL
    argv = [os.path.join(a.bin, "zeroshard-estimate"), "--config", bvp.CONFIG,
            "--gpt", f"{m['n_layer']},{m['d_model']},{m['vocab_size']},{m['seq_len']},{m['n_head']}",
            "--world", str(a.nodes * a.ranks_per_node), "--ranks-per-node", str(a.ranks_per_node),
            "--link-gbps", str(gbps(rate)), "--compute-s", f"{compute_s:.6f}"]
    for s in bvp.VARIANTS["fp32"][0]["fp32"] + [f"sharding.strategy={strategy}"] + [VARIANTS[v] for v in variants]:
        argv += ["--set", s]
    out = run(argv, "zeroshard-estimate")
    row = next((r for r in out.split("communication per step")[1].splitlines() if r.startswith("*")), None)
    if row is None or "not " in row:
        return None
    middle, bounds = row.split()[4], row.split()[5]
    lo, hi = bounds.strip("()").split("..")
    return float(middle), float(lo), float(hi)


def run(cmd, what):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        print("+ " + " ".join(cmd) + "\n" + p.stdout[-6000:], flush=True)
        fail(f"{what} exited with status {p.returncode} (command and output above)")
    return p.stdout


def inside(a):
    """One rate: the interleaved rounds, inside netsim's namespaces. Writes a JSON file."""
    ranks = a.nodes * a.ranks_per_node
    threads = max(1, (os.cpu_count() or 1) // ranks)
    os.environ["OPENBLAS_NUM_THREADS"] = str(threads)
    tokens_per_step = bvp.GLOBAL_BATCH * bvp.MODEL["seq_len"]
    sets = bvp.common_sets(a.init_from, 32, a.warmup + a.steps) + bvp.VARIANTS["fp32"][0]["fp32"]
    sets = [s for s in sets if not s.startswith("sharding.strategy=")] + ["train.log_interval=1"]
    names = a.strategies.split(",") + ["pytorch"]
    for name in names[:-1]:
        for v in name.split(":")[1:]:
            if v not in VARIANTS:
                fail(f"--strategies: '{name}' has the variant '{v}'; known: {', '.join(VARIANTS)}")
    out = {n: {"tokens_per_s": [], "link_bytes_per_step": [], "comm_bytes_per_step": []} for n in names}
    for rnd in range(a.rounds):
        order = names if rnd % 2 == 0 else list(reversed(names))
        for name in order:
            before = link_bytes()
            if name == "pytorch":
                peer = os.path.join(a.work, "peer")
                os.makedirs(peer, exist_ok=True)
                cfg = {"ranks": ranks, "threads": threads, "init_from": a.init_from, "bf16": False,
                       "checkpoint": False, "warmup": a.warmup, "steps": a.steps, "out": peer,
                       "port": 29500 + rnd, "master": os.environ.get("ZS_NETSIM_MASTER", "127.0.0.1")}
                cfg_path = os.path.join(a.work, "peer.json")
                json.dump(cfg, open(cfg_path, "w"))
                run(mpirun_line() + ["-n", str(ranks), "-x", "GLOO_SOCKET_IFNAME=eth0", "-x", "OPENBLAS_NUM_THREADS",
                                     sys.executable, os.path.abspath(__file__), "--peer-rank", cfg_path],
                    "the PyTorch peer")
                times = json.load(open(os.path.join(peer, "rank0.json")))["times"][a.warmup:]
                rate, comm = len(times) * tokens_per_step / sum(times), None
            else:
                metrics = os.path.join(a.work, f"{name}_{rnd}.jsonl")
                argv = [os.path.join(a.bin, "train_gpt"), "--config", bvp.CONFIG, "--metrics-out", metrics]
                strategy, *variants = name.split(":")
                extra = [f"sharding.strategy={strategy}"] + [VARIANTS[v] for v in variants]
                for s in sets + extra:
                    argv += ["--set", s]
                run(mpirun_line() + ["-n", str(ranks), "-x", "OPENBLAS_NUM_THREADS"] + argv, f"train_gpt {name}")
                rate = bvp.zeroshard_rate(metrics, a.warmup, tokens_per_step)
                steps = [json.loads(l) for l in open(metrics)]
                steps = [r for r in steps if "loss" in r and "eval" not in r and "summary" not in r]
                comm = statistics.mean(r["comm_bytes"] for r in steps[a.warmup:])
            link = (link_bytes() - before) / (a.warmup + a.steps)
            out[name]["tokens_per_s"].append(rate)
            out[name]["link_bytes_per_step"].append(link)
            if comm is not None:
                out[name]["comm_bytes_per_step"].append(comm)
            print(f"  {a.rate:>9s} round {rnd + 1}/{a.rounds} {name:15s} {rate:9.0f} tokens/s, node 0's link "
                  f"{link / 1e6:8.2f} MB/step" + (f", collectives {comm / 1e6:8.2f} MB/step" if comm else ""),
                  flush=True)
    json.dump(out, open(a.result, "w"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="unlimited,10gbit,1gbit")
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--ranks-per-node", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10, help="measured steps per run, after the warm-up")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--strategies", default="FULL_SHARD,FULL_SHARD:INT8,SHARD_GRAD_OP,HYBRID_SHARD",
                    help="comma-separated; STRATEGY:INT8 adds sharding.gather_quantization=INT8, "
                         "STRATEGY:QGRAD sharding.reduce_quantization=INT8, "
                         "STRATEGY:HPZ sharding.hpz_group_size=0 (backward's gathers inside each node), "
                         "STRATEGY:ONE_CALL comm.node_stages=false (each collective over all ranks at once)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    # Internal: the inside of one rate, and one rank of the PyTorch peer.
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rate", default="", help=argparse.SUPPRESS)
    ap.add_argument("--init-from", default="", help=argparse.SUPPRESS)
    ap.add_argument("--work", default="", help=argparse.SUPPRESS)
    ap.add_argument("--result", default="", help=argparse.SUPPRESS)
    ap.add_argument("--peer-rank", default="", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer_rank:
        bvp.peer_rank(int(os.environ["OMPI_COMM_WORLD_RANK"]), json.load(open(a.peer_rank)))
        return
    ranks = a.nodes * a.ranks_per_node
    if bvp.GLOBAL_BATCH % ranks:
        ap.error(f"{ranks} ranks must divide the global batch {bvp.GLOBAL_BATCH}")
    if a.inside:
        inside(a)
        return
    if os.geteuid() != 0:
        fail("needs root: scripts/netsim.sh makes network namespaces")
    work = tempfile.mkdtemp(prefix="bench_cluster.")
    bvp.torch.manual_seed(1234)
    init_from = os.path.join(work, "initial.pt")
    bvp.torch.save(bvp.zs_gpt.model_from_config(bvp.MODEL).state_dict(), init_from)
    rates = a.rates.split(",")
    print(f"bench_cluster: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, {os.cpu_count()} cores, {a.nodes} nodes x "
          f"{a.ranks_per_node} ranks, model {bvp.MODEL}, global batch {bvp.GLOBAL_BATCH} x {bvp.MODEL['seq_len']} "
          f"tokens, fp32, {a.rounds} round(s) of {a.warmup} warm-up + {a.steps} measured steps", flush=True)
    results = {}
    for rate in rates:
        result = os.path.join(work, f"{rate}.json")
        net = [NETSIM, "--nodes", str(a.nodes), "--ranks-per-node", str(a.ranks_per_node), "--shell"]
        net += ["--rate", rate] if rate != "unlimited" else ["--rate", "0"]
        cmd = net + ["--", sys.executable, os.path.abspath(__file__), "--inside", "--rate", rate, "--init-from",
                     init_from, "--work", work, "--result", result, "--nodes", str(a.nodes), "--ranks-per-node",
                     str(a.ranks_per_node), "--rounds", str(a.rounds), "--steps", str(a.steps), "--warmup",
                     str(a.warmup), "--strategies", a.strategies, "--bin", a.bin]
        p = subprocess.run(cmd)
        if p.returncode != 0:
            fail(f"the runs at {rate} failed (status {p.returncode}; output above)")
        results[rate] = json.load(open(result))

    print("\nmedian over rounds; ratio = zeroshard / DDP tokens/s; link = bytes node 0 sent + received per step "
          "(whole run / steps); collectives = one rank's all-gather + reduce bytes per step (engine counters); "
          "exposed = 1 - tokens/s / tokens/s unlimited")
    print(f"{'rate':>9s} {'system':15s} {'tokens/s':>9s} {'vs DDP':>7s} {'link MB':>8s} {'coll MB':>8s} {'exposed':>8s}")
    summary = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "cores": os.cpu_count(), "nodes": a.nodes,
               "ranks_per_node": a.ranks_per_node, "model": bvp.MODEL, "global_batch": bvp.GLOBAL_BATCH,
               "rounds": a.rounds, "warmup": a.warmup, "steps": a.steps, "rates": {}}
    for rate in rates:
        r = results[rate]
        ddp = statistics.median(r["pytorch"]["tokens_per_s"])
        rows = {}
        for name, v in r.items():
            tps = statistics.median(v["tokens_per_s"])
            row = {"tokens_per_s": tps, "rounds": v["tokens_per_s"], "vs_ddp": tps / ddp,
                   "link_bytes_per_step": statistics.median(v["link_bytes_per_step"])}
            if v["comm_bytes_per_step"]:
                row["comm_bytes_per_step"] = statistics.median(v["comm_bytes_per_step"])
            if "unlimited" in results and rate != "unlimited":
                row["exposed"] = 1 - tps / statistics.median(results["unlimited"][name]["tokens_per_s"])
            rows[name] = row
            coll = f"{row['comm_bytes_per_step'] / 1e6:8.2f}" if "comm_bytes_per_step" in row else f"{'-':>8s}"
            exposed = f"{100 * row['exposed']:7.0f}%" if "exposed" in row else f"{'-':>8s}"
            print(f"{rate:>9s} {name:15s} {tps:9.0f} {tps / ddp:7.2f} {row['link_bytes_per_step'] / 1e6:8.2f} "
                  f"{coll} {exposed}")
        summary["rates"][rate] = rows
    if "unlimited" in results:
        print("\nstep time at each limited rate: measured (global batch tokens / tokens/s) against "
              "zeroshard-estimate's prediction from the step unlimited (compute) and the link")
        print(f"{'rate':>9s} {'system':15s} {'compute s':>9s} {'measured s':>10s} {'estimated s (min..max)':>24s} "
              f"{'est/meas':>8s}")
        tokens_per_step = bvp.GLOBAL_BATCH * bvp.MODEL["seq_len"]
        for rate in rates:
            if rate == "unlimited":
                continue
            for name, row in summary["rates"][rate].items():
                if name == "pytorch":
                    continue
                compute = tokens_per_step / summary["rates"]["unlimited"][name]["tokens_per_s"]
                measured = tokens_per_step / row["tokens_per_s"]
                est = estimated_step_s(a, name, rate, compute)
                if est is None:
                    print(f"{rate:>9s} {name:15s} {compute:9.3f} {measured:10.3f} {'not modelled':>24s}")
                    continue
                row["estimated_step_s"], row["measured_step_s"] = est[0], measured
                print(f"{rate:>9s} {name:15s} {compute:9.3f} {measured:10.3f} "
                      f"{f'{est[0]:.3f} ({est[1]:.3f}..{est[2]:.3f})':>24s} {est[0] / measured:8.2f}")
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
