#!/usr/bin/env python3
"""torch.distributed's collectives on the nanodist backend, against values computed here.

Run under mpiexec (mpiexec -n 3 python3 collectives.py) or started apart (RANK/WORLD_SIZE set
per process, --init tcp://...). Every rank checks every result; the first wrong one fails the
run with a line naming the call, the type and the rank. NANODIST_BACKEND picks what runs
underneath (mpi, ring, naive, shm)."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

import nanodist_torch  # registers "nanodist"

parser = argparse.ArgumentParser()
parser.add_argument("--init", default="tcp://127.0.0.1:29531")
args = parser.parse_args()

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
dist.init_process_group("nanodist", init_method=args.init, rank=rank, world_size=size)
assert dist.get_backend() == "nanodist" and dist.get_rank() == rank and dist.get_world_size() == size
checks = 0


def check(what, got, want):
    global checks
    checks += 1
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        if got.is_floating_point() and got.shape == want.shape and torch.allclose(got.double(), want.double(),
                                                                                  rtol=1e-2 if got.dtype == torch.bfloat16 else 1e-6):
            return
        print(f"FAILED on rank {rank}: {what}: got {got.flatten()[:8].tolist()} {got.dtype} {tuple(got.shape)}, "
              f"want {want.flatten()[:8].tolist()} {want.dtype} {tuple(want.shape)}", file=sys.stderr, flush=True)
        sys.exit(1)


def data(r, count, dtype, salt=0):
    """Rank r's values: small integers, exact in every type (bf16 included)."""
    values = (torch.arange(count, dtype=torch.int64) * 7 + r * 3 + salt) % 11 + 1
    return values.to(dtype)


REDUCIBLE = [torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64]
OPS = {"SUM": (dist.ReduceOp.SUM, lambda xs: sum(xs[1:], xs[0])),
       "PRODUCT": (dist.ReduceOp.PRODUCT, lambda xs: torch.stack([x.double() for x in xs]).prod(0)),
       "MIN": (dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values),
       "MAX": (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
       "AVG": (dist.ReduceOp.AVG, lambda xs: torch.stack([x.double() for x in xs]).mean(0))}
COUNTS = [0, 1, 7, 1031]

# all_reduce: every type, op and count; in place, as torch.distributed always is.
for dtype in REDUCIBLE:
    for name, (op, expected) in OPS.items():
        if name == "AVG" and not dtype.is_floating_point:
            continue
        for count in COUNTS:
            t = data(rank, count, dtype)
            dist.all_reduce(t, op=op)
            check(f"all_reduce {name} {dtype} count {count}", t,
                  expected([data(r, count, dtype) for r in range(size)]).to(dtype))

# A non-contiguous tensor (a transposed view) is reduced in place all the same.
base = data(rank, 12, torch.float32).reshape(3, 4)
view = base.t()
dist.all_reduce(view)
check("all_reduce of a transposed view", base, sum(data(r, 12, torch.float32) for r in range(size)).reshape(3, 4))

# Several asynchronous calls in flight, waited for in reverse order; a future's value.
works, tensors = [], []
for i in range(4):
    tensors.append(data(rank, 100 + i, torch.float32, salt=i))
    works.append(dist.all_reduce(tensors[-1], async_op=True))
for i in reversed(range(4)):
    works[i].wait()
    check(f"async all_reduce {i}", tensors[i], sum(data(r, 100 + i, torch.float32, salt=i) for r in range(size)))
t = data(rank, 9, torch.float64)
future = dist.all_reduce(t, async_op=True).get_future()
check("a future's value", future.wait()[0], sum(data(r, 9, torch.float64) for r in range(size)))

# A collective called from a future's callback (PowerSGD's DDP hook does) runs, not deadlocks.
def in_callback(fut):
    x = fut.value()[0].clone()
    dist.all_reduce(x)
    return x


t = data(rank, 5, torch.float32)
got = dist.all_reduce(t, async_op=True).get_future().then(in_callback).wait()
check("all_reduce inside a future's callback", got, size * sum(data(r, 5, torch.float32) for r in range(size)))
# Into a parameter that requires grad (DDP broadcasts its parameters so), and into an output
# that is not contiguous.
param = torch.nn.Parameter(data(rank, 4, torch.float32))
dist.broadcast(param, src=0)
check("broadcast into a parameter", param.detach(), data(0, 4, torch.float32))
rows = torch.empty(6, size).t()  # (size, 6), not contiguous
dist.all_gather_into_tensor(rows, data(rank, 6, torch.float32))
check("all_gather_into_tensor into a transposed output", rows, torch.stack([data(r, 6, torch.float32) for r in range(size)]))

# broadcast and reduce from every root; types the library cannot reduce still move (uint8, float16, bool).
for root in range(size):
    for dtype in REDUCIBLE + [torch.uint8, torch.float16, torch.int8, torch.bool]:
        for count in (1, 13):
            t = data(rank, count, dtype) if dtype != torch.bool else data(rank, count, torch.int64) % 2 == 0
            dist.broadcast(t, src=root)
            want = data(root, count, dtype) if dtype != torch.bool else data(root, count, torch.int64) % 2 == 0
            check(f"broadcast {dtype} from {root}", t, want)
    t = data(rank, 33, torch.int64)
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    if rank == root:
        check(f"reduce to {root}", t, sum(data(r, 33, torch.int64) for r in range(size)))

# all_gather (list and flat), gather, scatter.
for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.uint8, torch.float16):
    for count in (0, 5):
        outputs = [torch.empty(count, dtype=dtype) for _ in range(size)]
        dist.all_gather(outputs, data(rank, count, dtype))
        for r in range(size):
            check(f"all_gather {dtype} block {r}", outputs[r], data(r, count, dtype))
