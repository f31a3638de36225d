#!/usr/bin/env python3
"""Pipeline parallelism measured: tokens/s, the bubble (measured and by the formula), each
stage's peak activation memory and what rank 0 sends on the pipeline per step, for P = 1, 2, 4
stages × M = 1, 4, 8, 16 micro-batches × GPipe and 1F1B (× --virtual-stages V: interleaved
1F1B for V > 1), side by side in one invocation.

    python3 benchmarks/train_pp_bench.py [--steps 12] [--data-dir data]
    python3 benchmarks/train_pp_bench.py --stages 2 --micro-batches 4,8 --virtual-stages 1,2,4 --n-layer 8

The model has --n-layer blocks (default 4; 128 wide, 4 heads, block 64) and a batch of 16
sequences per step; each configuration trains --steps steps and the second half is measured.
On a 2-core machine 4 stages share 2 cores: read docs/pipeline_parallel.md for what that
distorts."""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fair_settings import clean_env  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--train-pp", default=os.path.join(ROOT, "build", "trainers", "train_pp"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--stages", default="1,2,4")
parser.add_argument("--micro-batches", default="1,4,8,16")
parser.add_argument("--virtual-stages", default="1", help="chunks per stage V, e.g. 1,2,4 (V > 1 needs P ≥ 2, P | M)")
parser.add_argument("--n-layer", type=int, default=4)
args = parser.parse_args()

BUBBLE = re.compile(r"bubble (\d+)% measured \(stages ([^)]*)\), (\d+)% by the formula .*peak activations (.*) \| "
                    r"(?:chunk )?micro-batches in flight ≤ (.*)$")
PP_SENT = re.compile(r"pp group: ([^·]*)")  # "1 send (0.1 MB), 4 sendrecv (0.4 MB)": what rank 0 sent


def pp_megabytes(output):
    for line in output.splitlines():
        if line.startswith("communication per training step") and (m := PP_SENT.search(line)):
            return sum(float(mb) for kind, mb in re.findall(r"\d+ (send|sendrecv) \(([0-9.]+) MB\)", m.group(1)))
    return 0.0



rows = []
with tempfile.TemporaryDirectory() as tmp:
    for P, M, V, schedule in itertools.product([int(p) for p in args.stages.split(",")],
                                               [int(m) for m in args.micro_batches.split(",")],
                                               [int(v) for v in args.virtual_stages.split(",")], ["gpipe", "1f1b"]):
        if V > 1 and (P < 2 or M % P != 0 or P * V > args.n_layer):
            continue  # a layout interleaving cannot run
        metrics = os.path.join(tmp, f"m{P}{M}{V}{schedule}.jsonl")
        command = ["mpiexec", "-n", str(P), args.train_pp, "--data-dir", args.data_dir, "--out-dir", tmp,
                   "--n-layer", str(args.n_layer), "--batch-size", "16", "--micro-batches", str(M), "--schedule", schedule,
                   "--virtual-stages", str(V),
                   "--max-iters", str(args.steps), "--log-interval", str(args.steps // 2), "--eval-interval", "0",
                   "--eval-iters", "1", "--no-full-val", "--sample-tokens", "0", "--metrics", metrics, "--threads", "1"]
        done = subprocess.run(command, env=clean_env(), capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"failed: {' '.join(command)}\n{done.stdout}{done.stderr}")
        windows = [json.loads(line) for line in open(metrics)]
        last = [w for w in windows if w["kind"] == "train"][-1]
        bubble = [BUBBLE.search(line) for line in done.stdout.splitlines()]
        bubble = [b for b in bubble if b][-1]
        rows.append((P, M, V, schedule, last["tokens_per_s"], int(bubble.group(1)), int(bubble.group(3)),
                     bubble.group(4), bubble.group(5), pp_megabytes(done.stdout)))
        print(f"P={P} M={M:2d} V={V} {schedule:5s}: {last['tokens_per_s']:7.0f} tok/s, bubble {bubble.group(1)}% "
              f"(formula {bubble.group(3)}%), peak activations {bubble.group(4)}", flush=True)

print("\n| P | M | V | schedule | tokens/s | bubble measured | bubble formula | peak activations per stage | "
      "in flight per stage | rank 0 sends on pp per step |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for P, M, V, schedule, tps, measured, formula, memory, flight, sent in rows:
    print(f"| {P} | {M} | {V} | {schedule} | {tps:,.0f} | {measured}% | {formula}% | {memory} | {flight} | "
          f"{sent:.2f} MB |")
