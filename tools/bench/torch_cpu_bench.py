#!/usr/bin/python3
"""PyTorch reference for //tools/bench:cpu_bench (Debian's python3-torch).

Times one optimizer step of one of cpu_bench's models:

  --model mlp  the default example (dsl_examples/fashion_mlp.train):
               784-256-128-10 MLP, ReLU, cross-entropy, AdamW, global batch
               256 samples;
  --model gpt  the tiny GPT (dsl_examples/tiny_gpt.train): GPT-2's block
               (pre-LN, causal self-attention, 4x MLP with tanh GELU), 4
               layers x 128 wide, 4 heads, vocab 256, context 64, learned
               position embeddings, output weight tied to the token
               embedding; AdamW(lr 1e-3, betas (0.9, 0.95), weight decay 0.1
               on 2-D parameters only); global batch 32 sequences of random
               token ids in [0, 256), inputs and targets;
  --model llama  dsl_examples/llama_tiny.train in stock nn layers: 6
               layers x 256, RMSNorm, RoPE (rotate_half), 8 query heads over
               2 key/value heads of 32 (repeat_interleave), SwiGLU 688, no
               biases, untied head; AdamW(2e-3, betas (0.9, 0.95), weight
               decay 0.1 on matrices); global batch 32 sequences of 64;
  --model cnn  the CNN example (dsl_examples/fashion_cnn.train): conv 32
               3x3 pad 1, ReLU, max-pool 2, conv 64 3x3 pad 1, ReLU,
               max-pool 2, flatten, linear 256, ReLU, dropout 0.3, linear
               10, cross-entropy, AdamW(lr 2e-3, weight decay 0.01 on 2-D and
               4-D parameters only); global batch 256 images 1x28x28.

in two configurations:
  eager: one process, one thread, the whole global batch;
  ddp:   two processes, one thread each, DistributedDataParallel over Gloo,
         each rank half the global batch.

Each figure is the median step time of the timed steps (for DDP the slower
rank's), as cpu_bench's own. Prints one line per configuration,
`name ms_per_step samples_or_tokens_per_s`, which the C++ benchmark parses
and puts beside its own figures: torch_eager_1rank, torch_ddp_gloo_2rank
(mlp; samples/s), torch_gpt_eager_1rank, torch_gpt_ddp_gloo_2rank (gpt;
tokens/s) and torch_cnn_eager_1rank, torch_cnn_ddp_gloo_2rank (cnn;
samples/s).
"""
import argparse
import math
import os
import resource
import statistics
import sys
import tempfile
import time

# torch.set_num_threads(1) does not reach the BLAS: Debian's torch calls the
# system libblas (OpenBLAS, pthreads), which starts one thread per core
# unless told otherwise, so "1 thread" would really be 2 here (measured:
# a 2048x128x384 linear takes 3.9 ms with the default, 6.5 ms with one
# BLAS thread, as our side). Set before torch loads OpenBLAS; spawned DDP
# workers inherit it.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

# The tiny GPT's shape (dsl_examples/tiny_gpt.train).
VOCAB, CTX, WIDTH, HEADS, LAYERS = 256, 64, 128, 4, 4


class CausalSelfAttention(nn.Module):
    """nanoGPT's attention without flash: q k^T / sqrt(hs), mask, softmax, @ v."""

    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)  # [3C, C]: q | k | v
        self.c_proj = nn.Linear(WIDTH, WIDTH)
        self.register_buffer(
            "bias", torch.tril(torch.ones(CTX, CTX)).view(1, 1, CTX, CTX))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        hs = C // HEADS
        q = q.view(B, T, HEADS, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, HEADS, hs).transpose(1, 2)
        v = v.view(B, T, HEADS, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
        self.gelu = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(WIDTH, eps=1e-5)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, WIDTH)
        self.wpe = nn.Embedding(CTX, WIDTH)
        self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH, eps=1e-5)
        # As trainc's embedding and position_embedding: N(0, 0.02).
        nn.init.normal_(self.wte.weight, std=0.02)
        nn.init.normal_(self.wpe.weight, std=0.02)

    def forward(self, idx, targets):
        T = idx.size(1)
        pos = torch.arange(T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        logits = F.linear(x, self.wte.weight)  # tied lm head, no bias
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


# dsl_examples/llama_tiny.train's shape, in stock nn layers.
L_WIDTH, L_HEADS, L_KV, L_HEAD, L_HIDDEN, L_LAYERS = 256, 8, 2, 32, 688, 6


class RMSNorm(nn.Module):  # torch 1.13 has no nn.RMSNorm
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(L_WIDTH)
        self.q_proj = nn.Linear(L_WIDTH, L_HEADS * L_HEAD, bias=False)
        self.k_proj = nn.Linear(L_WIDTH, L_KV * L_HEAD, bias=False)
        self.v_proj = nn.Linear(L_WIDTH, L_KV * L_HEAD, bias=False)
        self.o_proj = nn.Linear(L_HEADS * L_HEAD, L_WIDTH, bias=False)
        self.post_attention_layernorm = RMSNorm(L_WIDTH)
        self.gate_proj = nn.Linear(L_WIDTH, L_HIDDEN, bias=False)
        self.up_proj = nn.Linear(L_WIDTH, L_HIDDEN, bias=False)
        self.down_proj = nn.Linear(L_HIDDEN, L_WIDTH, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.size()
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(B, T, L_HEADS, L_HEAD).transpose(1, 2)
        k = self.k_proj(h).view(B, T, L_KV, L_HEAD).transpose(1, 2)
        v = self.v_proj(h).view(B, T, L_KV, L_HEAD).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k.repeat_interleave(L_HEADS // L_KV, dim=1)
        v = v.repeat_interleave(L_HEADS // L_KV, dim=1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(L_HEAD)
        y = att.masked_fill(mask, float("-inf")).softmax(-1) @ v
        x = x + self.o_proj(y.transpose(1, 2).reshape(B, T, L_HEADS * L_HEAD))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, L_WIDTH)
        self.layers = nn.ModuleList([LlamaBlock() for _ in range(L_LAYERS)])
        self.norm = RMSNorm(L_WIDTH)
        self.lm_head = nn.Linear(L_WIDTH, VOCAB, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, L_HEAD, 2).float() / L_HEAD))
        freqs = torch.outer(torch.arange(CTX).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos())
        self.register_buffer("sin", emb.sin())
        # A plain attribute: DDP's buffer broadcast over Gloo refuses bool.
        self.mask = torch.triu(torch.ones(CTX, CTX, dtype=torch.bool), 1)

    def forward(self, idx, targets):
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        logits = self.lm_head(self.norm(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


class MlpLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(784, 256), nn.ReLU(),
                                 nn.Linear(256, 128), nn.ReLU(),
                                 nn.Linear(128, 10))

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


class CnnLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 256), nn.ReLU(), nn.Dropout(0.3),
            nn.Linear(256, 10))

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


