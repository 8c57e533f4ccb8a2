# SPDX-License-Identifier: Apache-2.0
"""What the benchmarks that race a zeroshard program against a PyTorch peer share
(bench_vs_pytorch.py, bench_llama_vs_pytorch.py):

- fail(msg): print `BENCH FAILED: msg` and exit 1 (the smoke tests match that line);
- run_ranks(...): a zeroshard program under mpirun, every rank wrapped in GNU time for its peak RSS;
- free_port(): a TCP port for the peer's gloo rendezvous;
- gemm_peak(...): the GEMM FLOP/s of a rank layout on this machine, the MFU denominator.
"""

import os
import shutil
import socket
import subprocess
import sys


def fail(msg):
    print(f"BENCH FAILED: {msg}", flush=True)
    sys.exit(1)


def run_ranks(mpirun, ranks, argv, rss_dir, env=None):
    """`mpirun -n ranks --oversubscribe argv...` with every rank under /usr/bin/time writing its peak
    RSS to a file of its own in rss_dir (their stderr lines would interleave through mpirun).
    Returns (stdout and stderr together, [peak RSS of each rank in KiB]); fails, printing the command
    and its output, when the program exits non-zero."""
    shutil.rmtree(rss_dir, ignore_errors=True)
    os.makedirs(rss_dir)
    wrapper = 'exec /usr/bin/time -f %M -o "$0/rank.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-$$}}" "$@"'
    cmd = [mpirun, "-n", str(ranks), "--oversubscribe", "/bin/sh", "-c", wrapper, rss_dir] + list(argv)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if p.returncode != 0:
        print("+ " + " ".join(cmd) + "\n" + p.stdout, flush=True)
        fail(f"{os.path.basename(argv[0])} exited with status {p.returncode} (command and output above)")
    rss = []
    for name in sorted(os.listdir(rss_dir)):
        text = open(os.path.join(rss_dir, name)).read().split()
        if not text or not text[-1].isdigit():
            fail(f"{rss_dir}/{name}: no peak RSS from /usr/bin/time (read {text})")
        rss.append(int(text[-1]))
    if len(rss) != ranks:
        fail(f"expected a peak-RSS file from /usr/bin/time for each of {ranks} ranks in {rss_dir}, found {len(rss)}")
    return p.stdout, rss


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# One rank's share: square matrix products in `dtype` on `threads` threads for `seconds`, started
# together with the other ranks' processes (so they compete for the cores as the training ranks do).
GEMM_CODE = r"""
import sys, time, torch
dtype, threads, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
torch.set_num_threads(threads)
dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
n = 1024
a, b = torch.randn(n, n).to(dt), torch.randn(n, n).to(dt)
a @ b
print("ready", flush=True)
sys.stdin.readline()  # every rank's process starts at once
ops, t0 = 0, time.perf_counter()
while True:
    a @ b
    ops += 1
    elapsed = time.perf_counter() - t0
    if elapsed >= seconds:
        break
print(2 * n ** 3 * ops / elapsed, flush=True)
"""


def gemm_peak(dtype, ranks, threads, seconds=3.0):
    """FLOP/s of `ranks` processes doing [1024 x 1024] products in `dtype` at once, `threads` intra-op
    (and OpenBLAS) threads each, summed: the GEMM peak of this rank layout on this machine."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    procs = [subprocess.Popen([sys.executable, "-c", GEMM_CODE, dtype, str(threads), str(seconds)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env)
             for _ in range(ranks)]
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            fail(f"GEMM peak ({dtype}): a process printed {line!r} instead of getting ready")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    total = 0.0
    for p in procs:
        out, _ = p.communicate()
        try:
            total += float(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            fail(f"GEMM peak ({dtype}): a process printed {out!r} (exit {p.returncode})")
    return total
