#!/usr/bin/env python3
"""torch.distributed.all_reduce (or all_to_all_single) on 2 ranks (or --ranks): gloo beside
nanodist (each backend underneath), 4 KB to 256 MB, in one run; GB/s and the ratio to gloo.
all_reduce: busbw (nccl-tests' 2(n-1)/n · S / t). all_to_all_single: S / t, the rate at which
each rank copies its whole S (its own block too, out of place), as the memcpy column does.

    python3 benchmarks/torch_allreduce_bench.py [--op all_reduce|all_to_all_single] [--ranks 2]
        [--backends default,mpi,shm] [--max-mb 256] [--repeats 10]

Each row is the median over --repeats timed calls (after 2 warm-up calls) of the slowest
rank. Runs `mpiexec -n 2` once per nanodist backend; gloo runs in each as the default group,
nanodist as a second group over the same ranks, alternating size by size. The memcpy column
is a tensor copy of the same size on both ranks at once (S / t): what the memory system gives
two processes, the line a shared-memory allreduce is measured against."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))


def worker(args):
    import torch
    import torch.distributed as dist
    import nanodist_torch  # noqa: F401

    rank, size = int(os.environ["OMPI_COMM_WORLD_RANK"]), int(os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=size)
    groups = {"gloo": dist.group.WORLD, "nanodist": dist.new_group(backend="nanodist")}
    rows = []
    nbytes = 4096
    while nbytes <= args.max_mb * 2**20:
        t = torch.ones(nbytes // 4)
        out = torch.empty_like(t)
        for name, group in groups.items():
            times = []
            for i in range(2 + args.repeats):
                dist.barrier(group=group)
                start = time.perf_counter()
                if args.op == "all_reduce":
                    dist.all_reduce(t, group=group)
                else:
                    dist.all_to_all_single(out, t, group=group)
                if i >= 2:
                    times.append(time.perf_counter() - start)
            slowest = torch.tensor([statistics.median(times)], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            rows.append({"impl": name, "bytes": nbytes, "seconds": slowest.item()})
        copy, times = torch.empty_like(t), []
        for i in range(2 + args.repeats):
            dist.barrier()
            start = time.perf_counter()
            copy.copy_(t)
            if i >= 2:
                times.append(time.perf_counter() - start)
        slowest = torch.tensor([statistics.median(times)], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        rows.append({"impl": "memcpy", "bytes": nbytes, "seconds": slowest.item()})
        nbytes *= 4
    if rank == 0:
        print(json.dumps(rows))
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--backends", default="default,mpi",
                        help="nanodist backends underneath ('default': no NANODIST_BACKEND, as a user starts it)")
    parser.add_argument("--op", choices=["all_reduce", "all_to_all_single"], default="all_reduce")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-mb", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_PORT="29771")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(here, "..", "build", "python"), env.get("PYTHONPATH", "")])
    table = {}
    for backend in args.backends.split(","):
        env.pop("NANODIST_BACKEND", None)
        if backend != "default":
            env["NANODIST_BACKEND"] = backend
        out = subprocess.run(["mpiexec", "--oversubscribe", "-n", str(args.ranks), "/usr/bin/python3",
                              os.path.abspath(__file__), "--worker", "--op", args.op, "--max-mb", str(args.max_mb),
                              "--repeats", str(args.repeats)],
                             env=env, check=True, capture_output=True, text=True).stdout
        rows = json.loads(out.strip().splitlines()[-1])
        for row in rows:
            key = row["impl"] if row["impl"] in ("gloo", "memcpy") else f"nanodist/{backend}"
            table.setdefault(row["bytes"], {}).setdefault(key, []).append(row["seconds"])
    columns = ["memcpy", "gloo"] + [f"nanodist/{b}" for b in args.backends.split(",")]
    print(f"{'size':>10} " + " ".join(f"{c + ' GB/s':>18}" for c in columns) + " " +
          " ".join(f"{c.split('/')[1] + '/gloo':>10}" for c in columns[2:]))
    for nbytes, cells in sorted(table.items()):
        n = args.ranks
        factor = {c: (2 * (n - 1) / n if args.op == "all_reduce" and c != "memcpy" else 1.0) for c in columns}
        busbw = {c: factor[c] * nbytes / min(cells[c]) / 1e9 for c in columns}
        size = f"{nbytes // 2**20} MB" if nbytes >= 2**20 else f"{nbytes // 1024} KB"
        print(f"{size:>10} " + " ".join(f"{busbw[c]:>18.2f}" for c in columns) + " " +
              " ".join(f"{busbw[c] / busbw['gloo']:>10.2f}" for c in columns[2:]))


if __name__ == "__main__":
    sys.exit(main())
