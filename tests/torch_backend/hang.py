#!/usr/bin/env python3
"""A PyTorch program that goes wrong on one rank, for the watchdog to name (ctest torch_watchdog_*):
  skip         rank 1 calls barrier where the others call all_reduce;
  exit         rank 1 leaves the program (os._exit) where the others call all_reduce;
  raise        rank 1 raises an exception after an all_reduce, the others go on to the next
               one (the default 30-minute timeout: every rank must be gone within seconds);
  skip_group   rank 1 never calls new_group([0, 1]) (it calls barrier instead);
  wait_later   rank 1's future callback waits for a call issued after it (refused: it would
               wait forever on the communication thread), then the program ends normally;
  future_wait  the same with future.wait() (which nothing can refuse): the job ends at the deadline;
  catch        as skip, under NANODIST_ON_TIMEOUT=raise: every rank catches the error, says so
               and leaves with status 0;
  mismatch     rank 1 all_reduces 4096 floats, the others 8 (an uneven last batch), under the
               default 30-minute timeout: named when the ranks meet, not at the deadline."""
import os
import sys
import time

import torch
import torch.distributed as dist

import nanodist_torch  # noqa: F401

mode = sys.argv[1]
for mpi, name in (("OMPI_COMM_WORLD_RANK", "RANK"), ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")):
    if mpi in os.environ:
        os.environ.setdefault(name, os.environ[mpi])
dist.init_process_group("nanodist", init_method="env://")
rank = dist.get_rank()
t = torch.ones(1000)
dist.all_reduce(t)  # all ranks together once

if mode in ("wait_later", "future_wait"):
    # Rank 0 comes to the first call only once rank 1 has attached its callback (told through
    # the store, which the backend's thread never waits on): the call cannot be done before, so
    # the callback runs on the communication thread, where the second call runs after it.
    store = dist.distributed_c10d._get_default_store()
    later = []

    def callback(fut):
        if mode == "wait_later":
            later[0].wait()
        else:
            later[0].get_future().wait()
        return fut.value()

    if rank == 0:
        store.wait(["callback attached"])
    first = dist.all_reduce(torch.ones(4), async_op=True)
    done = first.get_future().then(callback) if rank == 1 else first.get_future()
    second = dist.all_reduce(torch.ones(4), async_op=True)
    later.append(second)
    if rank == 1:
        store.set("callback attached", "1")
    try:
        done.wait()
    except RuntimeError as error:
        print(f"rank {rank}: the callback's error: {error}", flush=True)
    second.wait()
    dist.barrier()
    print(f"rank {rank} ended normally", flush=True)
    sys.exit(0)

if mode == "catch":
    try:
        if rank == 1:
            dist.barrier()
        else:
            dist.all_reduce(t)
    except RuntimeError as error:
        print(f"rank {rank} caught the timeout: {error}", flush=True)
        try:
            dist.all_reduce(t)  # refused at once: the job's collectives are out of step
        except RuntimeError as again:
            print(f"rank {rank} refused after it: {again}", flush=True)
        sys.exit(0)  # the communicators are not usable any more: the program ends (the last meeting still runs)
    print(f"rank {rank} should not get here", flush=True)
    sys.exit(1)

if mode == "mismatch":
    if rank == 1:
        print(f"rank 1 failing at {time.time():.3f}", flush=True)
    dist.all_reduce(torch.ones(4096 if rank == 1 else 8))
    print(f"rank {rank} should not get here", flush=True)
    sys.exit(1)

if dist.get_rank() == 1:
    if mode == "skip":
        dist.barrier()
    elif mode == "raise":
        print(f"rank 1 failing at {time.time():.3f}", flush=True)
        raise ValueError("this rank gives up")
    elif mode == "skip_group":
        dist.barrier()
    else:
        os._exit(0)
else:
    if mode == "skip_group":
        dist.new_group([0, 1])
    dist.all_reduce(t)
print(f"rank {dist.get_rank()} should not get here", flush=True)
