#!/usr/bin/env python3
"""A PyTorch program that goes wrong on one rank, for the watchdog to name (ctest torch_watchdog_*):
  skip  rank 1 calls barrier where the others call all_reduce;
  exit  rank 1 leaves the program (os._exit) where the others call all_reduce."""
import os
import sys

import torch
import torch.distributed as dist

import nanodist_torch  # noqa: F401

mode = sys.argv[1]
for mpi, name in (("OMPI_COMM_WORLD_RANK", "RANK"), ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")):
    if mpi in os.environ:
        os.environ.setdefault(name, os.environ[mpi])
dist.init_process_group("nanodist", init_method="env://")
t = torch.ones(1000)
dist.all_reduce(t)  # all ranks together once
if dist.get_rank() == 1:
    if mode == "skip":
        dist.barrier()
    else:
        os._exit(0)
else:
    dist.all_reduce(t)
print(f"rank {dist.get_rank()} should not get here", flush=True)
