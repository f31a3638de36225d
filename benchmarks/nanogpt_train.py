#!/usr/bin/env python3
"""nanoGPT's CPU recipe for tiny Shakespeare, on Debian's python3-torch: the reference the
main job races against (benchmarks/main_job_vs_nanogpt.py).

The recipe is nanoGPT's README command for CPUs (config/train_shakespeare_char.py with
--device=cpu --compile=False --eval_iters=20 --log_interval=1 --block_size=64 --batch_size=12
--n_layer=4 --n_head=4 --n_embd=128 --max_iters=2000 --lr_decay_iters=2000 --dropout=0.0):
AdamW lr 1e-3, betas (0.9, 0.99), weight decay 0.1, warm-up 100, cosine to 1e-4, clip 1.0,
an estimate of the losses every 250 steps. At the end it prints the exact val loss over
consecutive non-overlapping windows of block_size — the metric train_dp prints as
val_loss_full — and the time the training loop took.

It reads the token files train_dp's data step writes (nanoGPT's own format: uint16).

In DDP mode — RANK set, as torchrun sets it, or mpiexec's own variables — it does what
nanoGPT's train.py does with DDP: init_process_group(--backend), a seed offset per rank, the
model wrapped in DistributedDataParallel, gradient sync only on the last micro-step
(require_backward_grad_sync), rank 0 printing. --backend nanodist runs it on nanodist's
collectives (docs/pytorch.md); --log-losses prints every step's loss, for comparing backends:

    mpiexec -n 2 python3 benchmarks/nanogpt_train.py --backend nanodist --max-iters 50 --log-losses"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from nanogpt_reference import GPT, GPTConfig  # noqa: E402

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--data-dir", default="data", help="holds shakespeare_char/{train,val}.bin")
parser.add_argument("--max-iters", type=int, default=2000)
parser.add_argument("--threads", type=int, default=1,
                    help="torch threads (1 is Debian's torch's fastest on 2 cores: see docs/nn.md)")
parser.add_argument("--eval-interval", type=int, default=250)
parser.add_argument("--eval-iters", type=int, default=20)
parser.add_argument("--backend", default="gloo", help="DDP mode: gloo or nanodist")
parser.add_argument("--grad-accum", type=int, default=1, help="micro-steps per step, on each rank")
parser.add_argument("--log-losses", action="store_true", help="print every step's loss (rank 0)")
parser.add_argument("--no-full-val", action="store_true", help="skip the exact val loss at the end")
args = parser.parse_args()

# DDP as nanoGPT's train.py sets it up (mpiexec's variables stand in for torchrun's).
for mpi, torch_name in (("OMPI_COMM_WORLD_RANK", "RANK"), ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")):
    if mpi in os.environ:
        os.environ.setdefault(torch_name, os.environ[mpi])
ddp = int(os.environ.get("RANK", -1)) != -1
seed_offset, master_process = 0, True
if ddp:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    if args.backend == "nanodist":
        import nanodist_torch  # noqa: F401  (registers "nanodist")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29581")
    dist.init_process_group(backend=args.backend)
    seed_offset, master_process = dist.get_rank(), dist.get_rank() == 0

torch.set_num_threads(args.threads)
torch.manual_seed(1337 + seed_offset)
folder = os.path.join(args.data_dir, "shakespeare_char")
train = np.fromfile(os.path.join(folder, "train.bin"), dtype=np.uint16).astype(np.int64)
val = np.fromfile(os.path.join(folder, "val.bin"), dtype=np.uint16).astype(np.int64)
block_size, batch_size = 64, 12
learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 100, args.max_iters
model = GPT(GPTConfig(block_size=block_size, vocab_size=65, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False))
optimizer = model.configure_optimizer(0.1, learning_rate, (0.9, 0.99))
raw_model = model
if ddp:
    model = DDP(model)


def get_batch(split):
    data = train if split == "train" else val
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size]) for i in ix])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size]) for i in ix])
    return x, y


def get_lr(it):  # nanoGPT's schedule
    if it < warmup_iters:
        return learning_rate * it / warmup_iters
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)


@torch.no_grad()
def estimate_loss():
    model.eval()
    out = {}
    for split in ("train", "val"):
        out[split] = sum(raw_model(*get_batch(split))[1].item() for _ in range(args.eval_iters)) / args.eval_iters
    model.train()
    return out


@torch.no_grad()
def full_val_loss():
    model.eval()
    windows = (len(val) - 1) // block_size
    total = 0.0
    for w in range(0, windows, 32):
        n = min(32, windows - w)
        x = torch.from_numpy(val[w * block_size:(w + n) * block_size]).view(n, block_size)
        y = torch.from_numpy(val[w * block_size + 1:(w + n) * block_size + 1]).view(n, block_size)
        total += raw_model(x, y)[1].item() * n * block_size
    return total / (windows * block_size)


start = time.perf_counter()
for it in range(args.max_iters + 1):
    for group in optimizer.param_groups:
        group["lr"] = get_lr(it)
    if args.eval_interval > 0 and it % args.eval_interval == 0:
        losses = estimate_loss()
        if master_process:
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
    if it == args.max_iters:
        break
    for micro_step in range(args.grad_accum):
        if ddp:  # nanoGPT: average the gradients only after the last micro-step
            model.require_backward_grad_sync = micro_step == args.grad_accum - 1
        x, y = get_batch("train")
        _, loss = model(x, y)
        loss = loss / args.grad_accum
        loss.backward()
    if args.log_losses and master_process:
        print(f"iter {it}: loss {loss.item() * args.grad_accum:.6f}", flush=True)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
train_seconds = time.perf_counter() - start
if master_process:
    print(f"trained {args.max_iters} steps in {train_seconds:.1f} s "
          f"({args.max_iters * batch_size * block_size / train_seconds:.0f} tokens/s)")
    if not args.no_full_val:
        print(f"val_loss_full={full_val_loss():.6f}")
    weights = sum(p.double().abs().sum().item() for p in raw_model.parameters())
    print(f"|weights| {weights:.6f}", flush=True)
if ddp:
    dist.destroy_process_group()
