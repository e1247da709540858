#!/usr/bin/python3
"""PyTorch reference for //tools/bench:attention_bench (a GPU's PyTorch).

Times F.scaled_dot_product_attention(q, k, v, is_causal=True) forward, and
forward + backward, in bf16 (its flash backend where available) or fp32,
on the shapes given as B:T:H:KV:d (grouped-query heads repeated to H, as
transformers' repeat_kv; the repeat is inside the timed region, as it is
in a model). Prints one line per shape:
  torch_attention B8 T1024 H12/12 d64 FWD_MS STEP_MS
"""
import argparse
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, iters):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", required=True, help="B:T:H:KV:d,...")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--fp32", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_attention_bench: no GPU", file=sys.stderr)
        return 1
    dtype = torch.float32 if a.fp32 else torch.bfloat16
    for spec in a.shapes.split(","):
        b, t, h, kv, d = (int(x) for x in spec.split(":"))
        q = torch.randn(b, h, t, d, device="cuda", dtype=dtype, requires_grad=True)
        k = torch.randn(b, kv, t, d, device="cuda", dtype=dtype, requires_grad=True)
        v = torch.randn(b, kv, t, d, device="cuda", dtype=dtype, requires_grad=True)
        dy = torch.randn(b, h, t, d, device="cuda", dtype=dtype)

        def forward():
            kk = k.repeat_interleave(h // kv, dim=1)
            vv = v.repeat_interleave(h // kv, dim=1)
            return F.scaled_dot_product_attention(q, kk, vv, is_causal=True)

        def step():
            forward().backward(dy)

        with torch.no_grad():
            fwd = time_ms(forward, a.iters)
        both = time_ms(step, a.iters)
        print(f"torch_attention B{b} T{t} H{h}/{kv} d{d} {fwd:.4f} {both:.4f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