flat = torch.empty(size * 6, dtype=torch.float32)
dist.all_gather_into_tensor(flat, data(rank, 6, torch.float32))
check("all_gather_into_tensor", flat, torch.cat([data(r, 6, torch.float32) for r in range(size)]))
for root in range(size):
    gathered = [torch.empty(4, dtype=torch.int32) for _ in range(size)] if rank == root else None
    dist.gather(data(rank, 4, torch.int32), gather_list=gathered, dst=root)
    if rank == root:
        for r in range(size):
            check(f"gather to {root}, block {r}", gathered[r], data(r, 4, torch.int32))
    out = torch.empty(3, dtype=torch.float64)
    pieces = [data(r, 3, torch.float64, salt=root) for r in range(size)] if rank == root else None
    dist.scatter(out, scatter_list=pieces, src=root)
    check(f"scatter from {root}", out, data(rank, 3, torch.float64, salt=root))

# reduce_scatter (list and flat).
for dtype in (torch.float32, torch.int32, torch.bfloat16):
    inputs = [data(rank, 5, dtype, salt=b) for b in range(size)]
    out = torch.empty(5, dtype=dtype)
    dist.reduce_scatter(out, inputs)
    check(f"reduce_scatter {dtype}", out, sum(data(r, 5, dtype, salt=rank) for r in range(size)).to(dtype))
out = torch.empty(4, dtype=torch.float32)
dist.reduce_scatter_tensor(out, torch.cat([data(rank, 4, torch.float32, salt=b) for b in range(size)]))
check("reduce_scatter_tensor", out, sum(data(r, 4, torch.float32, salt=rank) for r in range(size)))

# all_to_all: equal and unequal splits, and the list form.
send = torch.cat([data(rank, 2, torch.float32, salt=p) for p in range(size)])
recv = torch.empty(2 * size, dtype=torch.float32)
dist.all_to_all_single(recv, send)
check("all_to_all_single", recv, torch.cat([data(p, 2, torch.float32, salt=rank) for p in range(size)]))
in_splits = [p + 1 for p in range(size)]          # rank sends p + 1 rows to rank p
out_splits = [rank + 1] * size                      # and gets rank + 1 rows from each
send = torch.cat([data(rank, p + 1, torch.int64, salt=p) for p in range(size)])
recv = torch.empty(sum(out_splits), dtype=torch.int64)
dist.all_to_all_single(recv, send, output_split_sizes=out_splits, input_split_sizes=in_splits)
check("all_to_all_single, unequal splits", recv, torch.cat([data(p, rank + 1, torch.int64, salt=rank) for p in range(size)]))
outs = [torch.empty(3, dtype=torch.uint8) for _ in range(size)]
dist.all_to_all(outs, [data(rank, 3, torch.uint8, salt=p) for p in range(size)])
for p in range(size):
    check(f"all_to_all from {p}", outs[p], data(p, 3, torch.uint8, salt=rank))