def make_model(kind):
    return {"gpt": GPT, "llama": Llama, "cnn": CnnLoss, "mlp": MlpLoss}[kind]()


def make_optimizer(kind, model):
    if kind in ("gpt", "llama"):
        # Weight decay on matrices (weights, embeddings) only, as trainc and
        # nanoGPT do; the tied weight is one parameter.
        params = [p for p in model.parameters() if p.requires_grad]
        decay = [p for p in params if p.dim() >= 2]
        no_decay = [p for p in params if p.dim() < 2]
        return torch.optim.AdamW(
            [{"params": decay, "weight_decay": 0.1},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=1e-3 if kind == "gpt" else 2e-3, betas=(0.9, 0.95))
    if kind == "cnn":
        params = list(model.parameters())
        return torch.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.01},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=2e-3)
    return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)


def make_batch(kind, batch, seed):
    g = torch.Generator().manual_seed(seed)
    if kind in ("gpt", "llama"):
        x = torch.randint(0, VOCAB, (batch, CTX), generator=g)
        y = torch.randint(0, VOCAB, (batch, CTX), generator=g)
    elif kind == "cnn":
        x = torch.rand(batch, 1, 28, 28, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
    else:
        x = torch.rand(batch, 784, generator=g)
        y = torch.randint(0, 10, (batch,), generator=g)
    return x, y


def time_steps(model, opt, x, y, warmup, iters, barrier=None):
    """Median seconds per optimizer step over the timed steps."""
    sec = []
    for i in range(warmup + iters):
        if i == warmup and barrier:
            barrier()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(x, y)
        loss.backward()
        opt.step()
        if i >= warmup:
            sec.append(time.perf_counter() - start)
    return statistics.median(sec)


def eager(kind, batch, warmup, iters):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model(kind)
    opt = make_optimizer(kind, model)
    x, y = make_batch(kind, batch, 100)
    return time_steps(model, opt, x, y, warmup, iters)


def ddp_worker(rank, kind, world, batch, warmup, iters, init_file, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file,
                            rank=rank, world_size=world)
    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(make_model(kind))
    opt = make_optimizer(kind, model)
    x, y = make_batch(kind, batch // world, 100 + rank)
    sec = time_steps(model, opt, x, y, warmup, iters, barrier=dist.barrier)
    out[rank] = sec
    dist.destroy_process_group()


def ddp(kind, batch, world, warmup, iters):
    with tempfile.TemporaryDirectory() as tmp:
        out = mp.Manager().dict()
        mp.spawn(ddp_worker, args=(kind, world, batch, warmup, iters,
                                   os.path.join(tmp, "init"), out),
                 nprocs=world, join=True)
        return max(out.values())


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=("mlp", "gpt", "llama", "cnn"), default="mlp")
    p.add_argument("--batch", type=int, default=None,
                   help="global batch (default: 256 mlp, 32 gpt)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--no-ddp", action="store_true")
    p.add_argument("--ctx", type=int, default=None,
                   help="the GPT's context (default 64); also prints the "
                        "process's peak RSS as torch_peak_rss_kib")
    a = p.parse_args()
    if a.ctx:
        global CTX
        CTX = a.ctx
    batch = a.batch or (32 if a.model in ("gpt", "llama") else 256)
    # Rate: samples/s for the MLP, tokens/s for the language models.
    per_step = batch * (CTX if a.model in ("gpt", "llama") else 1)
    prefix = {"gpt": "torch_gpt_", "llama": "torch_llama_",
              "cnn": "torch_cnn_"}.get(a.model, "torch_")
    sec = eager(a.model, batch, a.warmup, a.iters)
    print(f"{prefix}eager_1rank {sec * 1e3:.3f} {per_step / sec:.0f}", flush=True)
    if a.ctx:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(f"torch_peak_rss_kib {rss} 0", flush=True)
    if not a.no_ddp:
        sec = ddp(a.model, batch, 2, a.warmup, a.iters)
        print(f"{prefix}ddp_gloo_2rank {sec * 1e3:.3f} {per_step / sec:.0f}",
              flush=True)


if __name__ == "__main__":
    sys.exit(main())
