"""Rotary positions and grouped-query heads against Hugging Face transformers.

A one-layer attention model (bytes, context 48, 4 query heads over 2
key/value heads of 16, `rope = true`) is written as a .train file with
weights this test draws; trainc scores held-out text with them (one step at
a negligible learning rate, then its eval). The reference is the same
computation in float64 built from transformers 4.36.2's own Llama pieces
(LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv; tools/setup.sh's
virtual environment over Debian's torch), not from trainc's code: the two
eval losses must agree within 1e-4 relative. Controls: the same reference
without rotary positions, and with the other common pairing of features
(GPT-J's interleaved pairs), each differ from trainc's loss by far more, so
the check sees which convention is used. Without that environment (no
PyPI) the test skips, saying so.
"""
import json
import os
import random
import subprocess
import unittest

import e2e_lib as e2e

HF_PYTHON = os.path.join(os.path.expanduser("~"), ".cache", "trainc", "hf-venv", "bin", "python")
T, WIDTH, HEADS, KV_HEADS, D = 48, 64, 4, 2, 16

MODEL = f"""
model rope_gqa {{
  const vocab = 256, ctx = {T}, width = {WIDTH}, heads = {HEADS}, kv = {KV_HEADS}, d = {D}

  input  tokens: i32[ctx]
  label  next:   i32[ctx]

  wte    = embedding(tokens, vocab, width)
  qkv    = linear(wte, (heads + 2 * kv) * d, bias = false)
  att    = causal_attention(qkv, heads, kv_heads = kv, rope = true, rope_theta = 10000)
  o_proj = linear(att, width, bias = false)
  logits = linear(wte + o_proj, vocab, bias = false)
  loss   = cross_entropy(logits, next)
}}

data {{
  train = text("TRAIN")
  eval  = text("EVAL")
}}

train {{
  gpus = 1
  micro_batch = 2
  steps = 1
  optimizer = sgd(lr = 1e-30)
}}
"""

# Writes the weights (seeded) as a safetensors file of trainc's names.
WEIGHTS = f"""
import sys, torch
from safetensors.torch import save_file
g = torch.Generator().manual_seed(3)
w = {{
    "wte.weight": torch.randn(256, {WIDTH}, generator=g) * 0.5,
    "qkv.weight": torch.randn(({HEADS} + 2 * {KV_HEADS}) * {D}, {WIDTH}, generator=g) * 0.3,
    "o_proj.weight": torch.randn({WIDTH}, {HEADS} * {D}, generator=g) * 0.2,
    "logits.weight": torch.randn(256, {WIDTH}, generator=g) * 0.2,
}}
save_file(w, sys.argv[1])
"""

# The reference: the same model in float64 with transformers' rotary
# embedding, apply_rotary_pos_emb and repeat_kv; argv[3] picks the pairing
# ("rotate_half", "none", "interleaved").
SCORE = f"""
import sys, torch
from safetensors.torch import load_file
from transformers.models.llama.modeling_llama import (
    LlamaRotaryEmbedding, apply_rotary_pos_emb, repeat_kv)
w = {{k: v.double() for k, v in load_file(sys.argv[1]).items()}}
data = torch.tensor(list(open(sys.argv[2], "rb").read()), dtype=torch.long)
mode = sys.argv[3]
H, KV, D, T = {HEADS}, {KV_HEADS}, {D}, {T}
rope = LlamaRotaryEmbedding(D, max_position_embeddings=T, base=10000)

def rotate(x, cos, sin):
    if mode == "interleaved":  # GPT-J's pairs (2i, 2i + 1)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        c, s = cos[..., : D // 2], sin[..., : D // 2]
        return torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    return x

def forward(tokens):
    x = w["wte.weight"][tokens][None]                       # [1, T, C]
    qkv = x @ w["qkv.weight"].T
    q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)
    q = q.view(1, T, H, D).transpose(1, 2)
    k = k.view(1, T, KV, D).transpose(1, 2)
    v = v.view(1, T, KV, D).transpose(1, 2)
    cos, sin = rope(v, seq_len=T)                            # f32 tables, as transformers
    cos, sin = cos.double(), sin.double()
    pos = torch.arange(T)[None]
    if mode == "rotate_half":
        q, k = apply_rotary_pos_emb(q, k, cos, sin, pos)
    elif mode == "interleaved":
        q, k = rotate(q, cos[pos][:, None], sin[pos][:, None]), rotate(k, cos[pos][:, None], sin[pos][:, None])
    k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
    s = q @ k.transpose(-1, -2) / D ** 0.5
    s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    y = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, T, H * D)
    h = x + y @ w["o_proj.weight"].T
    return (h @ w["logits.weight"].T)[0]

windows = (len(data) - 1) // T
total = 0.0
with torch.no_grad():
    for i in range(windows):
        win = data[i * T:i * T + T + 1]
        total += torch.nn.functional.cross_entropy(forward(win[:T]), win[1:]).item()
print(f"LOSS {{total / windows:.12f}}")
"""


def hf_available():
    if not os.path.exists(HF_PYTHON):
        return False
    return subprocess.run([HF_PYTHON, "-c", "import transformers, torch, safetensors"],
                          capture_output=True).returncode == 0


class RopeTransformersTest(unittest.TestCase):

    def setUp(self):
        if not hf_available():
            self.skipTest(f"no transformers at {HF_PYTHON} (tools/setup.sh installs it from PyPI)")
        self.dir = e2e.tmpdir()

    def write_model(self):
        rng = random.Random(11)
        paths = {"TRAIN": os.path.join(self.dir, "train.txt"),
                 "EVAL": os.path.join(self.dir, "eval.txt")}
        for key, n in (("TRAIN", 8 * T + 1), ("EVAL", 6 * T + 1)):
            with open(paths[key], "wb") as f:
                f.write(bytes(rng.choice(b"etaoin shrdlu") for _ in range(n)))
        source = MODEL
        for key, path in paths.items():
            source = source.replace(f'"{key}"', f'"{path}"')
        model = os.path.join(self.dir, "rope.train")
        with open(model, "w") as f:
            f.write(source)
        return model, paths["EVAL"]

    def reference(self, weights, eval_text, mode):
        proc = subprocess.run([HF_PYTHON, "-c", SCORE, weights, eval_text, mode],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return float(proc.stdout.split("LOSS")[1])

    def test_rope_and_grouped_heads_score_as_transformers(self):
        model, eval_text = self.write_model()
        weights = os.path.join(self.dir, "w.safetensors")
        made = subprocess.run([HF_PYTHON, "-c", WEIGHTS, weights], capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(made.returncode, 0, made.stderr)
        metrics = os.path.join(self.dir, "m.jsonl")
        e2e.train(model, "--device", "cpu", "--init-from", weights, "--metrics", metrics)
        with open(metrics) as f:
            got = [json.loads(line) for line in f if '"summary"' in line][-1]["eval_loss"]
        want = self.reference(weights, eval_text, "rotate_half")
        none = self.reference(weights, eval_text, "none")
        interleaved = self.reference(weights, eval_text, "interleaved")
        print(f"eval loss: trainc {got:.9f}, transformers rotate_half {want:.9f} "
              f"(no rope {none:.9f}, interleaved pairs {interleaved:.9f})")
        self.assertLess(abs(got - want) / want, 1e-4)
        # The controls are far outside that tolerance: the test can tell.
        self.assertGreater(abs(got - none) / want, 1e-2)
        self.assertGreater(abs(got - interleaved) / want, 1e-2)


if __name__ == "__main__":
    unittest.main()
