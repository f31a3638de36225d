#!/usr/bin/env python3
"""The PyTorch side of gpt_bench: nanoGPT's model (scripts/nanogpt_reference.py) on
Debian's python3-torch, eager, float32 (or --precision bf16: torch.autocast on the CPU in
bfloat16, PyTorch's CPU mixed precision, through oneDNN), all cores; forward + backward + clip + AdamW step on
random tokens; prints one JSON line like `gpt_bench --json`. --profile: then one more step under
torch.profiler, its table of ops by self CPU time (to set beside `gpt_bench --profile`)."""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from nanogpt_reference import GPT, GPTConfig  # noqa: E402

PRESETS = {"a": (GPTConfig(block_size=64, vocab_size=65, n_layer=4, n_head=4, n_embd=128), 12),
           "b": (GPTConfig(block_size=256, vocab_size=65, n_layer=6, n_head=6, n_embd=384), 64)}

parser = argparse.ArgumentParser()
parser.add_argument("--preset", choices=PRESETS, default="a")
parser.add_argument("--steps", type=int, default=0)
parser.add_argument("--warmup", type=int, default=2)
parser.add_argument("--threads", type=int, default=os.cpu_count())
parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
parser.add_argument("--profile", action="store_true", help="then profile one step with torch.profiler")
parser.add_argument("--profile-rows", type=int, default=30, help="rows of the profiler's table")
args = parser.parse_args()

torch.set_num_threads(args.threads)
config, batch = PRESETS[args.preset]
steps = args.steps or (20 if args.preset == "a" else 3)
torch.manual_seed(1337)
model = GPT(config)
optimizer = model.configure_optimizer(0.1, 1e-3, (0.9, 0.95))
phases = {"total": [], "forward": [], "backward": [], "optimizer": []}


def one_step():
    """Forward, backward, clip and AdamW on fresh random tokens; the four phases' seconds."""
    x = torch.randint(0, config.vocab_size, (batch, config.block_size))
    y = torch.randint(0, config.vocab_size, (batch, config.block_size))
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
        _, loss = model(x, y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t3 = time.perf_counter()
    return t3 - t0, t1 - t0, t2 - t1, t3 - t2


for step in range(args.warmup + steps):
    times = one_step()
    if step >= args.warmup:
        for k, v in zip(phases, times):
            phases[k].append(v)
ms = {k: statistics.median(v) * 1e3 for k, v in phases.items()}
print(json.dumps({"impl": "pytorch " + torch.__version__, "preset": args.preset, "precision": args.precision,
                  "threads": args.threads,
                  "ms_per_step": round(ms["total"], 2), "tokens_per_s": round(batch * config.block_size / ms["total"] * 1e3),
                  "forward_ms": round(ms["forward"], 2), "backward_ms": round(ms["backward"], 2),
                  "optimizer_ms": round(ms["optimizer"], 2)}))
if args.profile:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        total = one_step()[0]
    print(f"\ntorch.profiler, one step: {total * 1e3:.2f} ms (the profiler's own cost included); ops by self CPU time")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.profile_rows))
