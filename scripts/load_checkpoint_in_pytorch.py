#!/usr/bin/env python3
"""Loads a nanodist checkpoint into nanoGPT's model on PyTorch and evaluates it — proof
that the names, layouts and values are PyTorch's. Optionally compares the loss on a batch
with the value nanodist printed.

  /usr/bin/python3 scripts/load_checkpoint_in_pytorch.py CKPT_DIR [--ids 1,2,3 --targets 2,3,4]
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanogpt_reference import GPT, GPTConfig  # noqa: E402


def load_safetensors(path):
    """The safetensors format by hand (Debian has no python3-safetensors)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        assert info["dtype"] == "F32", f"{name}: {info['dtype']}"
        array = np.frombuffer(data[8 + n + begin:8 + n + end], dtype=np.float32).reshape(info["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out


parser = argparse.ArgumentParser()
parser.add_argument("checkpoint")
parser.add_argument("--ids", help="comma-separated token ids, one sequence")
parser.add_argument("--targets", help="comma-separated targets for --ids")
args = parser.parse_args()

state = json.load(open(os.path.join(args.checkpoint, "state.json")))
model = GPT(GPTConfig(**state["config"]))
model.load_state_dict(load_safetensors(os.path.join(args.checkpoint, "model.safetensors")), strict=True)
model.eval()
print(f"loaded {args.checkpoint}: {model.get_num_params()} parameters, config {state['config']}")
if args.ids:
    ids = torch.tensor([[int(t) for t in args.ids.split(",")]])
    targets = torch.tensor([[int(t) for t in args.targets.split(",")]])
    with torch.no_grad():
        _, loss = model(ids, targets)
    print(f"loss {loss.item():.6f}")