# Rows of a 2-D complex tensor (a type the library moves as bytes), unequal splits, an empty one.
in_splits = [(rank + p) % 3 for p in range(size)]
out_splits = [(p + rank) % 3 for p in range(size)]
rows = lambda r, n, salt: torch.complex(data(r, 2 * n, torch.float32, salt), -data(r, 2 * n, torch.float32, salt + 1)).reshape(n, 2)
send = torch.cat([rows(rank, in_splits[p], p) for p in range(size)])
recv = torch.zeros(sum(out_splits), 2, dtype=torch.complex64)
dist.all_to_all_single(recv, send, output_split_sizes=out_splits, input_split_sizes=in_splits)
check("all_to_all_single, complex rows", recv, torch.cat([rows(p, out_splits[p], rank) for p in range(size)]))
# A contiguous input and output move in place (above); a strided output (every other element of
# a buffer) goes through a copy of its parts, and the elements between stay as they were.
strided = torch.full((2 * size, 2), -1.0)
dist.all_to_all_single(strided[:, 0], torch.cat([data(rank, 2, torch.float32, salt=p) for p in range(size)]))
check("all_to_all_single into a strided view", strided[:, 0],
      torch.cat([data(p, 2, torch.float32, salt=rank) for p in range(size)]))
check("all_to_all_single leaves the elements between", strided[:, 1], torch.full((2 * size,), -1.0))

# send/recv around the ring (even ranks send first, so no two wait on each other).
nxt, prv = (rank + 1) % size, (rank - 1) % size
if size > 1:
    got = torch.empty(10, dtype=torch.float32)
    if rank % 2 == 0:
        dist.send(data(rank, 10, torch.float32), dst=nxt)
        dist.recv(got, src=prv)
    else:
        dist.recv(got, src=prv)
        dist.send(data(rank, 10, torch.float32), dst=nxt)
    check("send/recv around the ring", got, data(prv, 10, torch.float32))

# Every rank isends first, then irecvs (a ring exchange): messages far past the eager size, so
# a send that waited for its receiver before the thread took the next call would deadlock.
if size > 1:
    big = 1 << 18  # 1 MB of float32
    got = torch.empty(big, dtype=torch.float32)
    sent = dist.isend(data(rank, big, torch.float32), dst=nxt)
    received = dist.irecv(got, src=prv)
    received.wait()
    sent.wait()
    check("isend before irecv on every rank, 1 MB", got, data(prv, big, torch.float32))
    pairs = [dist.P2POp(dist.isend, data(rank, big, torch.float32, salt=1), nxt),
             dist.P2POp(dist.irecv, got, prv)]
    for request in dist.batch_isend_irecv(pairs):
        request.wait()
    check("batch_isend_irecv around the ring, 1 MB", got, data(prv, big, torch.float32, salt=1))

# recv without src (recvAnysource): rank 0 takes each other rank's message in whatever order
# they come, and learns who sent each from the return value.
if size > 1:
    if rank == 0:
        senders = []
        for _ in range(size - 1):
            got = torch.empty(6, dtype=torch.int64)
            sender = dist.recv(got)
            senders.append(sender)
            check(f"recv from any source: the message of rank {sender}", got, data(sender, 6, torch.int64))
        check("recv from any source: one message from each rank", torch.tensor(sorted(senders)),
              torch.arange(1, size))
    else:
        dist.send(data(rank, 6, torch.int64), dst=0)

# A subgroup (new_group): ranks 1.. only; the others take no part.
members = list(range(1, size)) if size > 1 else [0]
group = dist.new_group(members)
if rank in members:
    t = data(rank, 8, torch.float32)
    dist.all_reduce(t, group=group)
    check("all_reduce on new_group(1..)", t, sum(data(r, 8, torch.float32) for r in members))
    dist.broadcast(t, src=members[-1], group=group)

# What the library does not do is a Python error naming the call and the type, not a crash.
for call, why in ((lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND), "bitwise"),
                  (lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG), "AVG"),
                  (lambda: dist.reduce_scatter(torch.ones(2, dtype=torch.int16),
                                               [torch.ones(2, dtype=torch.int16)] * size, op=dist.ReduceOp.AVG), "AVG"),
                  (lambda: dist.send(torch.ones(2), dst=(rank + 1) % size, tag=-1), "tag")):
    try:
        call()
    except RuntimeError as error:
        if "nanodist" not in str(error) or why not in str(error):
            print(f"FAILED on rank {rank}: the error does not name {why}: {error}", file=sys.stderr)
            sys.exit(1)
    else:
        print(f"FAILED on rank {rank}: an unsupported call did not raise ({why})", file=sys.stderr)
        sys.exit(1)

dist.barrier()
if rank == 0:
    print(f"nanodist backend ({nanodist_torch.backend_description()}), {size} ranks: {checks} checks passed")
dist.destroy_process_group()
