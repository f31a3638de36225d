#!/usr/bin/env python3
"""DP, TP, PP, TP with sequence parallelism and their mixes on one model, side by side in one
invocation: tokens/s, bytes each rank sends per step, and what the largest rank holds
(parameters, gradients, optimizer state, activations).

    python3 benchmarks/parallelism_bench.py [--ranks 2,4] [--backends mpi,shm] [--steps 12] [--repeats 3]

One model (4 blocks, 4 heads, 128 wide, block 64) and one global batch (16 sequences per
step) for every strategy; each run trains --steps steps and its second half is measured;
the repeats run the strategies in turn (a slow moment of the machine hits all alike) and the
table gives medians. Each strategy runs on its own program with its best setting: DP is
train_dp (bucketed all-reduce overlapped with the backward), PP is train_pp with 1F1B and
micro-batches of 2 sequences, TP is train_tp; DP × PP is train_pp --dp 2 (whose replicas
overlap their gradient all-reduce with the backward; train_3d's do not), the mixes with
TP are train_3d (1F1B, micro-batches of 2 sequences when there is a pipeline). Bytes: what rank 0's communicators moved per step (the
trainers' "communication per training step" line), turned into bytes sent per rank with the
ring-optimal factors (all-reduce 2(n−1)/n of its buffer, all-gather and reduce-scatter
(n−1)/n, point-to-point 1). Compute and communication are rank 0's phase times; on a machine
with fewer cores than ranks the last column estimates a core per rank (compute scaled by
cores / ranks, communication as measured). docs/3d_parallelism.md reads the numbers."""
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
from fair_settings import CORES, clean_env  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--build", default=os.path.join(ROOT, "build", "trainers"))
parser.add_argument("--data-dir", default=os.path.join(ROOT, "data"))
parser.add_argument("--ranks", default="2,4")
parser.add_argument("--backends", default="mpi", help="comma-separated: every strategy runs on each")
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--repeats", type=int, default=3)
args = parser.parse_args()

BATCH = 16  # sequences per step, for every strategy
MODEL = ["--n-layer", "4", "--n-head", "4", "--n-embd", "128", "--block-size", "64"]


