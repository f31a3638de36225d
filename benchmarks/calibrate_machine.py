#!/usr/bin/env python3
"""Measures this machine for `nanodist plan` with the project's own benchmarks and writes it as
a machine file (`nanodist plan --machine-file F`); the "this-cpu" preset is its output on these
2-core machines (planning/machine.cpp says when).

    python3 benchmarks/calibrate_machine.py [--out machine.json] [--backends mpi,ring,naive,shm]

  compute   gpt_bench --preset a --threads 1 --peak on every core at once (as mpiexec runs the
            trainers: one rank a core, all busy), at batch 12 and at batch 1: the GEMM peak a
            core; from the two step times (less AdamW's), the time a sequence takes and what a
            micro-batch costs whatever its size (a block's fixed overhead, forward + backward);
            the sequence's FLOPs over its time is the fraction of the peak the model's products
            reach (fp32 and bf16); AdamW's time a parameter
  network   comm_bench --op allreduce on 2 ranks, for each backend: α from the smallest message
            (a ring's 2(n−1) steps), the bus bandwidth from the largest; the first backend's
            (mpi, the trainers' default) is the node's link, the others `nanodist plan --backend`
  memory    /proc/meminfo's MemTotal, shared by the cores"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def gpt_bench(build, cores, precision, batch):
    cmd = ["mpiexec", "--oversubscribe", "-n", str(cores), os.path.join(build, "benchmarks", "gpt_bench"),
           "--preset", "a", "--threads", "1", "--peak", "--json", "--precision", precision, "--batch", str(batch),
           "--steps", "40"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV, check=True)
    runs = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if len(runs) != cores:
        sys.exit(f"calibrate_machine: expected {cores} JSON lines from {' '.join(cmd)}")
    return runs


def comm(build, backend):
    with tempfile.TemporaryDirectory() as tmp:
        table = os.path.join(tmp, "allreduce.csv")
        subprocess.run(["mpiexec", "--oversubscribe", "-n", "2", os.path.join(build, "benchmarks", "comm_bench"),
                        "--op", "allreduce", "--backend", backend, "-b", "8", "-e", "64M", "-f", "8", "--in-place",
                        "--csv", table], capture_output=True, text=True, env=ENV, check=True)
        with open(table) as f:
            rows = sorted((r for r in csv.DictReader(f)), key=lambda r: int(r["size_bytes"]))
    latency = float(rows[0]["time_us"]) * 1e-6 / 2  # a 2-rank ring: 2(n − 1) = 2 steps
    bus = statistics.median(float(r["busbw_GBps"]) for r in rows[-3:]) * 1e9
    return latency, bus


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    parser.add_argument("--backends", default="mpi,ring,naive,shm",
                        help="backends to measure; the first is the trainers' (default mpi,ring,naive,shm)")
    parser.add_argument("--out", help="write the machine file here (default: print it)")
    args = parser.parse_args()
    cores = os.cpu_count()
    median = lambda runs, key: statistics.median(r[key] for r in runs)  # noqa: E731
    blocks = 4  # preset a

    def compute(precision):
        """(peak FLOP/s, efficiency, a block's overhead per micro-batch, AdamW s a parameter)."""
        big, one = gpt_bench(args.build_dir, cores, precision, 12), gpt_bench(args.build_dir, cores, precision, 1)
        optimizer_s = median(big, "optimizer_ms") * 1e-3
        t12, t1 = median(big, "ms_per_step") * 1e-3 - optimizer_s, median(one, "ms_per_step") * 1e-3 - optimizer_s
        sequence_s = (t12 - t1) / 11  # t(b) = b·sequence + blocks·overhead
        overhead_s = max(0.0, (t1 - sequence_s) / blocks)
        flops_per_sequence = median(big, "gflops") * 1e9 * median(big, "ms_per_step") * 1e-3 / 12
        peak = median(big, "peak_gflops") * 1e9
        return peak, flops_per_sequence / sequence_s / peak, overhead_s, optimizer_s / big[0]["parameters"]

    fp32, bf16 = compute("fp32"), compute("bf16")
    backends = {name: comm(args.build_dir, name) for name in args.backends.split(",")}
    latency, bus = next(iter(backends.values()))
    with open("/proc/meminfo") as f:
        mem_total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal"))
    machine = {
        "name": "this-cpu",
        "source": f"{cores}-core CPU measured by benchmarks/calibrate_machine.py (gpt_bench on every core, "
                  f"comm_bench's allreduce on 2 ranks: {args.backends})",
        "devices_per_node": cores,
        "ranks_share_devices": True,
        "device_memory_bytes": mem_total / cores,
        "peak_flops_fp32": fp32[0],
        "peak_flops_bf16": bf16[0],
        "matmul_efficiency": fp32[1],
        "matmul_efficiency_bf16": bf16[1],
        "memory_bytes_per_s": 0,
        "block_overhead_s": fp32[2],  # fp32's: the overhead is the ops' dispatch, not their products
        "optimizer_seconds_per_parameter": fp32[3],
        "intra_node": {"latency_s": latency, "bytes_per_s": bus},
        "inter_node": {"latency_s": latency, "bytes_per_s": bus},
        "backends": {name: {"latency_s": a, "bytes_per_s": b} for name, (a, b) in backends.items()},
    }
    text = json.dumps(machine, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
