#!/usr/bin/env python3
"""Starts N processes of a command the way torchrun and PyTorch's own tests do, each on its
own (no mpiexec: each is an MPI world of one until the nanodist backend joins them), with
RANK, WORLD_SIZE, MASTER_ADDR and a free MASTER_PORT set; exits with the first non-zero status.

    launch_apart.py 3 python3 collectives.py --init env://"""
import os
import subprocess
import sys

from free_port import free_port

n = int(sys.argv[1])
command = sys.argv[2:]
port = free_port()  # for PyTorch's TCP store
processes = []
for rank in range(n):
    env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    processes.append(subprocess.Popen(command, env=env))
statuses = []
for p in processes:
    try:
        statuses.append(p.wait(timeout=100))
    except subprocess.TimeoutExpired:
        p.kill()
        statuses.append(124)
print(f"launch_apart: exit statuses {statuses}", flush=True)
sys.exit(next((s for s in statuses if s != 0), 0))  # the first rank that failed
