#!/usr/bin/python3
"""PyTorch reference for //tools/bench:cpu_bench (Debian's python3-torch).

Times one optimizer step of the default example's model (784-256-128-10 MLP,
ReLU, cross-entropy, AdamW) at a global batch of 256:
  eager: one process, one thread;
  ddp:   two processes, one thread each, DistributedDataParallel over Gloo,
         each rank a micro-batch of 128.
Prints one line per configuration, `name ms_per_step samples_per_s`, which
the C++ benchmark parses and puts beside its own figures.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def make_model():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def time_steps(model, opt, x, y, warmup, iters, barrier=None):
    loss_fn = nn.CrossEntropyLoss()
    for i in range(warmup + iters):
        if i == warmup:
            if barrier:
                barrier()
            start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / iters


def eager(batch, warmup, iters):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.rand(batch, 784)
    y = torch.randint(0, 10, (batch,))
    return time_steps(model, opt, x, y, warmup, iters)


def ddp_worker(rank, world, batch, warmup, iters, init_file, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file,
                            rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make_model())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.rand(batch // world, 784)
    y = torch.randint(0, 10, (batch // world,))
    sec = time_steps(model, opt, x, y, warmup, iters, barrier=dist.barrier)
    out[rank] = sec
    dist.destroy_process_group()


def ddp(batch, world, warmup, iters):
    with tempfile.TemporaryDirectory() as tmp:
        out = mp.Manager().dict()
        mp.spawn(ddp_worker, args=(world, batch, warmup, iters,
                                   os.path.join(tmp, "init"), out),
                 nprocs=world, join=True)
        return max(out.values())


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--no-ddp", action="store_true")
    a = p.parse_args()
    sec = eager(a.batch, a.warmup, a.iters)
    print(f"torch_eager_1rank {sec * 1e3:.3f} {a.batch / sec:.0f}", flush=True)
    if not a.no_ddp:
        sec = ddp(a.batch, 2, a.warmup, a.iters)
        print(f"torch_ddp_gloo_2rank {sec * 1e3:.3f} {a.batch / sec:.0f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
