#!/usr/bin/env python3
"""train_dp against PyTorch DDP, side by side in one invocation: the same model (the main
job's: 2 layers, 4 heads, 128 wide, block 64), the same micro-batch per rank (12), the same
optimizer, N = 1 and 2 processes on this machine; global tokens/s, medians over rounds run
interleaved.

    /usr/bin/python3 benchmarks/train_dp_vs_pytorch_ddp.py [--rounds 2] [--data-dir data] [--precision bf16]

nanodist: `mpiexec -n N train_dp` (its default bucketed overlap, mpi backend). PyTorch:
DistributedDataParallel over gloo (benchmarks/pytorch_ddp_train.py), under every thread
setting (OpenMP × OpenBLAS threads, each 1 or cores/N), the fastest counted; both sides in the
same precision (--precision bf16: nanodist's --precision bf16 against torch.autocast), both
without OPENBLAS_CORETYPE (benchmarks/fair_settings.py). Needs python3-torch."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fair_settings import clean_env, torch_thread_settings  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--train-dp", default=os.path.join(ROOT, "build", "trainers", "train_dp"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--ranks", default="1,2")
parser.add_argument("--steps", type=int, default=60)
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
args = parser.parse_args()


def run(command, env):
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout}{done.stderr}")
    return done.stdout


def nanodist(ranks, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    run(["mpiexec", "-n", str(ranks), args.train_dp, "--data-dir", args.data_dir, "--out-dir", tmp,
         "--max-iters", str(args.steps), "--log-interval", str(args.steps // 6), "--eval-interval", "0",
         "--eval-iters", "1", "--no-full-val", "--sample-tokens", "0", "--metrics", metrics, "--precision", args.precision], clean_env())
    windows = [json.loads(line) for line in open(metrics)]
    windows = [w for w in windows if w["kind"] == "train"][1:]  # the first window is warm-up
    return statistics.median(w["tokens_per_s"] for w in windows)


def pytorch(ranks, threads, env):
    out = run([sys.executable, os.path.join(HERE, "pytorch_ddp_train.py"), "--ranks", str(ranks), "--threads",
               str(threads), "--steps", str(args.steps - args.steps // 6), "--precision", args.precision], env)
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s"]


results = {}
with tempfile.TemporaryDirectory() as tmp:
    for round_ in range(args.rounds):
        for ranks in [int(r) for r in args.ranks.split(",")]:
            results.setdefault((ranks, "nanodist train_dp"), []).append(nanodist(ranks, tmp))
            print(f"round {round_ + 1}, {ranks} rank(s): nanodist {results[(ranks, 'nanodist train_dp')][-1]:.0f} tok/s",
                  flush=True)
            for label, threads, env in torch_thread_settings(processes=ranks):
                name = f"pytorch DDP, {label}"
                results.setdefault((ranks, name), []).append(pytorch(ranks, threads, env))
                print(f"round {round_ + 1}, {ranks} rank(s): {name} {results[(ranks, name)][-1]:.0f} tok/s", flush=True)

print(f"\n{args.precision}: global tokens/s, median over {args.rounds} round(s)")
print(f"{'ranks':>5}  {'implementation':36} {'tokens/s':>9}")
for ranks in sorted({r for r, _ in results}):
    rows = {name: statistics.median(v) for (r, name), v in results.items() if r == ranks}
    for name, value in rows.items():
        print(f"{ranks:>5}  {name:36} {value:>9.0f}")
    best = max((v, n) for n, v in rows.items() if n.startswith("pytorch"))
    print(f"{ranks:>5}  nanodist / best PyTorch ({best[1]}): {rows['nanodist train_dp'] / best[0]:.2f}x\n")
