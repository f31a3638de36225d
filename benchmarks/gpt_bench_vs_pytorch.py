#!/usr/bin/env python3
"""nanodist's GPT against PyTorch (nanoGPT's model on Debian's python3-torch, eager,
float32), same config, same machine, one invocation, runs interleaved round by round so
both see the same machine conditions. Reports the median ms/step of each and the ratio.

Fair to both (benchmarks/fair_settings.py): OPENBLAS_CORETYPE is unset on both sides (these
machines set it to Haswell; users don't), and PyTorch runs with every thread setting a user
would try — OpenMP threads and OpenBLAS threads separately, 1 or all cores each; the fastest
counts as its result.

  /usr/bin/python3 benchmarks/gpt_bench_vs_pytorch.py                 # presets a and b
  /usr/bin/python3 benchmarks/gpt_bench_vs_pytorch.py --presets a --rounds 5
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
parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds for preset a (b: 1)")
parser.add_argument("--binary", default=os.path.join(ROOT, "build", "benchmarks", "gpt_bench"))
args = parser.parse_args()

sys.path.insert(0, HERE)
from fair_settings import clean_env, torch_thread_settings  # noqa: E402

torch_script = os.path.join(HERE, "pytorch_gpt_bench.py")
variants = [("nanodist", [args.binary, "--json"], clean_env())]
for label, threads, env in torch_thread_settings():
    variants.append((f"pytorch, {label}", [sys.executable, torch_script, "--threads", str(threads)], env))

for preset in args.presets.split(","):
    rounds = args.rounds if preset == "a" else 1
    results = {name: [] for name, _, _ in variants}
    for r in range(rounds):
        for name, command, extra_env in variants:
            out = subprocess.run(command + ["--preset", preset], env=extra_env, check=True,
                                 capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            results[name].append(row["ms_per_step"])
            print(f"  preset {preset} round {r + 1}: {name:32s} {row['ms_per_step']:9.2f} ms/step", flush=True)
    tokens = {"a": 12 * 64, "b": 64 * 256}[preset]
    medians = {name: statistics.median(v) for name, v in results.items()}
    print(f"\npreset {preset} ({tokens} tokens/step), median over {rounds} round(s):")
    print(f"  {'implementation':36s} {'ms/step':>9s} {'tokens/s':>9s}")
    for name, ms in medians.items():
        print(f"  {name:36s} {ms:9.2f} {tokens / ms * 1e3:9.0f}")
    best_torch = min((ms, name) for name, ms in medians.items() if name != "nanodist")
    ratio = best_torch[0] / medians["nanodist"]
    target = {"a": 2.0, "b": 1.5}[preset]
    print(f"  speed-up over the best PyTorch setting ({best_torch[1]}): {ratio:.2f}x  (target {target}x)\n")
