#!/usr/bin/env python3
"""What a lost rank and periodic checkpoints cost, on the main job's model (train_dp's defaults,
2 ranks, tiny Shakespeare), side by side in one invocation:

    python3 benchmarks/elastic_bench.py [--repeats 3] [--data-dir data] [--markdown]

1. A rank killed (SIGKILL, --crash-at-step) under nanodist-run: seconds from the failure (the
   watchdog's report) to the first step again, and finished steps lost — replicated (a survivor
   saves the last completed step) and ZeRO-1 (sharded: the last checkpoint, every 10 steps).
2. Checkpoints every 1, 10 and 100 steps, in the background (a snapshot, then a thread writes
   it) and in the step (--ckpt-background 0): the wall time of the step after a checkpoint
   against the median step without one, and the whole run's time per step against no
   checkpoints. Wall time per step is the difference of the metrics' elapsed_s, which
   includes the checkpoint's own work.
Every figure is the median over --repeats runs."""
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
parser.add_argument("--build", default=os.path.join(ROOT, "build"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--steps", type=int, default=400, help="steps of each checkpoint-cost run")
parser.add_argument("--markdown", action="store_true")
args = parser.parse_args()

TRAIN_DP = os.path.join(args.build, "trainers", "train_dp")
LAUNCHER = os.path.join(ROOT, "launcher", "nanodist-run")
QUIET = ["--data-dir", args.data_dir, "--eval-interval", "0", "--eval-iters", "1", "--no-full-val",
         "--sample-tokens", "0", "--log-interval", "1"]
RESTART = re.compile(r"restart 1/\d+: .*?(\d+) finished step\(s\) lost .*first step again ([0-9.]+) s after the failure")


def run(command, env=None):
    done = subprocess.run(command, env=env or clean_env(), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(command)}\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def restart_cost(tmp, extra):
    """(seconds from the failure to the first step again, finished steps lost), one run."""
    out = os.path.join(tmp, "restart")
    subprocess.run(["rm", "-rf", out])
    text = run([LAUNCHER, "-n", "2", TRAIN_DP, *QUIET, "--max-iters", "60", "--ckpt-interval", "10",
                "--crash-at-step", "37", "--crash-rank", "1", "--out-dir", out, *extra])
    m = RESTART.search(text)
    if not m:
        sys.exit(f"no restart line in:\n{text}")
    return float(m.group(2)), int(m.group(1))


def step_walls(tmp, interval, background):
    """Wall seconds of each step (from the metrics' elapsed_s), one run."""
    out, metrics = os.path.join(tmp, "ckpt"), os.path.join(tmp, "m.jsonl")
    subprocess.run(["rm", "-rf", out, metrics])
    run(["mpiexec", "-n", "2", TRAIN_DP, *QUIET, "--max-iters", str(args.steps), "--ckpt-interval", str(interval),
         "--ckpt-background", "1" if background else "0", "--out-dir", out, "--metrics", metrics])
    rows = [json.loads(line) for line in open(metrics) if '"train"' in line]
    elapsed = {r["step"]: r["elapsed_s"] for r in rows}
    return {s: elapsed[s] - elapsed[s - 1] for s in elapsed if s - 1 in elapsed}


def median(values):
    return statistics.median(values) if values else float("nan")


with tempfile.TemporaryDirectory() as tmp:
    restarts = {}
    for name, extra in (("replicated (survivor saves)", []), ("ZeRO-1 (last checkpoint)", ["--zero", "1"])):
        costs = [restart_cost(tmp, extra) for _ in range(args.repeats)]
        restarts[name] = (median([c[0] for c in costs]), median([c[1] for c in costs]))

    warm = 5  # the first steps warm caches and threads up
    baseline = [median([w for s, w in step_walls(tmp, 0, True).items() if s > warm]) for _ in range(args.repeats)]
    base = median(baseline)
    costs = []
    for interval in (1, 10, 100):
        for background in (True, False):
            # The steps of every repeat pooled: every 100 steps gives only a few "after" steps a run.
            after, plain, whole = [], [], []
            for _ in range(args.repeats):
                walls = step_walls(tmp, interval, background)
                steps = [s for s in walls if s > warm]
                after += [walls[s] for s in steps if (s - 1) % interval == 0]
                plain += [walls[s] for s in steps if (s - 1) % interval != 0]
                whole.append(median([walls[s] for s in steps]))
            costs.append((interval, background, median(after), median(plain) if plain else base, median(whole)))

rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
print(f"elastic_bench: train_dp's main-job model on 2 ranks, median of {args.repeats} runs (commit {rev})")
if args.markdown:
    print("\n| kill -9 of rank 1 at step 37 | failure → first step again | finished steps lost |\n|---|---|---|")
    for name, (seconds, lost) in restarts.items():
        print(f"| {name} | {seconds:.1f} s | {lost:g} |")
    print(f"\n| checkpoint every | written | step after a checkpoint | other steps | vs none ({base * 1e3:.1f} ms) |"
          "\n|---|---|---|---|---|")
    for interval, background, after, plain, whole in costs:
        print(f"| {interval} | {'background' if background else 'in the step'} | {after * 1e3:.1f} ms "
              f"({after / plain - 1:+.0%}) | {plain * 1e3:.1f} ms | {whole / base - 1:+.0%} per step |")
else:
    for name, (seconds, lost) in restarts.items():
        print(f"restart, {name}: {seconds:.1f} s from the failure to the first step again, {lost:g} steps lost")
    print(f"steps without checkpoints: {base * 1e3:.1f} ms")
    for interval, background, after, plain, whole in costs:
        print(f"every {interval:3d}, {'background' if background else 'in step  '}: step after a checkpoint "
              f"{after * 1e3:.1f} ms ({after / plain - 1:+.0%} vs {plain * 1e3:.1f} ms), "
              f"whole run {whole / base - 1:+.0%} per step")
