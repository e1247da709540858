#!/usr/bin/env python3
"""PyTorch reference for GPT-2 small (124M) training steps on one GPU.

The model is dsl_examples/gpt2_small.train's: vocab 50257, context 1024,
width 768, 12 heads, 12 layers, GELU (tanh), LayerNorm, biases, the head
tied to the token embedding. One step is forward, backward and AdamW
(lr 1e-3, betas (0.9, 0.95), weight decay 0.1) on one micro-batch of
random tokens, under torch.autocast(bfloat16) over fp32 master weights
(the counterpart of precision = bf16), with
F.scaled_dot_product_attention(is_causal=True) (flash attention) and
PyTorch's fused AdamW. Modes: eager, and torch.compile of the model.

Prints one line per mode,
  RESULT gpt2_<mode> ms_per_step tokens_per_s peak_GiB loss
or `SKIP reason` when this Python has no CUDA-enabled torch.
"""
import argparse
import math
import sys
import time


def build_model(torch, nn, F, vocab, ctx, width, heads, layers):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.c_attn = nn.Linear(width, 3 * width)
            self.attn_proj = nn.Linear(width, width)
            self.ln_2 = nn.LayerNorm(width)
            self.c_fc = nn.Linear(width, 4 * width)
            self.mlp_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2)
                       for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
            h = F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.mlp_proj(h)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(ctx, width)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for block in self.h:
                x = block(x)
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
            return F.cross_entropy(logits.float().view(-1, vocab),
                                   targets.view(-1))

    return Gpt()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro_batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--modes", default="eager,compile",
                        help="comma-separated: eager, compile")
    args = parser.parse_args()
    try:
        import torch
        import torch.nn as nn
        import torch.nn.functional as F
    except ImportError as e:
        print(f"SKIP no torch: {e}")
        return 0
    if not torch.cuda.is_available():
        print(f"SKIP torch {torch.__version__} has no usable CUDA GPU")
        return 0
    dev = torch.device("cuda", 0)
    vocab, ctx, width, heads, layers = 50257, 1024, 768, 12, 12
    batch = args.micro_batch
    for mode in args.modes.split(","):
        torch.manual_seed(0)
        model = build_model(torch, nn, F, vocab, ctx, width, heads,
                            layers).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                betas=(0.9, 0.95), weight_decay=0.1,
                                fused=True)
        run = torch.compile(model) if mode == "compile" else model
        tokens = torch.randint(0, vocab, (batch, ctx + 1), device=dev)
        x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(x, y)
            loss.backward()
            opt.step()
            return loss

        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(args.iters):
            loss = step()
        value = loss.item()
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3 / args.iters
        peak = torch.cuda.max_memory_allocated() / 2**30
        if not math.isfinite(value):
            print(f"SKIP gpt2_{mode}: loss {value}")
            continue
        print(f"RESULT gpt2_{mode} {ms:.3f} {batch * ctx / ms * 1e3:.0f} "
              f"{peak:.2f} {value:.4f}", flush=True)
        del model, opt, run
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
