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
or `SKIP reason` when this Python has no CUDA-enabled torch. With --check
CKPT --text FILE it instead loads a trainc checkpoint of
dsl_examples/gpt2_small.train into the same model (trainc's parameter
names, load_state_dict(strict=True)) and prints its loss over FILE's
windows in float64: `CHECK windows N loss X`.
"""
import argparse
import math
import sys
import time


def build_model(torch, nn, F, vocab, ctx, width, heads, layers):
    """GPT-2 with trainc's parameter names (h.N.attn.c_attn.weight, ...), so
    a trainc checkpoint loads with load_state_dict(strict=True)."""

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(c, dim=2)
            q, k, v = (z.view(b, t, heads, c // heads).transpose(1, 2)
                       for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(width, 4 * width)
            self.c_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(width)
            self.mlp = Mlp()

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            return x + self.mlp(self.ln_2(x))

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
            logits = F.linear(self.ln_f(x), self.wte.weight)  # tied
            if logits.dtype in (torch.bfloat16, torch.float16):
                logits = logits.float()  # autocast: the loss in f32
            return F.cross_entropy(logits.view(-1, vocab), targets.view(-1))

    return Gpt()


def read_safetensors(path, np):
    """{name: array} of an F32 safetensors file, by a reader of our own."""
    import json
    import struct
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (name, t["dtype"])
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(body[b:e], dtype="<f4").reshape(t["shape"])
    return out


def check(args, torch, nn, F, dims):
    """Loads a trainc GPT-2 small checkpoint with strict=True and prints its
    mean next-byte loss over the text file's windows (trainc's eval windows:
    example i is bytes [i*T, i*T + T]), in float64."""
    import numpy as np
    model = build_model(torch, nn, F, *dims).double().cuda()
    weights = read_safetensors(args.check, np)
    model.load_state_dict({k: torch.from_numpy(v.astype(np.float64))
                           for k, v in weights.items()}, strict=True)
    ctx = dims[1]
    with open(args.text, "rb") as f:
        tokens = torch.tensor(list(f.read()), dtype=torch.long)
    windows = (len(tokens) - 1) // ctx
    total = 0.0
    with torch.no_grad():  # float64: SDPA takes its exact (math) path
        for i in range(windows):
            w = tokens[i * ctx:i * ctx + ctx + 1].cuda()
            total += model(w[None, :-1], w[None, 1:]).item()
    print(f"CHECK windows {windows} loss {total / windows:.10f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro_batch", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--modes", default="eager,compile",
                        help="comma-separated: eager, compile")
    # The model's dimensions (default GPT-2 small; gpu_bench passes
    # tiny_gpt's for its row).
    for name, default in (("vocab", 50257), ("ctx", 1024), ("width", 768),
                          ("heads", 12), ("layers", 12)):
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--check", metavar="CKPT",
                        help="instead of timing: load this trainc checkpoint "
                             "(strict) and print the loss over --text")
    parser.add_argument("--text", help="with --check: the text to score")
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
    vocab, ctx, width, heads, layers = (args.vocab, args.ctx, args.width, args.heads,
                                        args.layers)
    if args.check:
        check(args, torch, nn, F, (vocab, ctx, width, heads, layers))
        return 0
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
