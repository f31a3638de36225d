#!/usr/bin/env python3
"""The main job in fp32 and in bf16 (--precision), side by side: its loss curves on one plot,
and for each precision the wall time from launch to exit, the val loss at every evaluation,
val_loss_full, and when the val loss first reached the target (1.88: the step, and the
seconds since training began) — the measurement that
decides the main job's precision (docs/nn.md, "Mixed precision").

    python3 benchmarks/precision_loss_curves.py [--data-dir data] [--out docs/precision_loss.png]

Each precision runs --rounds times, interleaved; the curves are the first round's (the runs
are deterministic), the times are medians. Needs python3-matplotlib for the plot.
"""
import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
from fair_settings import clean_env  # noqa: E402
from pyplot import pyplot  # noqa: E402

plt = pyplot()  # first: without matplotlib here it re-runs this script under Debian's python3

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--train-dp", default=os.path.join(ROOT, "build", "trainers", "train_dp"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--target", type=float, default=1.88)
parser.add_argument("--eval-interval", type=int, default=100)
parser.add_argument("--out", default=os.path.join(ROOT, "docs", "precision_loss.png"))
args = parser.parse_args()

env = clean_env()
env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
precisions = ["fp32", "bf16"]
walls = {p: [] for p in precisions}
curves, finals = {}, {}
with tempfile.TemporaryDirectory() as tmp:
    for round_ in range(args.rounds):
        for precision in precisions:
            out_dir = os.path.join(tmp, f"{precision}_{round_}")
            metrics = os.path.join(out_dir, "metrics.csv")
            start = time.perf_counter()
            done = subprocess.run(["mpiexec", "-n", "2", args.train_dp, "--data-dir", args.data_dir, "--out-dir", out_dir,
                                   "--precision", precision, "--eval-interval", str(args.eval_interval),
                                   "--metrics", metrics, "--sample-tokens", "0"],
                                  env=env, capture_output=True, text=True)
            walls[precision].append(time.perf_counter() - start)
            if done.returncode != 0:
                sys.exit(f"train_dp --precision {precision} failed:\n{done.stdout}{done.stderr}")
            print(f"round {round_ + 1}: {precision} {walls[precision][-1]:.2f} s", flush=True)
            if round_ == 0:
                rows = list(csv.DictReader(open(metrics)))
                curves[precision] = rows
                finals[precision] = float(re.search(r"val_loss_full=([\d.]+)", done.stdout).group(1))

print(f"\n| precision | val loss at each evaluation (every {args.eval_interval} steps) | first ≤ {args.target} | "
      f"val_loss_full | wall time, median of {args.rounds} |")
print("| --- | --- | --- | --- | --- |")
for precision in precisions:
    evals = [(int(float(r["step"])), float(r["val_loss"]), float(r["elapsed_s"]))
             for r in curves[precision] if r["kind"] == "eval"]
    reached = next((f"step {step}, {elapsed:.1f} s" for step, loss, elapsed in evals if loss <= args.target),
                   "not reached")
    print(f"| {precision} | {' / '.join(f'{loss:.3f}' for _, loss, _ in evals)} | {reached} | {finals[precision]:.6f} | "
          f"{statistics.median(walls[precision]):.2f} s |")

figure, axes = plt.subplots(figsize=(7, 4))
for precision, colour in zip(precisions, ["tab:blue", "tab:orange"]):
    train = [(float(r["step"]), float(r["loss"])) for r in curves[precision] if r["kind"] == "train"]
    evals = [(float(r["step"]), float(r["val_loss"])) for r in curves[precision] if r["kind"] == "eval"]
    axes.plot(*zip(*train), color=colour, alpha=0.5, label=f"{precision} train (logged)")
    axes.plot(*zip(*evals), "o-", color=colour, label=f"{precision} val ({statistics.median(walls[precision]):.1f} s)")
axes.axhline(args.target, color="grey", linestyle=":", label=f"target {args.target}")
axes.set_xlabel("step")
axes.set_ylabel("loss")
axes.set_title("the main job in fp32 and bf16 (2 ranks)")
axes.legend()
figure.tight_layout()
figure.savefig(args.out, dpi=110)
print(f"wrote {args.out}")
