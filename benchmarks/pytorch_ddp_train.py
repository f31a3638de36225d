#!/usr/bin/env python3
"""The PyTorch side of train_dp_vs_pytorch_ddp.py: nanoGPT's model trained data-parallel
with torch.nn.parallel.DistributedDataParallel over gloo (CPU) — or, with --backend nanodist,
over nanodist's collectives (torch_backend/, docs/pytorch.md) — N processes on this machine
(torch.multiprocessing.spawn), each a micro-batch of random tokens per step, AdamW, clipping;
--precision bf16: forward under torch.autocast("cpu", bfloat16), PyTorch's CPU mixed precision.
Prints one JSON line: global tokens/s (median over the timed steps, slowest rank)."""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from nanogpt_reference import GPT, GPTConfig  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--ranks", type=int, default=2)
parser.add_argument("--threads", type=int, default=1, help="torch threads per process")
parser.add_argument("--n-layer", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=12)
parser.add_argument("--steps", type=int, default=50)
parser.add_argument("--warmup", type=int, default=10)
parser.add_argument("--port", type=int, default=29511)
parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
parser.add_argument("--backend", choices=["gloo", "nanodist"], default="gloo")
parser.add_argument("--n-embd", type=int, default=128)
parser.add_argument("--n-head", type=int, default=4)
parser.add_argument("--block-size", type=int, default=64)
args = parser.parse_args()


def communication_seconds():
    """nanodist: the seconds its communication thread has spent in collectives; gloo: 0 (unknown)."""
    if args.backend != "nanodist":
        return 0.0
    import nanodist_torch
    return nanodist_torch.communication_seconds()


def worker(rank):
    torch.set_num_threads(args.threads)
    if args.backend == "nanodist":
        import nanodist_torch  # noqa: F401  (registers "nanodist")
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.ranks)
    T = args.block_size
    config = GPTConfig(block_size=T, vocab_size=65, n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd,
                       dropout=0.0, bias=False)
    torch.manual_seed(1337)
    model = GPT(config)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = model.configure_optimizer(0.1, 5e-3, (0.9, 0.99))
    generator = torch.Generator().manual_seed(rank)
    times = []
    for step in range(args.warmup + args.steps):
        x = torch.randint(0, 65, (args.batch_size, T), generator=generator)
        y = torch.randint(0, 65, (args.batch_size, T), generator=generator)
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            _, loss = ddp(x, y)
        loss.backward()  # DDP's buckets allreduce during backward
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == args.warmup:
            comm_start = communication_seconds()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    comm_per_step = (communication_seconds() - comm_start) / max(len(times), 1)
    step_s = torch.tensor([statistics.median(times)])
    dist.all_reduce(step_s, op=dist.ReduceOp.MAX)
    if rank == 0:
        tokens = args.ranks * args.batch_size * T
        print(json.dumps({"impl": "pytorch " + torch.__version__, "ranks": args.ranks, "threads": args.threads,
                          "precision": args.precision,
                          "step_ms": step_s.item() * 1e3, "tokens_per_s": tokens / step_s.item(), "backend": args.backend,
                          "comm_ms_per_step": comm_per_step * 1e3}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, nprocs=args.ranks)
