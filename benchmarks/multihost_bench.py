#!/usr/bin/env python3
"""comm_bench across two hosts beside the same on one host: 4 ranks, --compare mpi,ring,shm,
in one invocation, repeated, medians reported. Across the hosts, shm's allreduce is the
hierarchical one (docs/allreduce.md): shared memory in each host, a ring between them.

    sudo python3 benchmarks/multihost_bench.py [--op allreduce] [-b 1K] [-e 64M] [--repeats 3]

Three placements of the same 4 ranks:
  one host, shared memory   plain mpiexec: ranks talk through /dev/shm (OpenMPI's vader)
  one host, TCP loopback    the same, told to use TCP only (--mca btl self,tcp)
  two hosts, TCP over veth  scripts/two_hosts.sh: 2 ranks on each namespace "host"
Each repeat runs the three in turn (interleaved, so a slow moment of the machine hits all
alike); the table gives, per message size, the median busbw over the repeats. Needs root
(the namespaces), like scripts/two_hosts.sh."""
import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from fair_settings import clean_env  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--comm-bench", default=os.path.join(ROOT, "build", "benchmarks", "comm_bench"))
parser.add_argument("--op", default="allreduce")
parser.add_argument("-b", "--begin", default="1K")
parser.add_argument("-e", "--end", default="64M")
parser.add_argument("-f", "--factor", default="8")
parser.add_argument("--repeats", type=int, default=3)
parser.add_argument("--wire", default="16M", help="allreduce size whose bytes on the wire are counted ('' = skip)")
args = parser.parse_args()

TWO_HOSTS = os.path.join(ROOT, "scripts", "two_hosts.sh")
BENCH = [args.comm_bench, "--op", args.op, "--compare", "mpi,ring,shm", "-b", args.begin, "-e", args.end,
         "-f", args.factor, "-n", "10", "-w", "2"]
PLACEMENTS = {
    "one host, shared memory": lambda out: ["mpiexec", "-n", "4", *BENCH, "--csv", out],
    "one host, TCP loopback": lambda out: ["mpiexec", "--mca", "btl", "self,tcp", "-n", "4", *BENCH, "--csv", out],
    "two hosts, TCP over veth": lambda out: [
        TWO_HOSTS, " ".join(["mpiexec", "--hostfile", "$NANODIST_HOSTFILE", "-n", "4", *BENCH, "--csv", out])],
}

check = subprocess.run([TWO_HOSTS, "--check"], capture_output=True, text=True)
if check.returncode != 0:
    sys.exit(f"cannot make the two hosts here: {check.stderr.strip()}")

form = "1" if args.op == "broadcast" else "0"  # out of place where there is that form
busbw = {}  # (placement, backend, size) -> [GB/s per repeat]
with tempfile.TemporaryDirectory() as tmp:
    os.chmod(tmp, 0o755)
    for repeat in range(args.repeats):
        for name, command in PLACEMENTS.items():
            out = os.path.join(tmp, "result.csv")
            done = subprocess.run(command(out), env=clean_env(), capture_output=True, text=True)
            if done.returncode != 0:
                sys.exit(f"failed ({name}): {' '.join(command(out))}\n{done.stdout}{done.stderr}")
            for row in csv.DictReader(open(out)):
                if row["in_place"] != form:  # one of comm_bench's two forms
                    continue
                busbw.setdefault((name, row["backend"], int(row["size_bytes"])), []).append(float(row["busbw_GBps"]))

sizes = sorted({size for (_, _, size) in busbw})
names = list(PLACEMENTS)


def human(size):
    for unit, scale in (("M", 2**20), ("K", 2**10)):
        if size >= scale:
            return f"{size // scale}{unit}"
    return f"{size}"


print(f"# comm_bench --op {args.op}, 4 ranks, busbw in GB/s (median of {args.repeats} repeats)")
for backend in ("mpi", "ring", "shm"):
    print(f"\n## backend {backend}\n")
    print("| size | " + " | ".join(names) + " | two hosts / one host (shm) |")
    print("|---:|" + "---:|" * (len(names) + 1))
    for size in sizes:
        medians = [statistics.median(busbw[(n, backend, size)]) for n in names]
        ratio = medians[2] / medians[0] if medians[0] > 0 else float("nan")
        print(f"| {human(size)} | " + " | ".join(f"{m:.3f}" for m in medians) + f" | {ratio:.2f} |")


# Bytes on the wire: what host A's end of the veth sent (/proc/net/dev, in its namespace) for
# one allreduce of --wire bytes, from two runs of 2 and 6 iterations (the difference / 4 drops
# the start-up, the check and everything else but the iterations). The formulas, for 2 ranks
# on each of the 2 hosts: a flat ring 0→1→2→3→0 crosses from A to B on one link, which carries
# 2(n−1) blocks of S/n = 1.5 S; the hierarchical allreduce sends 2(M−1)/M × S/L from each of
# A's L = 2 ranks for M = 2 hosts: 1.0 S in all.
if args.wire:
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}
    size = int(args.wire[:-1]) * scale[args.wire[-1]] if args.wire[-1] in scale else int(args.wire)
    formula = {"ring": 1.5, "shm": 1.0}

    def sent_by_host_a(backend, iterations):
        read = "grep veth0: /proc/net/dev"
        run = " ".join(["mpiexec", "--hostfile", "$NANODIST_HOSTFILE", "-n", "4", args.comm_bench, "--op", "allreduce",
                        "--backend", backend, "-b", str(size), "-e", str(size), "-n", str(iterations), "-w", "0",
                        "--out-of-place", ">/dev/null"])
        done = subprocess.run([TWO_HOSTS, f"{read}; {run}; {read}"], env=clean_env(), capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"failed (wire, {backend}): {done.stdout}{done.stderr}")
        counts = [int(line.split(":", 1)[1].split()[8]) for line in done.stdout.splitlines() if "veth0:" in line]
        return counts[-1] - counts[0]

    print(f"\n## bytes host A sends per allreduce of {args.wire} (S), 2 + 2 ranks\n")
    print("| backend | measured | formula |")
    print("|---|---:|---:|")
    for backend in ("mpi", "ring", "shm"):
        per_call = statistics.median(
            (sent_by_host_a(backend, 6) - sent_by_host_a(backend, 2)) / 4 for _ in range(args.repeats))
        expected = f"{formula[backend]:.2f} S" if backend in formula else "—"
        print(f"| {backend} | {per_call / size:.2f} S | {expected} |")
