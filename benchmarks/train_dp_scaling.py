#!/usr/bin/env python3
"""Training throughput of train_dp: 1 and 2 ranks (1 compute thread each), both backends,
both gradient-averaging implementations, side by side in one run (OPENBLAS_CORETYPE unset).

    python3 benchmarks/train_dp_scaling.py [--steps 60] [--rounds 3] [--data-dir data]

Each configuration trains the main job's model for --steps steps; the first log window is
warm-up, the rest give tokens/s. Configurations run interleaved, --rounds times, and the
table shows medians. Scaling efficiency = (tokens/s with 2 ranks) / (2 × tokens/s with 1)."""
import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--train-dp", default=os.path.join(ROOT, "build", "trainers", "train_dp"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=12)
parser.add_argument("--bucket-mb", type=float, default=1.0)
parser.add_argument("--json", help="also write the results here")
args = parser.parse_args()

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fair_settings import clean_env  # noqa: E402

env = clean_env()  # OpenBLAS picks its kernels as on a user's machine (no OPENBLAS_CORETYPE)
configs = list(itertools.product([1, 2], ["mpi", "ring"], ["naive", "bucketed"]))
samples = {c: [] for c in configs}
model_line = ""
with tempfile.TemporaryDirectory() as tmp:
    for round_ in range(args.rounds):
        for ranks, backend, ddp in configs:
            metrics = os.path.join(tmp, f"m{ranks}{backend}{ddp}{round_}.jsonl")
            command = ["mpiexec", "-n", str(ranks), args.train_dp, "--data-dir", args.data_dir, "--out-dir", tmp,
                       "--threads", "1", "--backend", backend, "--ddp", ddp, "--bucket-mb", str(args.bucket_mb),
                       "--batch-size", str(args.batch_size), "--max-iters", str(args.steps),
                       "--log-interval", str(args.steps // 6), "--eval-interval", "0", "--eval-iters", "1",
                       "--no-full-val", "--sample-tokens", "0", "--metrics", metrics]
            done = subprocess.run(command, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"failed: {' '.join(command)}\n{done.stdout}{done.stderr}")
            model_line = next((l for l in done.stdout.splitlines() if l.startswith("model:")), model_line)
            rows = [json.loads(line) for line in open(metrics)]
            windows = [r for r in rows if r["kind"] == "train"][1:]  # the first window is warm-up
            samples[(ranks, backend, ddp)].append({k: statistics.median(w[k] for w in windows)
                                                   for k in ("tokens_per_s", "step_ms", "backward_ms", "comm_ms")})

results = []
print(f"train_dp throughput, 1 thread per rank, micro-batch {args.batch_size}, median of {args.rounds} rounds; {model_line}")
print(f"{'ranks':>5} {'backend':>7} {'ddp':>9} {'tokens/s':>9} {'per rank':>9} {'step ms':>8} {'bwd ms':>7} "
      f"{'comm ms':>8} {'scaling':>8}")
for ranks, backend, ddp in configs:
    med = {k: statistics.median(s[k] for s in samples[(ranks, backend, ddp)]) for k in samples[(ranks, backend, ddp)][0]}
    one = statistics.median(s["tokens_per_s"] for s in samples[(1, backend, ddp)])
    efficiency = med["tokens_per_s"] / (ranks * one)
    results.append(dict(ranks=ranks, backend=backend, ddp=ddp, efficiency=efficiency, **med))
    print(f"{ranks:>5} {backend:>7} {ddp:>9} {med['tokens_per_s']:>9.0f} {med['tokens_per_s'] / ranks:>9.0f} "
          f"{med['step_ms']:>8.1f} {med['backward_ms']:>7.1f} {med['comm_ms']:>8.2f} {efficiency:>7.0%}")
if args.json:
    json.dump(results, open(args.json, "w"), indent=1)
