#!/usr/bin/env python3
"""PyTorch eager reference for //tools/bench:gpu_bench (needs CUDA torch).

Times one optimizer step (forward, backward, AdamW) on one GPU of:
  small: 784-256-128-10 MLP, ReLU, cross-entropy, global batch 256;
  large: 4096 -> 4 x (Linear 4096 + ReLU) -> 10, batch 4096, fp32 and TF32.
Prints one line per configuration, `RESULT name ms_per_step samples_per_s`,
which the C++ benchmark parses and puts beside its own figures, or one line
`SKIP reason` when this Python has no CUDA-enabled torch.
"""
import argparse
import sys
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    try:
        import torch
        import torch.nn as nn
    except ImportError as e:
        print(f"SKIP no torch: {e}")
        return 0
    if not torch.cuda.is_available():
        print(f"SKIP torch {torch.__version__} has no usable CUDA GPU")
        return 0
    dev = torch.device("cuda", 0)

    def mlp(widths):
        layers = []
        for i in range(len(widths) - 1):
            layers.append(nn.Linear(widths[i], widths[i + 1]))
            if i + 2 < len(widths):
                layers.append(nn.ReLU())
        return nn.Sequential(*layers).to(dev)

    # (name, widths, batch, tf32, bf16): bf16 is torch.autocast(bfloat16)
    # over fp32 master weights, the counterpart of precision = bf16.
    configs = [
        ("small", [784, 256, 128, 10], 256, False, False),
        ("large_fp32", [4096] * 5 + [10], 4096, False, False),
        ("large_tf32", [4096] * 5 + [10], 4096, True, False),
        ("large_bf16", [4096] * 5 + [10], 4096, False, True),
    ]
    for name, widths, batch, tf32, bf16 in configs:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.manual_seed(0)
        model = mlp(widths)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                weight_decay=0.01)
        loss_fn = nn.CrossEntropyLoss()
        x = torch.randn(batch, widths[0], device=dev)
        y = torch.randint(0, widths[-1], (batch,), device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
                loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss

        for _ in range(args.warmup):
            step()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.iters):
            loss = step()
        loss.item()  # a host read each run, like the C++ side's loss
        torch.cuda.synchronize()
        ms = (time.perf_counter() - start) * 1e3 / args.iters
        print(f"RESULT {name} {ms:.4f} {batch / ms * 1e3:.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
