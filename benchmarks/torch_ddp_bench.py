#!/usr/bin/env python3
"""PyTorch DDP training steps on 2 ranks, gloo beside nanodist, in one run: the main job's
model with twice its layers (4 layers, 128 wide, block 64, batch 12 per rank), the same model at batch 2 per rank
("main-b2": less compute for the same gradients, so communication is a visible part of the
step) and preset b (6 layers, 384 wide, block 256, batch 32 per rank), each side at 1 thread
per rank (2 ranks on 2 cores).

nanodist runs as a user starts it (no NANODIST_BACKEND: its default), on mpi and on shm
underneath, and once more on shm with the communication
thread's overlap turned off (NANODIST_TORCH_OVERLAP=0: each all_reduce returns when done).
"comm" is the time the communication thread spent in collectives per step; "hidden" is the
part of it the overlap took off the step: (step without overlap − step with) / comm.

    python3 benchmarks/torch_ddp_bench.py [--repeats 3] [--configs main,main-b2,b] [--sides gloo,...]

The sides run in rounds (each once per round), and each cell is the median of its rounds."""
import argparse
import json
import os
import statistics
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
CONFIGS = {"main": ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64", "--batch-size", "12",
                    "--steps", "40", "--warmup", "5"],
           "main-b2": ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64", "--batch-size",
                       "2", "--steps", "60", "--warmup", "5"],
           "b": ["--n-layer", "6", "--n-head", "6", "--n-embd", "384", "--block-size", "256", "--batch-size", "32",
                 "--steps", "4", "--warmup", "1"]}
# (name, backend, environment: None removes the variable — "default" is nanodist as a user
# starts it, with no NANODIST_BACKEND)
SIDES = [("gloo", "gloo", {}), ("nanodist (default)", "nanodist", {"NANODIST_BACKEND": None}),
         ("nanodist/mpi", "nanodist", {"NANODIST_BACKEND": "mpi"}),
         ("nanodist/shm", "nanodist", {"NANODIST_BACKEND": "shm"}),
         ("nanodist/shm, no overlap", "nanodist", {"NANODIST_BACKEND": "shm", "NANODIST_TORCH_OVERLAP": "0"})]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell; the median counts")
    parser.add_argument("--configs", default="main,main-b2,b")
    parser.add_argument("--sides", default=None, help="only these sides, by name (e.g. 'gloo,nanodist (default)')")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("OPENBLAS_CORETYPE", None)  # both sides with the CPU's own kernels (DESIGN.md)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(here, "..", "build", "python"), env.get("PYTHONPATH", "")])
    port = 29800
    sides = [side for side in SIDES if args.sides is None or side[0] in args.sides.split(",")]
    for config in args.configs.split(","):
        runs = {name: [] for name, _, _ in sides}
        for _ in range(args.repeats):  # rounds: each side once per round, so a slow minute hits all sides
            for name, backend, extra in sides:
                port += 1
                side_env = {k: v for k, v in dict(env, **extra).items() if v is not None}
                out = subprocess.run(["/usr/bin/python3", os.path.join(here, "pytorch_ddp_train.py"), "--ranks", "2",
                                      "--threads", "1", "--backend", backend, "--port", str(port)] + CONFIGS[config],
                                     env=side_env, check=True, capture_output=True, text=True).stdout
                runs[name].append(json.loads(out.strip().splitlines()[-1]))
        results = {name: {"step_ms": statistics.median(r["step_ms"] for r in runs[name]),
                          "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs[name]),
                          "comm_ms": statistics.median(r["comm_ms_per_step"] for r in runs[name])}
                   for name in runs}
        gloo = results["gloo"]["tokens_per_s"]
        print(f"\n{config}: median of {args.repeats} runs, 2 ranks × 1 thread")
        print(f"{'':>26} {'step ms':>9} {'tokens/s':>10} {'/ gloo':>7} {'comm ms':>8}")
        for name, r in results.items():
            comm = f"{r['comm_ms']:.1f}" if name != "gloo" else "-"
            print(f"{name:>26} {r['step_ms']:>9.1f} {r['tokens_per_s']:>10.0f} {r['tokens_per_s'] / gloo:>7.2f} {comm:>8}")
        on, off = results.get("nanodist/shm"), results.get("nanodist/shm, no overlap")
        if on and off and off["comm_ms"] > 0:
            print(f"{'hidden by the overlap':>26} {100 * (off['step_ms'] - on['step_ms']) / off['comm_ms']:.0f} % of "
                  f"{off['comm_ms']:.1f} ms of communication per step")


if __name__ == "__main__":
    sys.exit(main())
