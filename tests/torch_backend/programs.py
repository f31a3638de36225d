#!/usr/bin/env python3
"""Small ordinary PyTorch programs that broke the nanodist backend (issue 46), each run the same
way on nanodist and on gloo: every rank checks its results against values computed here and
saves them, and tests/torch_backend/beside_gloo.py compares the two backends' files.

    mpiexec -n 3 python3 programs.py --backend nanodist --out DIR   (then --backend gloo)

A case gloo does not have (1.13's gloo has no all_gather_into_tensor, no bool or bfloat16
reductions, no BAND on bool) is recorded as "refused" on gloo and checked against the computed
values on nanodist."""
import argparse
import os
import sys

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--backend", required=True, choices=["nanodist", "gloo"])
parser.add_argument("--out", required=True)
parser.add_argument("--init", default=None)
args = parser.parse_args()
if args.backend == "nanodist":
    import nanodist_torch  # noqa: F401  (registers "nanodist")

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("RANK", "0")))
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
init = args.init or f"file://{os.path.abspath(os.path.join(args.out, args.backend + '.store'))}"
dist.init_process_group(args.backend, init_method=init, rank=rank, world_size=size)
results = {}
checks = 0


def fail(what):
    print(f"FAILED on rank {rank} ({args.backend}): {what}", file=sys.stderr, flush=True)
    sys.exit(1)


def check(name, got, want, close=False):
    global checks
    checks += 1
    results[name] = got.clone()
    same = got.dtype == want.dtype and got.shape == want.shape and (
        torch.allclose(got.double(), want.double(), rtol=1e-2) if close else torch.equal(got, want))
    if not same:
        fail(f"{name}: got {got.flatten()[:10].tolist()} {got.dtype}, want {want.flatten()[:10].tolist()} {want.dtype}")


def refused(name, call):
    """Runs call(); gloo may refuse it (then "refused" is recorded), nanodist must not."""
    try:
        call()
        return False
    except (RuntimeError, ValueError) as error:
        if args.backend == "nanodist":
            fail(f"{name} raised: {error}")
        results[name] = "refused"
        return True


nxt, prv = (rank + 1) % size, (rank - 1) % size

# 1. all_gather_into_tensor of uint8, 5 elements per rank: every byte right (it was padded to
#    4-byte words, and the padding copied into the output).
out = torch.zeros(5 * size, dtype=torch.uint8)
if not refused("allgather_uint8", lambda: dist.all_gather_into_tensor(out, torch.arange(5, dtype=torch.uint8) + 10 * (rank + 1))):
    check("allgather_uint8", out, torch.cat([torch.arange(5, dtype=torch.uint8) + 10 * (r + 1) for r in range(size)]))
parts = [torch.zeros(5, dtype=torch.uint8) for _ in range(size)]  # the list form, which gloo has
dist.all_gather(parts, torch.arange(5, dtype=torch.uint8) + 10 * (rank + 1))
check("allgather_list_uint8", torch.cat(parts), torch.cat([torch.arange(5, dtype=torch.uint8) + 10 * (r + 1) for r in range(size)]))
for dtype in (torch.int16, torch.bool, torch.float16, torch.int8):  # odd byte counts of other byte-moved types
    mine = (torch.arange(3) + rank).to(dtype)
    parts = [torch.zeros(3, dtype=dtype) for _ in range(size)]
    if not refused(f"allgather_list_{dtype}", lambda: dist.all_gather(parts, mine)):
        check(f"allgather_list_{dtype}", torch.cat(parts), torch.cat([(torch.arange(3) + r).to(dtype) for r in range(size)]))

# 2. Tags: two messages to the same rank, received in the other order, each by its tag.
if size > 1:
    if rank == 0:
        a, b = torch.full((4,), 1.0), torch.full((4,), 2.0)
        works = [dist.isend(a, 1, tag=1), dist.isend(b, 1, tag=2)]
        for w in works:
            w.wait()
    elif rank == 1:
        x, y = torch.zeros(4), torch.zeros(4)
        dist.recv(y, 0, tag=2)
        dist.recv(x, 0, tag=1)
        check("tags_x", x, torch.full((4,), 1.0))
        check("tags_y", y, torch.full((4,), 2.0))

# 3. A user's message in flight while all_to_all's own steps run: neither takes the other's.
if size > 1:
    send = torch.arange(2 * size, dtype=torch.float32) + 100 * rank
    recv = torch.zeros(2 * size)
    if rank == 0:
        w = dist.isend(torch.full((6,), 7.0), 1)
        dist.all_to_all_single(recv, send)
        w.wait()
    elif rank == 1:
        dist.all_to_all_single(recv, send)
        b = torch.zeros(6)
        dist.recv(b, 0)
        check("p2p_beside_alltoall_message", b, torch.full((6,), 7.0))
    else:
        dist.all_to_all_single(recv, send)
    check("p2p_beside_alltoall", recv,
          torch.cat([torch.arange(2 * size, dtype=torch.float32)[2 * rank:2 * rank + 2] + 100 * p for p in range(size)]))

