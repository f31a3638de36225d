#!/usr/bin/env python3
"""A data-parallel training script written the way the usual tutorial writes it
(MachineLearningMastery, "Training a Model on Multiple GPUs with Data Parallelism": init the
process group, wrap the model in DistributedDataParallel, feed it through a
DistributedSampler(shuffle=False), checkpoint on rank 0, destroy the group), on CPU tensors
with a small model. Only the backend's name changes between gloo and nanodist:

    mpiexec -n 2 /usr/bin/python3 examples/pytorch/ddp_tutorial.py --backend nanodist   (Debian's python3-torch)
    torchrun --standalone --nproc_per_node 2 examples/pytorch/ddp_tutorial.py --backend gloo

(PYTHONPATH must hold build/python, where nanodist_torch is built; docs/pytorch.md.)
Prints the loss of every step on rank 0 ("step 3 loss 1.234567"), for comparing backends.
--find-unused, --accumulate N (no_sync) and --uneven (join) exercise the rest of DDP."""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--backend", default="nanodist", help="gloo or nanodist")
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--find-unused", action="store_true", help="a branch that some steps skip")
parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per step (no_sync on all but the last)")
parser.add_argument("--uneven", action="store_true", help="rank r gets r extra batches: DDP's join()")
parser.add_argument("--checkpoint", default="", help="rank 0 saves the model here at the end")
args = parser.parse_args()

if args.backend == "nanodist":
    import nanodist_torch  # noqa: F401  (registers the backend "nanodist")

# mpiexec names the rank in its own variables; torchrun in RANK/WORLD_SIZE (env://).
for mpi, torch_name in (("OMPI_COMM_WORLD_RANK", "RANK"), ("OMPI_COMM_WORLD_SIZE", "WORLD_SIZE")):
    if mpi in os.environ:
        os.environ.setdefault(torch_name, os.environ[mpi])
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
os.environ.setdefault("MASTER_PORT", "29561")
dist.init_process_group(backend=args.backend)
rank, world = dist.get_rank(), dist.get_world_size()
torch.set_num_threads(1)


class Model(torch.nn.Module):
    def __init__(self, spare):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
        # --find-unused: a branch used on every other step only
        self.spare = torch.nn.Linear(20, 4) if spare else None

    def forward(self, x, use_spare=False):
        out = self.body(x)
        return out + self.spare(x) if use_spare else out


torch.manual_seed(0)  # the same data and initial weights on every rank
x = torch.randn(512, 20)
y = (x[:, :4].sum(1, keepdim=True) > 0).long().squeeze(1) + 2 * (x[:, 4] > 0).long()
dataset = TensorDataset(x, y)
sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=False)
loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

model = DDP(Model(args.find_unused), find_unused_parameters=args.find_unused)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()

step = 0
for epoch in range(args.epochs):
    sampler.set_epoch(epoch)
    batches = list(loader)
    if args.uneven:
        batches += batches[:rank]  # rank r has r more batches than rank 0
    with model.join(enable=args.uneven):
        for i in range(0, len(batches), args.accumulate):
            group = batches[i:i + args.accumulate]
            optimizer.zero_grad()
            total = 0.0
            for j, (inputs, labels) in enumerate(group):
                use_spare = args.find_unused and step % 2 == 1
                last = j == len(group) - 1
                if last:
                    loss = loss_fn(model(inputs, use_spare), labels) / len(group)
                    loss.backward()  # DDP averages the gradients across ranks here
                else:
                    with model.no_sync():  # accumulate locally; no communication
                        loss = loss_fn(model(inputs, use_spare), labels) / len(group)
                        loss.backward()
                total += loss.item()
            optimizer.step()
            if not args.uneven:  # (with join, a rank may run out of batches: only DDP's own calls are shadowed)
                mean = torch.tensor([total])
                dist.all_reduce(mean)
                if rank == 0:
                    print(f"step {step} loss {mean.item() / world:.6f}", flush=True)
            step += 1

if args.checkpoint and rank == 0:  # rank 0 alone writes the checkpoint, as the tutorial does
    torch.save(model.module.state_dict(), args.checkpoint)
dist.barrier()
if rank == 0:
    weights = sum(p.double().abs().sum().item() for p in model.parameters())
    print(f"done: {step} steps on {world} ranks, backend {dist.get_backend()}, |weights| {weights:.6f}", flush=True)
dist.destroy_process_group()
