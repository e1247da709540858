"""A small GPT trained by trainc against an independent PyTorch reference.

The test writes a 2-layer GPT (vocab 256, ctx 16, width 32, 4 heads, output
weight tied to wte) as a .train file over a text file of its own, writes the
initial weights itself (safetensors, PyTorch state-dict names), and trains 5
AdamW steps with `train --init-from` for the splits gpus x accumulate =
1 x 4, 2 x 2 and 4 x 1 of one global batch. The reference is a plain
PyTorch module, written here from GPT-2's definition and not from trainc's
code, run in float64 from the same weights on the same token windows with
torch.optim.AdamW.

Checks:
  - every parameter of every split is within 1e-5 relative (max abs
    difference / max abs) of the float64 reference, with deterministic off
    and on;
  - with deterministic = true the three splits are bit for bit identical;
  - adamw's decay = "matrices" (the splits) and decay = "all" (one more run)
    each match the reference with the matching parameter groups;
  - every parameter moved from its initial value by far more than that
    tolerance (so untrained weights cannot pass), and the reference moved
    it the same way.
"""
import json
import math
import os
import struct
import unittest

import numpy as np

import e2e_lib as e2e

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

VOCAB, CTX, WIDTH, HEADS, LAYERS = 256, 16, 32, 4, 2
MICRO_BATCH = 2
GLOBAL_BATCH = 8          # = gpus x micro_batch x accumulate for every split
STEPS = 5
LR, WEIGHT_DECAY = 1e-3, 0.1
# eps is 1e-4, not torch's 1e-8, for one reason: the gradient of the KEY
# bias (the middle third of c_attn.bias) is exactly 0 in exact arithmetic
# (adding k_bias adds q . k_bias to every score of a query row, which the
# softmax cancels), so in float32 it is pure rounding noise (~1e-8, against
# 1e-17 in float64) and Adam, dividing by sqrt(v) + eps, turns noise of the
# size of eps into steps of the size of lr: with eps = 1e-8, PyTorch itself
# in float32 is ~5e-3 (relative) away from its float64 run on c_attn.bias,
# and trainc ~3e-3, on that tensor only. With eps = 1e-4 that noise moves
# the key bias by < 1e-4 of lr per step, typical gradients (median |g| ~
# 7e-3) still dominate eps, and eps's place in the formula (outside the
# sqrt) is tested for real.
BETAS, EPS = (0.9, 0.999), 1e-4
SPLITS = [(1, 4), (2, 2), (4, 1)]
TEXT_BYTES = 1000         # split "0:90%" keeps exactly the first 900 bytes
TRAIN_TOKENS = 900
TOLERANCE = 1e-5

# Weight decay: adamw(..., decay = "matrices") (trainc's default) decays only
# parameters of 2 or more dimensions (the linear weights and the embeddings
# wte / wpe), not biases or LayerNorm parameters, as nanoGPT's and llm.c's
# configure_optimizers do; decay = "all" decays every parameter, as
# torch.optim.AdamW with one parameter group does. The .train file says which
# explicitly; the splits run with "matrices", one extra run checks "all".
DECAY = "matrices"

