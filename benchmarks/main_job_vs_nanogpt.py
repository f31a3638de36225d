#!/usr/bin/env python3
"""The main job against nanoGPT, side by side in one invocation: wall-clock time to the end
of training and the exact val loss each reaches (val_loss_full, the same metric for both).

    /usr/bin/python3 benchmarks/main_job_vs_nanogpt.py [--data-dir data]

1. nanodist: `mpiexec -n 2 build/trainers/train_dp` with its default recipe (the main job).
2. nanoGPT:  its CPU recipe for this data (benchmarks/nanogpt_train.py: 4 layers, 4 heads,
   128 wide, block 64, batch 12, 2000 steps) on Debian's python3-torch.
Both read the same token files; each time is from launch to exit (start-up, training,
evaluations, the final exact val loss). Needs python3-torch (scripts/install_deps.sh --pytorch).

Fair to both (benchmarks/fair_settings.py): OPENBLAS_CORETYPE unset on both sides; nanoGPT
first runs --probe-iters steps under each thread setting (OpenMP × OpenBLAS threads), all
reported, and the full recipe then runs under the fastest. Both whole runs are repeated
--repeats times, alternating, and the median wall time of each counts."""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--train-dp", default=os.path.join(ROOT, "build", "trainers", "train_dp"))
parser.add_argument("--nanogpt-iters", type=int, default=2000)
parser.add_argument("--probe-iters", type=int, default=200, help="steps per thread setting when choosing nanoGPT's")
parser.add_argument("--repeats", type=int, default=3, help="whole runs of each, alternating; the median counts")
parser.add_argument("--train-dp-args", default="", help="more flags for train_dp (the test's short run: '--max-iters 20')")
args = parser.parse_args()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fair_settings import clean_env, torch_thread_settings  # noqa: E402


def timed(command, env=clean_env()):
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout}{done.stderr}")
    found = re.search(r"val_loss_full=([0-9.]+)", done.stdout)
    if not found:
        sys.exit(f"no val_loss_full in the output of {' '.join(command)}\n{done.stdout}")
    return seconds, float(found.group(1)), done.stdout


def main_job():
    with tempfile.TemporaryDirectory() as out:
        return timed(["mpiexec", "-n", "2", args.train_dp, "--data-dir", args.data_dir, "--out-dir", out]
                     + shlex.split(args.train_dp_args))


nanogpt = os.path.join(ROOT, "benchmarks", "nanogpt_train.py")
probes = []
for label, threads, env in torch_thread_settings():
    probe = timed([sys.executable, nanogpt, "--data-dir", args.data_dir, "--max-iters", str(args.probe_iters),
                   "--threads", str(threads), "--eval-interval", str(10 * args.probe_iters)], env)
    loop = float(re.search(r"trained \d+ steps in ([0-9.]+) s", probe[2]).group(1))
    probes.append((loop, label, threads, env))
    print(f"nanoGPT, {label}: {args.probe_iters} steps in {loop:.1f} s", flush=True)
_, best_label, best_threads, best_env = min(probes, key=lambda p: p[0])

# Both whole runs, alternating round by round so both see the same machine; medians of the times.
rounds_ours, rounds_theirs = [], []
for round_ in range(args.repeats):
    rounds_ours.append(main_job())
    print(f"round {round_ + 1}: nanodist main job done: {rounds_ours[-1][0]:.1f} s, "
          f"val_loss_full={rounds_ours[-1][1]:.4f}", flush=True)
    rounds_theirs.append(timed([sys.executable, nanogpt, "--data-dir", args.data_dir, "--max-iters",
                                str(args.nanogpt_iters), "--threads", str(best_threads)], best_env))
    print(f"round {round_ + 1}: nanoGPT CPU recipe done ({best_label}, its fastest): {rounds_theirs[-1][0]:.1f} s, "
          f"val_loss_full={rounds_theirs[-1][1]:.4f}", flush=True)
ours = (statistics.median(r[0] for r in rounds_ours), rounds_ours[0][1], rounds_ours[0][2])
theirs = (statistics.median(r[0] for r in rounds_theirs), rounds_theirs[0][1], rounds_theirs[0][2])
recipe = [line for line in ours[2].splitlines() if line.startswith(("model:", "global batch:", "compute:"))]
steps = re.findall(r"^step (\d+)/(\d+) \|", ours[2], re.MULTILINE)
trained = re.search(r"trained \d+ steps in ([0-9.]+) s", theirs[2])
print()
print(f"{'':28} {'wall s':>8} {'val_loss_full':>14}   (wall: median of {args.repeats} round(s); nanodist "
      f"{min(r[0] for r in rounds_ours):.1f}–{max(r[0] for r in rounds_ours):.1f} s, nanoGPT "
      f"{min(r[0] for r in rounds_theirs):.1f}–{max(r[0] for r in rounds_theirs):.1f} s)")
print(f"{'nanodist (mpiexec -n 2)':28} {ours[0]:>8.1f} {ours[1]:>14.4f}")
print(f"{'nanoGPT (PyTorch, 1 proc)':28} {theirs[0]:>8.1f} {theirs[1]:>14.4f}   [{best_label}]"
      + (f"   (its training loop alone, round 1: {trained.group(1)} s)" if trained else ""))
print(f"time ratio nanodist / nanoGPT: {ours[0] / theirs[0]:.2f}  (target ≤ 0.50 with val_loss_full ≤ 1.88)")
for line in recipe:
    print("nanodist", line)
if steps:
    print(f"nanodist steps: {steps[-1][1]}")
print(f"nanoGPT recipe: 4 layers, 4 heads, 128 wide, block 64, batch 12 = 768 tokens per step, "
      f"{args.nanogpt_iters} steps, fp32 (benchmarks/nanogpt_train.py)")
