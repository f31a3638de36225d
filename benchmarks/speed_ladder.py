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
  5 fused elementwise kernels         --fusion fused: each residual add inside the next
                                      layernorm's pass (torch.compile's rung)
  6 padded vocabulary                 65 → 128 ("nice numbers")
  7 fused AdamW                       --adamw fused: every parameter in one pass
  8 2 ranks, bf16 gradients           train_dp on 2 ranks × 1 thread with --grad-comm bf16, against
                                      the same 2-rank run with fp32 gradients (the rung's own base)

Rungs 1-4 run with --fusion separate --adamw per-tensor, the state before rungs 5 and 7.
Rungs 1-7 run gpt_bench in one process on every core; rung 8 runs train_dp on the real text.
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


before_fusion = ["--fusion", "separate", "--adamw", "per-tensor"]
bf16 = ["--precision", "bf16"]
rungs = [
    ("1 naive attention, fp32, Eigen", lambda: bench(["--attention", "naive"] + before_fusion, "eigen")),
    ("2 fused attention", lambda: bench(before_fusion, "eigen")),
    ("3 engine chosen by the CPU (fp32)", lambda: bench(before_fusion)),
    ("4 bf16 matrix multiplies", lambda: bench(bf16 + before_fusion)),
    ("5 fused elementwise kernels", lambda: bench(bf16 + ["--adamw", "per-tensor"])),
    ("6 padded vocabulary (65 -> 128)", lambda: bench(bf16 + ["--adamw", "per-tensor", "--vocab", "128"])),
    ("7 fused AdamW", lambda: bench(bf16 + ["--vocab", "128"])),
    ("8a 2 ranks, fp32 gradients (base)", lambda: two_ranks("fp32")),
    ("8 2 ranks, bf16 gradients", lambda: two_ranks("bf16")),
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
    if name.startswith("8a"):
        ratio = "(rung 8's base: 2 processes × 1 thread)"
    else:
        ratio = "" if previous is None else f"{median / previous:.2f}×"
    print(f"| {name} | {median:.0f} | {ratio} |")
    previous = median