def strategies(n):
    """(name, program, extra flags, {group: size}) for n ranks."""
    half = n // 2
    s = [
        ("DP", "train_dp", ["--batch-size", str(BATCH // n)], {"world": n}),
        ("DP ZeRO-3", "train_dp", ["--batch-size", str(BATCH // n), "--zero", "3"], {"world": n}),
        ("TP", "train_tp", ["--batch-size", str(BATCH)], {"tp": n}),
        ("TP + SP", "train_tp", ["--batch-size", str(BATCH), "--sequence-parallel"], {"tp": n}),
        ("PP", "train_pp", ["--batch-size", str(BATCH), "--micro-batches", "8"], {"pp": n, "dp": 1}),
    ]
    if n == 4:
        s += [
            ("DP 2 × TP 2", "train_3d", ["--dp", "2", "--tp", "2", "--batch-size", "8", "--micro-batches", "1"],
             {"tp": 2, "pp": 1, "dp": 2}),
            ("DP 2 × PP 2", "train_pp", ["--dp", "2", "--batch-size", "8", "--micro-batches", "4"],
             {"pp": 2, "dp": 2}),
            ("TP 2 × PP 2", "train_3d", ["--tp", "2", "--pp", "2", "--batch-size", str(BATCH), "--micro-batches", "8"],
             {"tp": 2, "pp": 2, "dp": 1}),
            ("TP 2 + SP × PP 2", "train_3d",
             ["--tp", "2", "--pp", "2", "--sequence-parallel", "--batch-size", str(BATCH), "--micro-batches", "8"],
             {"tp": 2, "pp": 2, "dp": 1}),
        ]
    assert all(sizes.get("world", 1) * sizes.get("tp", 1) * sizes.get("pp", 1) * sizes.get("dp", 1) == n
               for _, _, _, sizes in s)
    return s


UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
MEMORY = re.compile(r"memory rank (\d+) \(allocator\): parameters ([\d.]+ \w+), gradients ([\d.]+ \w+), "
                       r"optimizer ([\d.]+ \w+) = .*?; step peak [\d.]+ \w+, ([\d.-]+ \w+) above")
TRAFFIC = re.compile(r"communication per training step, rank 0: (.*)$", re.M)
CALLS = re.compile(r"(\d+) (\w+) \(([\d.]+) MB\)")
FACTOR = {"allreduce": lambda n: 2 * (n - 1) / n, "allgather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "send": lambda n: 1, "sendrecv": lambda n: 1,
          "broadcast": lambda n: 1, "recv": lambda n: 0}


def size_of(text):
    number, unit = text.split()
    return float(number) * UNITS[unit]


def human(b):
    for unit in ("GiB", "MiB", "KiB"):
        if abs(b) >= UNITS[unit]:
            return f"{b / UNITS[unit]:.2f} {unit}"
    return f"{b:.0f} B"


def sent_per_step(output, sizes):
    """MB rank 0 sends per step, from the trainer's communication line."""
    line = TRAFFIC.search(output).group(1)
    total = 0.0
    for part in line.split(" · "):
        group = part.split(" group:")[0]
        for calls, kind, mb in CALLS.findall(part):
            total += float(mb) * FACTOR.get(kind, lambda n: 1)(sizes[group])
    return total


def run(name, program, extra, sizes, n, backend, tmp):
    metrics = os.path.join(tmp, "metrics.jsonl")
    command = ["mpiexec", "-n", str(n), os.path.join(args.build, program), "--data-dir", args.data_dir,
               "--out-dir", tmp, *MODEL, *extra, "--max-iters", str(args.steps), "--log-interval",
               str(args.steps // 2), "--eval-interval", "0", "--eval-iters", "1", "--no-full-val", "--sample-tokens",
               "0", "--metrics", metrics, "--threads", "1", "--backend", backend]
    done = subprocess.run(command, env=clean_env(), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({name}): {' '.join(command)}\n{done.stdout}{done.stderr}")
    last = [json.loads(line) for line in open(metrics) if '"train"' in line][-1]
    compute_ms = last["forward_ms"] + last["backward_ms"] + last["optimizer_ms"] + last["data_ms"]
    memory = [m.groups() for m in MEMORY.finditer(done.stdout)]
    held = max(memory, key=lambda m: size_of(m[1]) + size_of(m[2]) + size_of(m[3]))
    activations = max(size_of(m[4]) for m in memory)
    # With a core per rank, compute would run alone on its core: × min(1, cores / ranks) (an
    # estimate: waiting for a descheduled peer, counted as communication, would shrink too).
    projected_ms = compute_ms * min(1.0, CORES / n) + last["comm_ms"]
    return (last["tokens_per_s"], sent_per_step(done.stdout, sizes), held, activations, compute_ms, last["comm_ms"],
            BATCH * 64 / projected_ms * 1e3)


results = {}  # (n, name) -> [runs]
with tempfile.TemporaryDirectory() as tmp:
    for repeat in range(args.repeats):
        for n in [int(r) for r in args.ranks.split(",")]:
            for name, program, extra, sizes in strategies(n):
                for backend in args.backends.split(","):  # side by side: a slow moment hits both
                    r = run(name, program, extra, sizes, n, backend, tmp)
                    results.setdefault((n, name, backend), []).append(r)
                    print(f"repeat {repeat + 1}, {n} ranks, {name}, {backend}: {r[0]:,.0f} tok/s", file=sys.stderr,
                          flush=True)

print(f"# one model (4 blocks, 128 wide, 4 heads, block 64), {BATCH} sequences per step; medians of "
      f"{args.repeats} repeats of {args.steps} steps (second half measured)\n")
print("| ranks | strategy | backend | tokens/s | compute / comm per step | sent per rank per step | parameters | gradients | "
      "optimizer | activations peak | tokens/s, a core per rank (est.) |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for (n, name, backend), runs in results.items():
    tps = statistics.median(r[0] for r in runs)
    mb = statistics.median(r[1] for r in runs)
    held = runs[0][2]
    activations = statistics.median(r[3] for r in runs)
    compute = statistics.median(r[4] for r in runs)
    comm = statistics.median(r[5] for r in runs)
    projected = statistics.median(r[6] for r in runs)
    print(f"| {n} | {name} | {backend} | {tps:,.0f} | {compute:.1f} / {comm:.1f} ms | {mb:.2f} MB | {held[1]} | {held[2]} | "
          f"{held[3]} | {human(activations)} | {projected:,.0f} |")
