#!/usr/bin/env python3
"""ZeRO measured: tokens/s, the memory each rank holds (parameters, gradients, optimizer state,
counted from the allocator) and its step peak, for --zero 0-3 on N = 2 and 4 ranks, side by
side in one invocation, beside the paper's formulas.

    python3 benchmarks/zero_bench.py [--steps 8] [--data-dir data]

The model is nanoGPT's "baby GPT" for Shakespeare (6 layers, 6 heads, 384 wide, block 256:
10.6M parameters), micro-batch 2. Each configuration trains --steps steps; tokens/s is the
median over the logged steps after the first two. On a 2-core machine 4 ranks share 2 cores:
read docs/zero.md for what that distorts."""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fair_settings import clean_env  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--train-dp", default=os.path.join(ROOT, "build", "trainers", "train_dp"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--ranks", default="2,4")
parser.add_argument("--backend", default="mpi")
args = parser.parse_args()

MEMORY = re.compile(r"memory rank (\d+) \(allocator\): parameters ([^,]+), gradients ([^,]+), optimizer ([^=]+) = "
                    r"([^(]+) \(ZeRO-\d formula ([^)]+)\); step peak ([^,]+),")
TRAFFIC = re.compile(r"each rank sends ≈ ([0-9.]+) MB \(formula ([0-9.]+) MB")
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def mib(text):
    number, unit = text.strip().split()
    return float(number) * UNITS[unit] / 2**20


rows = []
with tempfile.TemporaryDirectory() as tmp:
    for N in [int(n) for n in args.ranks.split(",")]:
        for stage in range(4):
            metrics = os.path.join(tmp, f"m{N}{stage}.jsonl")
            command = ["mpiexec", "-n", str(N), args.train_dp, "--data-dir", args.data_dir, "--out-dir", tmp,
                       "--n-layer", "6", "--n-head", "6", "--n-embd", "384", "--block-size", "256",
                       "--batch-size", "2", "--zero", str(stage), "--backend", args.backend,
                       "--max-iters", str(args.steps), "--log-interval", "1", "--eval-interval", "0",
                       "--eval-iters", "1", "--no-full-val", "--sample-tokens", "0", "--ckpt-interval", "0",
                       "--metrics", metrics, "--threads", "1"]
            done = subprocess.run(command, env=clean_env(), capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"failed: {' '.join(command)}\n{done.stdout}{done.stderr}")
            train = [json.loads(line) for line in open(metrics)]
            speeds = [w["tokens_per_s"] for w in train if w["kind"] == "train" and w["step"] > 2]
            memory = [m for m in (MEMORY.search(line) for line in done.stdout.splitlines()) if m]
            worst = max(memory, key=lambda m: mib(m.group(7)))  # the rank with the highest peak
            counted, formula = (float(x) for x in TRAFFIC.search(done.stdout).groups())
            row = dict(N=N, stage=stage, tps=statistics.median(speeds), params=mib(worst.group(2)),
                       grads=mib(worst.group(3)), optimizer=mib(worst.group(4)), held=mib(worst.group(5)),
                       formula=mib(worst.group(6)), peak=mib(worst.group(7)), traffic=counted,
                       traffic_formula=formula)
            rows.append(row)
            print(f"N={N} zero={stage}: {row['tps']:6.0f} tok/s, held {row['held']:.1f} MiB "
                  f"(formula {row['formula']:.1f}), peak {row['peak']:.1f} MiB", flush=True)

print("\n| N | stage | tokens/s | parameters | gradients | optimizer | held (formula) | step peak | "
      "sent per rank per step, counted (formula) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for r in rows:
    print(f"| {r['N']} | {r['stage']} | {r['tps']:,.0f} | {r['params']:.1f} MiB | {r['grads']:.1f} MiB | "
          f"{r['optimizer']:.1f} MiB | {r['held']:.1f} MiB ({r['formula']:.1f}) | {r['peak']:.1f} MiB | "
          f"{r['traffic']:.1f} MB ({r['traffic_formula']:.1f}) |")