GPT_TRAIN = """\
model gpt_ref {
  const vocab = %(vocab)d, ctx = %(ctx)d, width = %(width)d, heads = %(heads)d, layers = %(layers)d

  input  tokens: i32[ctx]
  label  next:   i32[ctx]

  block attention(x) {
    c_attn = linear(x, 3 * width)
    y      = causal_attention(c_attn, heads)
    c_proj = linear(y, width)
    return c_proj
  }
  block mlp(x) {
    c_fc   = linear(x, 4 * width)
    c_proj = linear(gelu(c_fc, approximate = "tanh"), width)
    return c_proj
  }
  block layer(x) {
    ln_1 = layernorm(x)
    attn = attention(ln_1)
    r    = x + attn
    ln_2 = layernorm(r)
    mlp  = mlp(ln_2)
    return r + mlp
  }

  wte    = embedding(tokens, vocab, width)
  wpe    = position_embedding(ctx, width)
  h      = repeat(layer, layers, wte + wpe)
  ln_f   = layernorm(h)
  logits = linear(ln_f, vocab, weight = wte.weight, bias = false)
  loss   = cross_entropy(logits, next)
}

data {
  train   = text("%(text)s", split = "0:90%%")
  shuffle = false
}

train {
  gpus        = 1
  micro_batch = %(micro_batch)d
  accumulate  = %(accumulate)d
  steps       = %(steps)d
  optimizer   = adamw(lr = %(lr)r, betas = (%(beta1)r, %(beta2)r), eps = %(eps)r,
                        weight_decay = %(wd)r, decay = "%(decay)s")
  seed        = 0
}
"""


# --- the PyTorch reference (GPT-2, as in nanoGPT / Hugging Face) -----------

if torch is not None:

    class CausalSelfAttention(nn.Module):

        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
            self.c_proj = nn.Linear(WIDTH, WIDTH)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.c_attn(x).split(C, dim=2)
            hs = C // HEADS
            q = q.view(B, T, HEADS, hs).transpose(1, 2)  # B, H, T, hs
            k = k.view(B, T, HEADS, hs).transpose(1, 2)
            v = v.view(B, T, HEADS, hs).transpose(1, 2)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
            mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
            att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
            return self.c_proj(y)

    class MLP(nn.Module):

        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
            self.c_proj = nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, x):
            return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))

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

        def forward(self, idx, targets):
            B, T = idx.shape
            x = self.wte(idx) + self.wpe(torch.arange(T))
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied, no bias
            # The mean over every token of the global batch.
            return F.cross_entropy(logits.reshape(-1, VOCAB),
                                   targets.reshape(-1))


def initial_weights(seed=1234):
    """Random weights with PyTorch's state-dict names. Biases and layernorm
    parameters are random too (not 0 / 1), so that a transposed or swapped
    parameter cannot go unnoticed; scales are a little larger than GPT-2's
    0.02 so that attention is far from uniform."""
    rng = np.random.RandomState(seed)
    w = {}

    def normal(name, shape, std):
        w[name] = (rng.standard_normal(shape) * std).astype(np.float32)

    normal("wte.weight", (VOCAB, WIDTH), 0.3)
    normal("wpe.weight", (CTX, WIDTH), 0.3)
    for i in range(LAYERS):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = (1 + 0.2 * rng.standard_normal(WIDTH)).astype(np.float32)
        normal(p + "ln_1.bias", (WIDTH,), 0.1)
        normal(p + "attn.c_attn.weight", (3 * WIDTH, WIDTH), 0.2)
        normal(p + "attn.c_attn.bias", (3 * WIDTH,), 0.1)
        normal(p + "attn.c_proj.weight", (WIDTH, WIDTH), 0.1)
        normal(p + "attn.c_proj.bias", (WIDTH,), 0.1)
        w[p + "ln_2.weight"] = (1 + 0.2 * rng.standard_normal(WIDTH)).astype(np.float32)
        normal(p + "ln_2.bias", (WIDTH,), 0.1)
        normal(p + "mlp.c_fc.weight", (4 * WIDTH, WIDTH), 0.2)
        normal(p + "mlp.c_fc.bias", (4 * WIDTH,), 0.1)
        normal(p + "mlp.c_proj.weight", (WIDTH, 4 * WIDTH), 0.1)
        normal(p + "mlp.c_proj.bias", (WIDTH,), 0.1)
    w["ln_f.weight"] = (1 + 0.2 * rng.standard_normal(WIDTH)).astype(np.float32)
    normal("ln_f.bias", (WIDTH,), 0.1)
    return w


