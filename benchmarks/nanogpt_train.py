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

It reads the token files train_dp's data step writes (nanoGPT's own format: uint16)."""
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
args = parser.parse_args()

torch.set_num_threads(args.threads)
torch.manual_seed(1337)
folder = os.path.join(args.data_dir, "shakespeare_char")
train = np.fromfile(os.path.join(folder, "train.bin"), dtype=np.uint16).astype(np.int64)
val = np.fromfile(os.path.join(folder, "val.bin"), dtype=np.uint16).astype(np.int64)
block_size, batch_size = 64, 12
learning_rate, min_lr, warmup_iters, lr_decay_iters = 1e-3, 1e-4, 100, args.max_iters
model = GPT(GPTConfig(block_size=block_size, vocab_size=65, n_layer=4, n_head=4, n_embd=128, dropout=0.0, bias=False))
optimizer = model.configure_optimizer(0.1, learning_rate, (0.9, 0.99))


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
        out[split] = sum(model(*get_batch(split))[1].item() for _ in range(args.eval_iters)) / args.eval_iters
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
        total += model(x, y)[1].item() * n * block_size
    return total / (windows * block_size)


start = time.perf_counter()
for it in range(args.max_iters + 1):
    for group in optimizer.param_groups:
        group["lr"] = get_lr(it)
    if it % args.eval_interval == 0:
        losses = estimate_loss()
        print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
    if it == args.max_iters:
        break
    x, y = get_batch("train")
    _, loss = model(x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
train_seconds = time.perf_counter() - start
print(f"trained {args.max_iters} steps in {train_seconds:.1f} s "
      f"({args.max_iters * batch_size * block_size / train_seconds:.0f} tokens/s)")
print(f"val_loss_full={full_val_loss():.6f}")
