#!/usr/bin/env python3
"""nanodist's GPT against PyTorch (nanoGPT's model on Debian's python3-torch, eager), in
fp32 and in bf16 (--precision bf16 against torch.autocast(cpu, bfloat16)), same config, same machine, one invocation, runs interleaved round by round so
both see the same machine conditions. Reports the median ms/step of each and the ratio.

Fair to both (benchmarks/fair_settings.py): OPENBLAS_CORETYPE is unset on both sides (these
machines set it to Haswell; users don't), and PyTorch runs with every thread setting a user
would try — OpenMP threads and OpenBLAS threads separately, 1 or all cores each; the fastest
counts as its result.

  /usr/bin/python3 benchmarks/gpt_bench_vs_pytorch.py                 # presets a and b
  /usr/bin/python3 benchmarks/gpt_bench_vs_pytorch.py --presets a --rounds 5 --precisions bf16
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--presets", default="a,b")
parser.add_argument("--precisions", default="fp32,bf16")
parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds for preset a (b: 1)")
parser.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "gpt_bench"))
args = parser.parse_args()

sys.path.insert(0, HERE)
from fair_settings import clean_env, torch_thread_settings  # noqa: E402

torch_script = os.path.join(HERE, "pytorch_gpt_bench.py")
# The speed-ups asked for: preset a's from issue 35 (this 2-core machine), preset b's from earlier issues.
TARGETS = {("a", "fp32"): 1.8, ("b", "fp32"): 2.2, ("a", "bf16"): 2.0, ("b", "bf16"): 2.0}

for precision in args.precisions.split(","):
    variants = [("nanodist", [args.binary, "--json", "--peak", "--precision", precision], clean_env())]
    for label, threads, env in torch_thread_settings():
        variants.append((f"pytorch, {label}", [sys.executable, torch_script, "--threads", str(threads),
                                               "--precision", precision], env))
    for preset in args.presets.split(","):
        rounds = args.rounds if preset == "a" else 1
        results = {name: [] for name, _, _ in variants}
        gflops, peaks = [], []
        for r in range(rounds):
            for name, command, extra_env in variants:
                out = subprocess.run(command + ["--preset", preset], env=extra_env, check=True,
                                     capture_output=True, text=True).stdout
                row = json.loads(out.strip().splitlines()[-1])
                results[name].append(row["ms_per_step"])
                if name == "nanodist":
                    gflops.append(row["gflops"])
                    peaks.append(row["peak_gflops"])
                print(f"  {precision} preset {preset} round {r + 1}: {name:32s} {row['ms_per_step']:9.2f} ms/step",
                      flush=True)
        tokens = {"a": 12 * 64, "b": 64 * 256}[preset]
        medians = {name: statistics.median(v) for name, v in results.items()}
        print(f"\n{precision}, preset {preset} ({tokens} tokens/step), median over {rounds} round(s):")
        print(f"  {'implementation':36s} {'ms/step':>9s} {'tokens/s':>9s}")
        for name, ms in medians.items():
            print(f"  {name:36s} {ms:9.2f} {tokens / ms * 1e3:9.0f}")
        if gflops:
            g, p = statistics.median(gflops), statistics.median(peaks)
            print(f"  nanodist: {g:.0f} GFLOP/s, {100 * g / p:.0f}% of this machine's {precision} GEMM peak "
                  f"({p:.0f} GFLOP/s, a 2048^3 product)")
        best_torch = min((ms, name) for name, ms in medians.items() if name != "nanodist")
        ratio = best_torch[0] / medians["nanodist"]
        print(f"  speed-up over the best PyTorch setting ({best_torch[1]}): {ratio:.2f}x  "
              f"(target {TARGETS[(preset, precision)]}x)\n")