# 4. A ring of batch_isend_irecv, the receive first, 1 MB: the receive must not hold up the send.
if size > 1:
    big = 1 << 18
    got = torch.zeros(big)
    ops = [dist.P2POp(dist.irecv, got, prv), dist.P2POp(dist.isend, torch.full((big,), float(rank)), nxt)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()
    check("batch_ring_recv_first", got, torch.full((big,), float(prv)))

# 5. A receive posted, then a collective (shared memory spins without calling MPI): the sender's
#    1 MB message still moves, and its blocking send returns.
if size > 1:
    if rank == 0:
        got = torch.zeros(big)
        w = dist.irecv(got, 1)
        t = torch.ones(8)
        dist.all_reduce(t)
        w.wait()
        check("irecv_then_allreduce", got, torch.full((big,), 3.0))
    elif rank == 1:
        dist.send(torch.full((big,), 3.0), 0)
        t = torch.ones(8)
        dist.all_reduce(t)
    else:
        t = torch.ones(8)
        dist.all_reduce(t)
    check("irecv_then_allreduce_sum", t, torch.full((8,), float(size)))

# 6. Every type PyTorch's CPU backends reduce, every op: beside gloo where gloo has them.
OPS = {"SUM": dist.ReduceOp.SUM, "PRODUCT": dist.ReduceOp.PRODUCT, "MIN": dist.ReduceOp.MIN,
       "MAX": dist.ReduceOp.MAX, "AVG": dist.ReduceOp.AVG, "BAND": dist.ReduceOp.BAND,
       "BOR": dist.ReduceOp.BOR, "BXOR": dist.ReduceOp.BXOR}
TYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
         torch.int32, torch.int64, torch.bool]


def values(r, dtype):
    """Rank r's values: exact in every type; uint8 and int8 sums and products wrap."""
    base = torch.tensor([3, 5, 6, 9, 12, 100, 127, 1, 0, 7]) + r * torch.tensor([1, 2, 3, 4, 5, 60, 70, 1, 1, 2])
    if dtype == torch.bool:
        return (base % 2 == 0)
    return base.to(torch.int64).to(dtype) if not dtype.is_floating_point else (base % 5).to(dtype)


def expected(name, dtype):
    xs = [values(r, dtype) for r in range(size)]
    if dtype == torch.bool:
        ints = torch.stack([x.to(torch.uint8) for x in xs])
        fold = {"SUM": ints.sum(0) > 0, "MAX": ints.max(0).values > 0, "PRODUCT": ints.prod(0) > 0,
                "MIN": ints.min(0).values > 0}
        if name in fold:
            return fold[name]
    wide = torch.stack([x.to(torch.int64) if not dtype.is_floating_point else x.to(torch.float64) for x in xs])
    if name == "SUM":
        r = wide.sum(0)
    elif name == "PRODUCT":
        r = wide.prod(0)
    elif name == "MIN":
        r = wide.min(0).values
    elif name == "MAX":
        r = wide.max(0).values
    elif name == "AVG":
        r = wide.mean(0)
    else:
        r = wide[0]
        for x in wide[1:]:
            r = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}[name](r, x)
        if dtype == torch.bool:
            return r != 0
    return r.to(dtype) if dtype.is_floating_point else (r & 0xFF).to(torch.uint8).to(dtype) if dtype in (torch.uint8, torch.int8) else r.to(dtype)


for dtype in TYPES:
    for name, op in OPS.items():
        floating = dtype.is_floating_point
        if (name == "AVG" and not floating) or (name in ("BAND", "BOR", "BXOR") and floating):
            continue  # not defined: nanodist refuses them (collectives.py checks the message)
        key = f"all_reduce_{name}_{dtype}"
        t = values(rank, dtype)
        if refused(key, lambda: dist.all_reduce(t, op=op)):
            continue
        check(key, t, expected(name, dtype), close=name == "AVG")  # (a mean is rounded once, or twice)
    t = values(rank, dtype)
    if not refused(f"reduce_SUM_{dtype}", lambda: dist.reduce(t, dst=size - 1)) and rank == size - 1:
        check(f"reduce_SUM_{dtype}", t, expected("SUM", dtype))
    if dtype not in (torch.bool,):
        out = torch.zeros(10, dtype=dtype)
        ins = [values(rank, dtype) for _ in range(size)]
        if not refused(f"reduce_scatter_MAX_{dtype}", lambda: dist.reduce_scatter(out, ins, op=dist.ReduceOp.MAX)):
            check(f"reduce_scatter_MAX_{dtype}", out, expected("MAX", dtype))

# A long uint8 sum wraps on every backend underneath (Open MPI's vectorised uint8 sum saturates
# at 255: the mpi backend reduces uint8 with its own kernel).
i = torch.arange(1001)
t = ((i * 37 + rank * 101 + 3) % 256).to(torch.uint8)
dist.all_reduce(t)
check("all_reduce_SUM_uint8_long", t, (sum((i * 37 + r * 101 + 3) % 256 for r in range(size)) % 256).to(torch.uint8))

# 7. A collective issued from a future's callback, with a later call issued before the
#    callback is attached: it runs at the same place on every rank (after the later call).
first = torch.full((4,), float(rank + 1))
w1 = dist.all_reduce(first, async_op=True)
second = torch.full((4,), 10.0 * (rank + 1))
w2 = dist.all_reduce(second, async_op=True)


def doubled(fut):
    x = fut.value()[0] * 2
    dist.all_reduce(x)
    return x


in_callback = w1.get_future().then(doubled).wait()
w2.wait()
total = sum(range(1, size + 1))
check("callback_after_later_call", in_callback, torch.full((4,), 2.0 * size * total))
check("callback_after_later_call_second", second, torch.full((4,), 10.0 * total))

dist.barrier()
torch.save(results, os.path.join(args.out, f"{args.backend}_rank{rank}.pt"))
if rank == 0:
    print(f"programs on {args.backend}, {size} ranks: {checks} checks passed")
dist.destroy_process_group()
