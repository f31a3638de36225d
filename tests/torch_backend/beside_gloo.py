#!/usr/bin/env python3
"""Runs programs.py under mpiexec on nanodist and then on gloo, and compares what every rank
got: each case both backends ran must give the same values; a case gloo refused must have run
on nanodist (checked there against computed values).

    beside_gloo.py MPIEXEC N PYTHON PROGRAMS_PY WORK_DIR [mpiexec flags...]"""
import os
import shutil
import subprocess
import sys

import torch

mpiexec, n, python, programs, work = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
flags = sys.argv[6:]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
for backend in ("nanodist", "gloo"):
    run = subprocess.run([mpiexec, *flags, "-n", str(n), python, programs, "--backend", backend, "--out", work],
                         timeout=240)
    if run.returncode != 0:
        sys.exit(f"beside_gloo: programs.py on {backend} exited with {run.returncode}")
compared = refused_by_gloo = 0
for rank in range(n):
    ours = torch.load(os.path.join(work, f"nanodist_rank{rank}.pt"))
    theirs = torch.load(os.path.join(work, f"gloo_rank{rank}.pt"))
    for name, got in ours.items():
        if isinstance(got, str):
            sys.exit(f"beside_gloo: rank {rank}: nanodist refused {name}")
        want = theirs.get(name)
        if want is None:
            sys.exit(f"beside_gloo: rank {rank}: gloo did not run {name}")
        if isinstance(want, str):
            refused_by_gloo += 1
            continue
        if got.dtype != want.dtype or not torch.equal(got, want):
            sys.exit(f"beside_gloo: rank {rank}: {name}: nanodist {got.flatten()[:8].tolist()} but gloo "
                     f"{want.flatten()[:8].tolist()}")
        compared += 1
print(f"beside gloo, {n} ranks: {compared} results the same, {refused_by_gloo} calls gloo refuses done by nanodist")
