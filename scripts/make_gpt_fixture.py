#!/usr/bin/env python3
"""Writes the PyTorch reference that tests/test_nn_gpt.cpp compares the C++ GPT with:
tests/fixtures/gpt_parity_{bias,nobias,moe_top2,moe_top1}.safetensors, each holding

  param.<name>      the weights (float32), under nanoGPT's state_dict names
  ids, targets      one batch [B, T] (int64; one target is -1, ignored)
  loss              the loss, computed in float64 from those float32 weights (with a mixture
                    of experts: cross-entropy + aux_loss_weight · aux_loss)
  aux_loss, dropped the mixtures' load-balancing loss (summed over them, unweighted) and the
                    assignments dropped over capacity (mixture-of-experts fixtures only)
  grad.<name>       every parameter's gradient, float64
  adamw.<name>      the parameters after two clipped AdamW steps (float32, PyTorch's AdamW)
                    taken with the float32 rounding of grad.<name> as the gradient
  clip_norms        the global gradient norm before clipping at each of those steps
  bf16.loss         the loss under torch.autocast("cpu", dtype=torch.bfloat16) (float32
                    weights, PyTorch's CPU mixed precision), and bf16.grad.<name> its gradients
  __metadata__      the config, num_params, and the optimizer settings

Needs Debian's python3-torch:  sudo apt-get install python3-torch
Run from the repository root:  /usr/bin/python3 scripts/make_gpt_fixture.py
"""
import json
import os
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nanogpt_reference import GPT, GPTConfig  # noqa: E402

LEARNING_RATES = [1e-2, 5e-3]
DENSE_FIELDS = {"block_size", "vocab_size", "n_layer", "n_head", "n_embd", "dropout", "bias"}
BETAS = (0.9, 0.95)
WEIGHT_DECAY = 0.1


def write_safetensors(path, tensors, metadata):
    """The safetensors format by hand (Debian has no python3-safetensors)."""
    dtypes = {torch.float32: "F32", torch.float64: "F64", torch.int64: "I64"}
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().numpy().tobytes()
        header[name] = {"dtype": dtypes[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def make(path, config, B, T, seed):
    torch.manual_seed(seed)
    model = GPT(config)
    with torch.no_grad():  # move LayerNorm weights and biases off 1 and 0 so their paths matter
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
            if config.n_experts > 0:  # routers that tell tokens apart (the tokens, not the biases,
                # dominate the stream; the router's logits spread): every expert gets some tokens
                if name.endswith("router.weight"):
                    p.normal_(0.0, 0.5)
                if name.endswith("wte.weight") or name.endswith("wpe.weight"):
                    p.mul_(20.0)
    names = [n for n in model.state_dict().keys()]
    weights = {n: t.detach().clone() for n, t in model.state_dict().items()}

    ids = torch.randint(0, config.vocab_size, (B, T))
    targets = torch.randint(0, config.vocab_size, (B, T))
    targets[1, 3] = -1

    # The reference loss and gradients in float64 from the same (float32) weights.
    reference = model.double()
    _, loss = reference(ids, targets)
    loss.backward()
    moe = {}
    if config.n_experts > 0:  # the mixtures' load-balancing loss and the assignments they dropped
        moe = {"aux_loss": reference.aux_loss().detach().reshape(1),
               "dropped": torch.tensor([sum(b.mlp.dropped for b in reference.transformer.h
                                            if hasattr(b.mlp, "dropped"))], dtype=torch.int64)}
    missing = [n for n, p in reference.named_parameters() if p.grad is None]
    assert not missing, f"no gradient reached {missing}: route differently"
    grads = {n: p.grad.detach().clone() for n, p in reference.named_parameters()}
    grads["lm_head.weight"] = grads["transformer.wte.weight"]

    # The same batch under PyTorch's CPU autocast in bfloat16, from the float32 weights.
    model = model.float()  # the same module as `reference`: drop the float64 run's gradients
    model.load_state_dict(weights)
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, bf16_loss = model(ids, targets)
    bf16_loss.backward()
    bf16_grads = {n: p.grad.detach().float().clone() for n, p in model.named_parameters()}
    bf16_grads["lm_head.weight"] = bf16_grads["transformer.wte.weight"]
    model.zero_grad(set_to_none=True)

    # Two clipped AdamW steps in float32 with the float32-rounded gradients.
    optimizer = model.configure_optimizer(WEIGHT_DECAY, LEARNING_RATES[0], BETAS)
    named = dict(model.named_parameters())
    norms = []
    for lr in LEARNING_RATES:
        for n, p in named.items():
            p.grad = grads[n].float().clone()
        total = sum(float(p.grad.double().pow(2).sum()) for p in named.values()) ** 0.5
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5 * total)))
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.step()

    tensors = {f"param.{n}": weights[n] for n in names}
    tensors["ids"], tensors["targets"] = ids, targets
    tensors["loss"] = loss.detach().reshape(1)
    tensors.update(moe)
    tensors.update({f"grad.{n}": grads[n] for n in names})
    tensors.update({f"adamw.{n}": named[n].detach().clone() if n in named else named["transformer.wte.weight"]
                    for n in names})
    tensors["clip_norms"] = torch.tensor(norms, dtype=torch.float64)
    tensors["bf16.loss"] = bf16_loss.detach().double().reshape(1)
    tensors.update({f"bf16.grad.{n}": bf16_grads[n] for n in names})
    metadata = {k: json.dumps(v) for k, v in vars(config).items() if config.n_experts > 0 or k in DENSE_FIELDS}
    metadata.update({"num_params": str(model.get_num_params()), "num_params_all": str(model.get_num_params(False)),
                     "state_dict_keys": json.dumps(names), "learning_rates": json.dumps(LEARNING_RATES),
                     "betas": json.dumps(BETAS), "weight_decay": json.dumps(WEIGHT_DECAY),
                     "torch_version": torch.__version__})
    write_safetensors(path, tensors, metadata)
    print(f"{path}: loss {loss.item():.6f}, {len(names)} tensors, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    out = "tests/fixtures"
    make(f"{out}/gpt_parity_bias.safetensors",
         GPTConfig(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=20, dropout=0.0, bias=True), 3, 13, 1)
    make(f"{out}/gpt_parity_nobias.safetensors",
         GPTConfig(block_size=8, vocab_size=7, n_layer=1, n_head=3, n_embd=12, dropout=0.0, bias=False), 2, 8, 2)
    # Mixtures of experts: two choices a token in every block, and one in every second block;
    # a capacity factor of 1, so that some assignments are dropped.
    make(f"{out}/gpt_parity_moe_top2.safetensors",
         GPTConfig(block_size=16, vocab_size=11, n_layer=2, n_head=2, n_embd=20, dropout=0.0, bias=True,
                   n_experts=4, experts_per_token=2, capacity_factor=1.0, moe_every=1, aux_loss_weight=0.1), 3, 13, 3)
    make(f"{out}/gpt_parity_moe_top1.safetensors",
         GPTConfig(block_size=8, vocab_size=7, n_layer=2, n_head=3, n_embd=12, dropout=0.0, bias=False,
                   n_experts=3, experts_per_token=1, capacity_factor=1.0, moe_every=2, aux_loss_weight=0.1), 2, 8, 4)
