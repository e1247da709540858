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

Dropout (the same GPT with dropout(p = 0.1) after both c_proj of every
block and on wte + wpe, as nanoGPT):
  - with deterministic = true the three splits are bit for bit identical
    (each global example draws its mask whatever rank and micro-step
    compute it);
  - every split, deterministic off and on, is within 1e-5 of the float64
    reference applying the same masks, computed here from the definition
    (Philox4x32-10 written here and checked against Random123's known
    answers; key = FNV-1a of the value name, checked against what
    `train --compile-only` prints; example s*G + j for sample j of global
    batch s);
  - controls: another seed (differing in its high 32 bits only) gives other
    weights, which match the reference with that seed's masks; p = 0 gives
    the plain GPT's weights bit for bit.
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
%(attn_return)s
  }
  block mlp(x) {
    c_fc   = linear(x, 4 * width)
    c_proj = linear(gelu(c_fc, approximate = "tanh"), width)
%(mlp_return)s
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
%(embed)s
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
  seed        = %(seed)d
}
"""

# The model's statements that differ with dropout (p = None: none at all,
# the plain GPT above). Three spellings on purpose: a named statement in the
# attention block (value h.<i>.attn.drop), a nested call in the MLP's return
# (h.<i>.mlp.return.0) and one on the embeddings' sum (emb), as nanoGPT
# drops after c_proj in both blocks and on wte + wpe.
def model_parts(p):
    if p is None:
        return dict(attn_return="    return c_proj",
                    mlp_return="    return c_proj",
                    embed="  h      = repeat(layer, layers, wte + wpe)")
    return dict(attn_return=f"    drop   = dropout(c_proj, {p!r})\n"
                            "    return drop",
                mlp_return=f"    return dropout(c_proj, p = {p!r})",
                embed=f"  emb    = dropout(wte + wpe, {p!r})\n"
                      "  h      = repeat(layer, layers, emb)")


# Dropout's value names as `train --compile-only` prints them (checked by
# the test): each one's mask key is the FNV-1a hash of its name.
def dropout_names():
    names = ["emb"]
    for i in range(LAYERS):
        names += [f"h.{i}.attn.drop", f"h.{i}.mlp.return.0"]
    return names


DROPOUT_P = 0.1
SEED = 5 + e2e.SEED       # the dropout runs' seed (train { seed })
OTHER_SEED = 2**32 + SEED  # the control: differs from SEED in the high word


# --- dropout's mask, written here from its definition ----------------------
#
# Philox4x32-10 (Salmon et al., SC'11) as Random123 defines it; a mask is a
# pure function of (seed, key, global example, element): counter = (element
# >> 2, example lo32, example hi32, key), key words = (seed lo32, seed hi32);
# the factor of an element is 0 if u < p, u = (word[element & 3] >> 8) / 2^24,
# and else the float32 1 / (1 - p). key = 32-bit FNV-1a of the value name.

_M32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter, key):
    """counter: 4 arrays (or ints) of 32-bit values; key: 2 of them."""
    c = [np.asarray(v, dtype=np.uint64) & _M32 for v in counter]
    k0, k1 = (np.asarray(v, dtype=np.uint64) & _M32 for v in key)
    for _ in range(10):
        p0 = c[0] * np.uint64(0xD2511F53)  # < 2^64: exact in uint64
        p1 = c[2] * np.uint64(0xCD9E8D57)
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & _M32,
             (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & _M32]
        k0 = (k0 + np.uint64(0x9E3779B9)) & _M32
        k1 = (k1 + np.uint64(0xBB67AE85)) & _M32
    return c


def fnv1a32(name):
    h = 2166136261
    for byte in name.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return h


def dropout_factors(seed, key, examples, per_example, p):
    """float64 [len(examples), per_example]: each element's factor, 0 or the
    float32 value 1 / (1 - p)."""
    ex = np.asarray(examples, dtype=np.uint64)[:, None]
    el = np.arange(per_example, dtype=np.uint64)[None, :]
    ex, el = np.broadcast_arrays(ex, el)
    words = philox4x32_10(
        (el >> np.uint64(2), ex & _M32, ex >> np.uint64(32),
         np.full(ex.shape, key, dtype=np.uint64)),
        (seed & 0xFFFFFFFF, seed >> 32))
    word = np.choose((el & np.uint64(3)).astype(np.int64), words)
    u = (word >> np.uint64(8)).astype(np.float64) / 2.0**24
    p32 = np.float32(p)
    scale = np.float32(1) / (np.float32(1) - p32)
    return np.where(u < np.float64(p32), 0.0, np.float64(scale))


# --- the PyTorch reference (GPT-2, as in nanoGPT / Hugging Face) -----------

if torch is not None:

    def dropped(x, factors):
        """Dropout with a given mask (0 or 1 / (1 - p) per element), as
        nn.Dropout computes it; its gradient is the same mask times dy."""
        return x if factors is None else x * factors

    class CausalSelfAttention(nn.Module):

        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(WIDTH, 3 * WIDTH)
            self.c_proj = nn.Linear(WIDTH, WIDTH)

        def forward(self, x, drop=None):
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
            return dropped(self.c_proj(y), drop)

    class MLP(nn.Module):

        def __init__(self):
            super().__init__()
            self.c_fc = nn.Linear(WIDTH, 4 * WIDTH)
            self.c_proj = nn.Linear(4 * WIDTH, WIDTH)

        def forward(self, x, drop=None):
            return dropped(
                self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")), drop)

    class Block(nn.Module):

        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(WIDTH, eps=1e-5)
            self.attn = CausalSelfAttention()
            self.ln_2 = nn.LayerNorm(WIDTH, eps=1e-5)
            self.mlp = MLP()

        def forward(self, x, attn_drop=None, mlp_drop=None):
            x = x + self.attn(self.ln_1(x), attn_drop)
            return x + self.mlp(self.ln_2(x), mlp_drop)

    class GPT(nn.Module):

        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(VOCAB, WIDTH)
            self.wpe = nn.Embedding(CTX, WIDTH)
            self.h = nn.ModuleList([Block() for _ in range(LAYERS)])
            self.ln_f = nn.LayerNorm(WIDTH, eps=1e-5)

        def forward(self, idx, targets, masks=None):
            """masks: None, or {dropout value name: [B, T, C] factors}."""
            masks = masks or {}
            B, T = idx.shape
            x = dropped(self.wte(idx) + self.wpe(torch.arange(T)),
                        masks.get("emb"))
            for i, block in enumerate(self.h):
                x = block(x, masks.get(f"h.{i}.attn.drop"),
                          masks.get(f"h.{i}.mlp.return.0"))
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


def reference(init, tokens, decay, dropout_p=None, seed=SEED, clip=None,
              norms=None):
    """The final float64 weights after STEPS AdamW steps of the reference.

    With shuffle = false, training example i is the window tokens[i*T,
    i*T + T] of the split (inputs its first T, targets its last T), and
    optimizer step s averages the loss over examples s*G .. s*G + G - 1
    (runtime/data/sampler.h: global batch s is permutation[s*G, (s+1)*G),
    the identity permutation without shuffling; how it is cut into ranks and
    micro-steps does not change the set, and the mean does not depend on
    the order).

    With dropout_p, every dropout of the model multiplies by the mask trainc
    draws: global example s*G + j for sample j of global batch s, elements
    numbered within the example ([T, C] flattened), the FNV-1a key of the
    dropout's value name and the plan's seed; the same mask serves the
    backward pass (autograd multiplies dy by the same constant factors)."""
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
        masks = None
        if dropout_p is not None:
            examples = np.arange(s * G, s * G + G)
            masks = {name: torch.from_numpy(dropout_factors(
                seed, fnv1a32(name), examples, T * WIDTH, dropout_p)
                .reshape(G, T, WIDTH)) for name in dropout_names()}
        opt.zero_grad(set_to_none=True)
        loss = model(windows[:, :-1], windows[:, 1:], masks)
        loss.backward()
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if norms is not None:
                norms.append(float(norm))
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}



class GptEquivalenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch, fashion_mnist=False)
        cls.dir = e2e.tmpdir()
        text = os.path.join(cls.dir, "corpus.txt")
        stream = write_text(text)
        cls.tokens = stream[:TRAIN_TOKENS]
        assert len(cls.tokens) - 1 >= STEPS * GLOBAL_BATCH * CTX
        cls.init = initial_weights(seed=1234 + e2e.SEED)
        cls.init_path = os.path.join(cls.dir, "init.safetensors")
        e2e.write_safetensors(cls.init_path, cls.init)
        cls.text = text
        cls.train_files, cls.refs, cls.runs = {}, {}, {}
        for decay in ("matrices", "all"):
            cls.refs[(decay, None, SEED)] = reference(cls.init, cls.tokens,
                                                      decay)
        cls.ref = cls.refs[(DECAY, None, SEED)]

    @classmethod
    def train_file(cls, decay=DECAY, dropout_p=None):
        """The .train file: the plain GPT, or with dropout (p) in it."""
        key = (decay, dropout_p)
        if key not in cls.train_files:
            path = os.path.join(cls.dir, f"gpt_{decay}_p{dropout_p}.train")
            with open(path, "w") as f:
                f.write(GPT_TRAIN % dict(
                    vocab=VOCAB, ctx=CTX, width=WIDTH, heads=HEADS,
                    layers=LAYERS, text=cls.text, micro_batch=MICRO_BATCH,
                    accumulate=GLOBAL_BATCH // MICRO_BATCH, steps=STEPS,
                    lr=LR, beta1=BETAS[0], beta2=BETAS[1], eps=EPS,
                    wd=WEIGHT_DECAY, decay=decay, seed=SEED,
                    **model_parts(dropout_p)))
            cls.train_files[key] = path
        return cls.train_files[key]

    @classmethod
    def reference_for(cls, dropout_p, seed=SEED):
        key = (DECAY, dropout_p, seed)
        if key not in cls.refs:
            cls.refs[key] = reference(cls.init, cls.tokens, DECAY, dropout_p,
                                      seed)
        return cls.refs[key]

    @classmethod
    def run_split(cls, gpus, accumulate, deterministic, decay=DECAY,
                  dropout_p=None, seed=None, clip=None):
        """Final parameters of one training; seed: a --seed override;
        clip: a --clip_grad_norm override."""
        key = (gpus, accumulate, deterministic, decay, dropout_p, seed, clip)
        if key not in cls.runs:
            out = os.path.join(
                cls.dir, f"g{gpus}a{accumulate}d{int(deterministic)}"
                f"_{decay}_p{dropout_p}_s{seed}_c{clip}.safetensors")
            extra = [] if seed is None else ["--seed", seed]
            if clip is not None:
                extra += ["--clip_grad_norm", clip]
            e2e.train(cls.train_file(decay, dropout_p), "--device", "cpu",
                      "--gpus", gpus, "--accumulate", accumulate,
                      "--micro_batch", MICRO_BATCH, "--no-eval",
                      "--init-from", cls.init_path,
                      "--deterministic", "true" if deterministic else "false",
                      *extra, "--save", out)
            tensors = e2e.read_safetensors(out)[0]
            cls.runs[key] = e2e.parameters_of(tensors)
        return cls.runs[key]

    def assert_matches(self, got, ref, what):
        """The worst relative difference over the parameters."""
        return e2e.assert_close_to_reference(self, got, ref, TOLERANCE, what)

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

    def test_clipping_matches_pytorch_clip_grad_norm(self):
        # The global norm is taken after the all-reduce (never per rank or
        # per micro-step), so every split matches torch's clip_grad_norm_
        # on the whole step's gradient.
        clip = 0.05
        norms = []
        ref = reference(self.init, self.tokens, DECAY, clip=clip, norms=norms)
        self.assertTrue(all(n > clip for n in norms),
                        f"clipping must be active every step: norms {norms}")
        for name, want in ref.items():
            self.assertGreater(e2e.rel_diff(want, self.ref[name]), 10 * TOLERANCE,
                               f"{name}: clipped and unclipped references "
                               "must differ")
        for gpus, acc in SPLITS:
            got = self.run_split(gpus, acc, False, clip=clip)
            self.assert_matches(got, ref, f"clip gpus={gpus} accumulate={acc}")
        a = self.run_split(1, 4, True, clip=clip)
        b = self.run_split(4, 1, True, clip=clip)
        for name in a:
            self.assertTrue(np.array_equal(a[name].view(np.uint32),
                                           b[name].view(np.uint32)),
                            f"{name}: clipped 1x4 and 4x1 differ bitwise")

    def test_decay_all_matches_pytorch(self):
        # The two references differ by far more than the tolerance in every
        # 1-D parameter (decayed or not), so the comparison tells them apart.
        for name, a in self.refs[("all", None, SEED)].items():
            if a.ndim < 2:
                self.assertGreater(e2e.rel_diff(a, self.ref[name]),
                                   10 * TOLERANCE, name)
        worst = self.assert_matches(
            self.run_split(1, 4, deterministic=False, decay="all"),
            self.refs[("all", None, SEED)],
            'decay = "all" gpus=1 accumulate=4')
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
            ours = e2e.rel_diff(got[name], start)
            theirs = e2e.rel_diff(self.ref[name], start)
            self.assertGreater(ours, 100 * TOLERANCE,
                               f"{name} barely moved in trainc ({ours:.3g})")
            self.assertGreater(theirs, 100 * TOLERANCE,
                               f"{name} barely moved in PyTorch ({theirs:.3g})")

    # --- dropout -----------------------------------------------------------

    def assert_bit_identical(self, a, b, what):
        self.assertEqual(sorted(a), sorted(b))
        for name in a:
            self.assertTrue(np.array_equal(a[name].view(np.uint32),
                                           b[name].view(np.uint32)),
                            f"{name} differs bitwise: {what}")

    def test_dropout_mask_helpers(self):
        # Guards the test's own Philox, FNV-1a and mask: Random123's
        # kat_vectors (philox4x32 10) and FNV-1a's published values.
        for counter, key, want in [
                ((0, 0, 0, 0), (0, 0),
                 (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
                ((0xffffffff,) * 4, (0xffffffff,) * 2,
                 (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
                ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344),
                 (0xa4093822, 0x299f31d0),
                 (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]:
            self.assertEqual(tuple(int(w) for w in philox4x32_10(counter, key)),
                             want)
        self.assertEqual(fnv1a32(""), 0x811c9dc5)
        self.assertEqual(fnv1a32("a"), 0xe40c292c)
        self.assertEqual(fnv1a32("foobar"), 0xbf9cf968)
        f = dropout_factors(SEED, fnv1a32("emb"), np.arange(40), CTX * WIDTH,
                            DROPOUT_P)
        kept = np.float64(np.float32(1) / np.float32(0.9))
        self.assertTrue(np.all((f == 0) | (f == kept)))
        # 20480 draws: the fraction dropped within 6 sd (0.0021) of p.
        self.assertAlmostEqual(float(np.mean(f == 0)), DROPOUT_P, delta=0.013)

    def test_dropout_value_names(self):
        # The keys of the reference's masks hash these names: they must be
        # the dropout statements' value names that trainc prints.
        out = e2e.train(self.train_file(dropout_p=DROPOUT_P),
                        "--compile-only").stdout
        names = [line.split("=")[0].strip() for line in out.splitlines()
                 if "= dropout(" in line]
        self.assertEqual(names, dropout_names(), out)

    def test_dropout_bit_identical_across_splits(self):
        # Split independence: global example s*G + j draws the same mask
        # whichever rank and micro-step computes it.
        first = self.run_split(*SPLITS[0], True, dropout_p=DROPOUT_P)
        for gpus, acc in SPLITS[1:]:
            self.assert_bit_identical(
                first, self.run_split(gpus, acc, True, dropout_p=DROPOUT_P),
                f"dropout p={DROPOUT_P}, deterministic, gpus=1 accumulate=4 "
                f"vs gpus={gpus} accumulate={acc}")

    def test_dropout_matches_pytorch_with_the_same_masks(self):
        ref = self.reference_for(DROPOUT_P)
        # The masks matter far more than the tolerance: the dropout
        # reference is far from the plain one in every parameter.
        for name, want in ref.items():
            self.assertGreater(e2e.rel_diff(want, self.ref[name]),
                               10 * TOLERANCE, name)
        worst = {}
        for deterministic in (False, True):
            for gpus, acc in SPLITS:
                worst[(gpus, acc, deterministic)] = self.assert_matches(
                    self.run_split(gpus, acc, deterministic,
                                   dropout_p=DROPOUT_P), ref,
                    f"dropout p={DROPOUT_P} gpus={gpus} accumulate={acc} "
                    f"deterministic={deterministic}")
        print(f"\ndropout p={DROPOUT_P}: max relative difference from "
              "PyTorch float64 with the same masks: " +
              ", ".join(f"{g}x{a}{' det' if d else ''}: {r:.3g}"
                        for (g, a, d), r in worst.items()))

    def test_dropout_mask_depends_on_the_seed(self):
        # Control: another seed (differing only in its high 32 bits, the
        # Philox key's second word) draws other masks, so other weights in
        # every parameter, and the reference follows it.
        base = self.run_split(1, 4, True, dropout_p=DROPOUT_P)
        other = self.run_split(1, 4, True, dropout_p=DROPOUT_P,
                               seed=OTHER_SEED)
        for name in base:
            self.assertGreater(e2e.rel_diff(other[name], base[name]),
                               10 * TOLERANCE,
                               f"{name}: seed {OTHER_SEED} vs {SEED}")
        worst = self.assert_matches(
            other, self.reference_for(DROPOUT_P, OTHER_SEED),
            f"dropout p={DROPOUT_P} seed={OTHER_SEED} gpus=1 accumulate=4")
        print(f"\ndropout seed={OTHER_SEED}, 1x4: max relative difference "
              f"{worst:.3g}")

    def test_dropout_p_zero_is_no_dropout(self):
        # p = 0 keeps every element with factor exactly 1: the same
        # weights, bit for bit, as the model without dropout ops.
        for gpus, acc in (SPLITS[0], SPLITS[-1]):
            self.assert_bit_identical(
                self.run_split(gpus, acc, True, dropout_p=0.0),
                self.run_split(gpus, acc, True),
                f"dropout p=0 vs no dropout, gpus={gpus} accumulate={acc}")


if __name__ == "__main__":
    unittest.main()