def write_safetensors(path, tensors):
    """F32 tensors in the published safetensors layout (our own writer)."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_text(path):
    """TEXT_BYTES bytes of word salad: a few dozen distinct byte values."""
    rng = np.random.RandomState(7)
    words = ("the quick brown fox jumps over a lazy dog while data parallel "
             "training sums gradients of every micro batch, Once; twice! "
             "THREE (4) 5.6 - seven? eight: nine").split()
    out = ""
    while len(out) < TEXT_BYTES:
        out += words[rng.randint(len(words))] + (" " if rng.rand() < 0.9 else "\n")
    with open(path, "w") as f:
        f.write(out[:TEXT_BYTES])
    return np.frombuffer(out[:TEXT_BYTES].encode(), dtype=np.uint8)


def reference(init, tokens, decay):
    """The final float64 weights after STEPS AdamW steps of the reference.

    With shuffle = false, training example i is the window tokens[i*T,
    i*T + T] of the split (inputs its first T, targets its last T), and
    optimizer step s averages the loss over examples s*G .. s*G + G - 1
    (runtime/data/sampler.h: global batch s is permutation[s*G, (s+1)*G),
    the identity permutation without shuffling; how it is cut into ranks and
    micro-steps does not change the set, and the mean does not depend on
    the order)."""
    torch.manual_seed(0)
    model = GPT().double()
    model.load_state_dict(
        {k: torch.from_numpy(v.astype(np.float64)) for k, v in init.items()},
        strict=True)
    if decay == "matrices":
        params = [
            {"params": [p for p in model.parameters() if p.dim() >= 2],
             "weight_decay": WEIGHT_DECAY},
            {"params": [p for p in model.parameters() if p.dim() < 2],
             "weight_decay": 0.0}]
    else:
        assert decay == "all", decay
        params = model.parameters()
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS,
                            weight_decay=WEIGHT_DECAY)
    tokens = torch.from_numpy(tokens.astype(np.int64))
    T, G = CTX, GLOBAL_BATCH
    for s in range(STEPS):
        windows = torch.stack([tokens[i * T:i * T + T + 1]
                               for i in range(s * G, s * G + G)])
        opt.zero_grad(set_to_none=True)
        loss = model(windows[:, :-1], windows[:, 1:])
        loss.backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def rel_diff(a, b):
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


class GptEquivalenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if torch is None:
            raise unittest.SkipTest(
                "PyTorch is not installed for this interpreter "
                "(Debian: apt-get install python3-torch); the GPT reference "
                "needs it")
        torch.set_num_threads(1)
        cls.dir = e2e.tmpdir()
        text = os.path.join(cls.dir, "corpus.txt")
        stream = write_text(text)
        cls.tokens = stream[:TRAIN_TOKENS]
        assert len(cls.tokens) - 1 >= STEPS * GLOBAL_BATCH * CTX
        cls.init = initial_weights()
        cls.init_path = os.path.join(cls.dir, "init.safetensors")
        write_safetensors(cls.init_path, cls.init)
        cls.train_files, cls.refs = {}, {}
        for decay in ("matrices", "all"):
            path = os.path.join(cls.dir, f"gpt_{decay}.train")
            with open(path, "w") as f:
                f.write(GPT_TRAIN % dict(
                    vocab=VOCAB, ctx=CTX, width=WIDTH, heads=HEADS,
                    layers=LAYERS, text=text, micro_batch=MICRO_BATCH,
                    accumulate=GLOBAL_BATCH // MICRO_BATCH, steps=STEPS,
                    lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS,
                    wd=WEIGHT_DECAY, decay=decay))
            cls.train_files[decay] = path
            cls.refs[decay] = reference(cls.init, cls.tokens, decay)
        cls.ref = cls.refs[DECAY]
        cls.runs = {}

    @classmethod
    def run_split(cls, gpus, accumulate, deterministic, decay=DECAY):
        key = (gpus, accumulate, deterministic, decay)
        if key not in cls.runs:
            out = os.path.join(
                cls.dir, f"g{gpus}a{accumulate}d{int(deterministic)}"
                f"_{decay}.safetensors")
            e2e.train(cls.train_files[decay], "--device", "cpu",
                      "--gpus", gpus, "--accumulate", accumulate,
                      "--micro_batch", MICRO_BATCH, "--no-eval",
                      "--init-from", cls.init_path,
                      "--deterministic", "true" if deterministic else "false",
                      "--save", out)
            tensors = e2e.read_safetensors(out)[0]
            # The checkpoint also holds the optimizer state
            # (optimizer.<name>.exp_avg / .exp_avg_sq): not parameters.
            cls.runs[key] = {k: v for k, v in tensors.items()
                             if not k.startswith("optimizer.")}
        return cls.runs[key]

    def assert_matches(self, got, ref, what):
        """The worst relative difference over the parameters."""
        self.assertEqual(sorted(got), sorted(ref),
                         "parameter names differ from the PyTorch state dict")
        worst = 0.0
        for name, want in ref.items():
            self.assertEqual(got[name].shape, want.shape, name)
            rel = rel_diff(got[name], want)
            worst = max(worst, rel)
            self.assertLessEqual(
                rel, TOLERANCE, f"{name}: {what}: relative difference "
                f"{rel:.3g} from PyTorch float64 (tolerance {TOLERANCE})")
        return worst

    def check_splits(self, deterministic):
        worst = {}
        for gpus, acc in SPLITS:
            worst[(gpus, acc)] = self.assert_matches(
                self.run_split(gpus, acc, deterministic), self.ref,
                f"gpus={gpus} accumulate={acc} deterministic={deterministic}")
        print(f"\ndeterministic={deterministic}: max relative difference "
              "from PyTorch float64 per split: " +
              ", ".join(f"{g}x{a}: {r:.3g}" for (g, a), r in worst.items()))

    def test_matches_pytorch(self):
        self.check_splits(deterministic=False)

    def test_matches_pytorch_deterministic(self):
        self.check_splits(deterministic=True)

    def test_decay_all_matches_pytorch(self):
        # The two references differ by far more than the tolerance in every
        # 1-D parameter (decayed or not), so the comparison tells them apart.
        for name, a in self.refs["all"].items():
            if a.ndim < 2:
                self.assertGreater(rel_diff(a, self.refs["matrices"][name]),
                                   10 * TOLERANCE, name)
        worst = self.assert_matches(
            self.run_split(1, 4, deterministic=False, decay="all"),
            self.refs["all"], 'decay = "all" gpus=1 accumulate=4')
        print(f'\ndecay = "all", 1x4: max relative difference {worst:.3g}')

    def test_bit_identical_when_deterministic(self):
        first = self.run_split(*SPLITS[0], deterministic=True)
        for gpus, acc in SPLITS[1:]:
            got = self.run_split(gpus, acc, deterministic=True)
            for name in first:
                self.assertTrue(
                    np.array_equal(first[name].view(np.uint32),
                                   got[name].view(np.uint32)),
                    f"{name} differs bitwise between gpus=1 accumulate=4 "
                    f"and gpus={gpus} accumulate={acc}")

    def test_weights_moved(self):
        # Guards the comparisons above: every parameter moved from its
        # initial value, in both trainings, by far more than the tolerance.
        got = self.run_split(*SPLITS[0], deterministic=False)
        for name, start in self.init.items():
            ours = rel_diff(got[name], start)
            theirs = rel_diff(self.ref[name], start)
            self.assertGreater(ours, 100 * TOLERANCE,
                               f"{name} barely moved in trainc ({ours:.3g})")
            self.assertGreater(theirs, 100 * TOLERANCE,
                               f"{name} barely moved in PyTorch ({theirs:.3g})")


if __name__ == "__main__":
    unittest.main()
