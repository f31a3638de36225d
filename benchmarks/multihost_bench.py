#!/usr/bin/env python3
"""comm_bench across two hosts beside the same on one host: 4 ranks, --compare mpi,ring, in
one invocation, repeated, medians reported.

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
args = parser.parse_args()

TWO_HOSTS = os.path.join(ROOT, "scripts", "two_hosts.sh")
BENCH = [args.comm_bench, "--op", args.op, "--compare", "mpi,ring", "-b", args.begin, "-e", args.end,
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
for backend in ("mpi", "ring"):
    print(f"\n## backend {backend}\n")
    print("| size | " + " | ".join(names) + " | two hosts / one host (shm) |")
    print("|---:|" + "---:|" * (len(names) + 1))
    for size in sizes:
        medians = [statistics.median(busbw[(n, backend, size)]) for n in names]
        ratio = medians[2] / medians[0] if medians[0] > 0 else float("nan")
        print(f"| {human(size)} | " + " | ".join(f"{m:.3f}" for m in medians) + f" | {ratio:.2f} |")
