#!/usr/bin/env python3
"""The speed-up ladder on a CPU: one GPT-2-like configuration (preset b: 6 layers, 6 heads,
384 wide, block 256, batch 64) trained one rung at a time, as the GPT-2 notebook climbs its
GPU ladder (TF32, bf16 autocast, torch.compile, FlashAttention, nice numbers, fused AdamW).
Prints tokens/s per rung and the ratio to the rung before; docs/nn.md explains which rungs
transfer to a CPU and why.

  1 naive attention, fp32, Eigen      eager PyTorch's attention (separate ops) on the plain engine
  2 fused attention                   one kernel per head, one [B,H,T,T] tensor (FlashAttention's idea)
  3 engine chosen by the CPU          oneDNN / OpenBLAS / Eigen, whichever is fastest here (fp32)
  4 bf16 matrix multiplies            --precision bf16 on the CPU's AVX-512 BF16 units
  5 padded vocabulary                 65 → 128 ("nice numbers")
  6 2 ranks, bf16 gradients           train_dp on 2 ranks × 1 thread with --grad-comm bf16, against
                                      the same 2-rank run with fp32 gradients (the rung's own base)

Rungs 1-5 run gpt_bench in one process on every core; rung 6 runs train_dp on the real text.
Each rung runs --rounds times, interleaved; the median counts. OPENBLAS_CORETYPE is unset
(benchmarks/fair_settings.py), as on a user's machine.

  python3 benchmarks/speed_ladder.py [--rounds 3] [--data-dir data]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fair_settings import clean_env  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--build", default=os.path.join(ROOT, "build"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--steps", type=int, default=3, help="timed steps per gpt_bench run")
args = parser.parse_args()

gpt_bench = os.path.join(args.build, "benchmarks", "gpt_bench")
train_dp = os.path.join(args.build, "trainers", "train_dp")


def bench(flags, engine=None):
    env = clean_env()
    if engine:
        env["NANODIST_GEMM"] = engine
    out = subprocess.run([gpt_bench, "--preset", "b", "--json", "--steps", str(args.steps), "--warmup", "1"] + flags,
                         env=env, check=True, capture_output=True, text=True).stdout
    return float(re.search(r'"tokens_per_s": ([\d.]+)', out).group(1))


def two_ranks(grad_comm):
    env = clean_env()
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    out_dir = os.path.join(args.build, "speed_ladder_run")
    command = ["mpiexec", "--oversubscribe", "-n", "2", train_dp, "--data-dir", args.data_dir, "--out-dir", out_dir,
               "--n-layer", "6", "--n-head", "6", "--n-embd", "384", "--block-size", "256", "--batch-size", "32",
               "--max-iters", "6", "--log-interval", "3", "--eval-interval", "0", "--no-full-val",
               "--sample-tokens", "0", "--ckpt-interval", "0", "--precision", "bf16", "--grad-comm", grad_comm]
    out = subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout
    return float(re.findall(r"\| (\d+) tok/s", out)[-1])  # the last log line: steps 4-6


rungs = [
    ("1 naive attention, fp32, Eigen", lambda: bench(["--attention", "naive"], "eigen")),
    ("2 fused attention", lambda: bench([], "eigen")),
    ("3 engine chosen by the CPU (fp32)", lambda: bench([])),
    ("4 bf16 matrix multiplies", lambda: bench(["--precision", "bf16"])),
    ("5 padded vocabulary (65 -> 128)", lambda: bench(["--precision", "bf16", "--vocab", "128"])),
    ("6a 2 ranks, fp32 gradients (base)", lambda: two_ranks("fp32")),
    ("6 2 ranks, bf16 gradients", lambda: two_ranks("bf16")),
]
results = {name: [] for name, _ in rungs}
for r in range(args.rounds):
    for name, run in rungs:
        results[name].append(run())
        print(f"  round {r + 1}: {name:40s} {results[name][-1]:9.0f} tokens/s", flush=True)

print(f"\n| rung | tokens/s (median of {args.rounds}) | × the rung before |")
print("| --- | --- | --- |")
previous = None
for name, _ in rungs:
    median = statistics.median(results[name])
    if name.startswith("6a"):
        ratio = "(rung 6's base: 2 processes × 1 thread)"
    else:
        ratio = "" if previous is None else f"{median / previous:.2f}×"
    print(f"| {name} | {median:.0f} | {ratio} |")
    previous = median
