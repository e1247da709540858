"""RMSNorm on small activations against PyTorch float64.

A Llama's residual stream starts at the scale of its embeddings (std 0.02),
where mean(x^2) = 4e-4 is only 40 times an eps of 1e-5: there, where eps
goes matters (x / sqrt(mean(x^2) + eps), Llama's and transformers'
LlamaRMSNorm, against x / (sqrt(mean(x^2)) + eps), ~1.2 % apart), while the
unit-scale tests cannot tell the two apart.

The model is the smallest that runs the rmsnorm forward and both of its
backward instructions in a real plan: bytes, embeddings of RMS 0.02, one
rmsnorm(eps = 1e-5) with random weights, a linear head, cross entropy.
trainc runs one SGD step (lr 1, no momentum, no decay) from weights this
test writes (--init-from), so each parameter's gradient is its initial value
minus its saved one. The reference is the same computation written here
with torch in float64 and autograd (not from trainc's code). Checks:
  - the first step's loss, and the gradient of every parameter (the head's
    reads the forward's output, the rmsnorm weight's its dweight, the
    embedding's its dx), within 1e-4 relative of the reference;
  - control: the reference with eps outside the square root differs from
    trainc's gradients by over 20 times that tolerance, so the check sees
    where eps is.
"""
import json
import os
import unittest

import numpy as np

import e2e_lib as e2e

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

VOCAB, CTX, WIDTH, BATCH, EPS = 256, 16, 64, 4, 1e-5
EMBED_STD = 0.02           # the activations' RMS at the rmsnorm
TOLERANCE = 1e-4

MODEL = f"""
model rms_small {{
  const vocab = {VOCAB}, ctx = {CTX}, width = {WIDTH}

  input  tokens: i32[ctx]
  label  next:   i32[ctx]

  emb    = embedding(tokens, vocab, width)
  norm   = rmsnorm(emb, eps = {EPS})
  logits = linear(norm, vocab, bias = false)
  loss   = cross_entropy(logits, next)
}}

data {{
  train   = text("TEXT")
  shuffle = false
}}

train {{
  gpus        = 1
  micro_batch = {BATCH}
  accumulate  = 1
  steps       = 1
  optimizer   = sgd(lr = 1)
  seed        = 0
}}
"""


def initial_weights():
    rng = np.random.RandomState(5)
    return {
        "emb.weight": (rng.standard_normal((VOCAB, WIDTH)) * EMBED_STD).astype(np.float32),
        "norm.weight": (1 + 0.3 * rng.standard_normal(WIDTH)).astype(np.float32),
        "logits.weight": (rng.standard_normal((VOCAB, WIDTH)) * 0.2).astype(np.float32),
    }


def reference(init, windows, eps_outside=False):
    """The loss and {name: gradient} in float64, from RMSNorm's definition
    (or, for the control, with eps outside the square root)."""
    p = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in init.items()}
    x = F.embedding(windows[:, :-1], p["emb.weight"])
    ms = x.pow(2).mean(-1, keepdim=True)
    s = ms.sqrt() + EPS if eps_outside else (ms + EPS).sqrt()
    y = x / s * p["norm.weight"]
    logits = y @ p["logits.weight"].t()
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1))
    loss.backward()
    return float(loss), {k: v.grad.numpy() for k, v in p.items()}


class RmsNormReferenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch, fashion_mnist=False)
        cls.dir = e2e.tmpdir()
        rng = np.random.RandomState(11)
        data = rng.randint(32, 127, size=BATCH * CTX + 100).astype(np.uint8)
        text = os.path.join(cls.dir, "corpus.txt")
        with open(text, "wb") as f:
            f.write(data.tobytes())
        model = os.path.join(cls.dir, "rms_small.train")
        with open(model, "w") as f:
            f.write(MODEL.replace("TEXT", text))
        cls.init = initial_weights()
        init_path = os.path.join(cls.dir, "init.safetensors")
        e2e.write_safetensors(init_path, cls.init)
        out = os.path.join(cls.dir, "after.safetensors")
        metrics = os.path.join(cls.dir, "metrics.jsonl")
        e2e.train(model, "--device", "cpu", "--no-eval", "--init-from", init_path,
                  "--save", out, "--metrics", metrics)
        after = e2e.parameters_of(e2e.read_safetensors(out)[0])
        # One SGD step at lr 1: the gradient is what the step subtracted.
        cls.grads = {k: cls.init[k].astype(np.float64) - after[k].astype(np.float64)
                     for k in cls.init}
        with open(metrics) as f:
            cls.losses = [json.loads(line)["loss"] for line in f if '"kind":"train"' in line]
        # With shuffle = false, window i is bytes [i*T, i*T + T].
        windows = torch.tensor(np.stack([data[i * CTX:i * CTX + CTX + 1]
                                         for i in range(BATCH)]).astype(np.int64))
        cls.windows = windows
        cls.ref_loss, cls.ref = reference(cls.init, windows)

    def test_the_activations_are_small(self):
        x = self.init["emb.weight"][self.windows[:, :-1].numpy()].astype(np.float64)
        rms = float(np.sqrt((x ** 2).mean()))
        self.assertGreater(rms, 0.015)
        self.assertLess(rms, 0.025)

    def test_loss_and_gradients_match_pytorch_float64(self):
        self.assertEqual(len(self.losses), 1)
        self.assertLessEqual(abs(self.losses[0] - self.ref_loss) / self.ref_loss, 1e-5,
                             f"loss {self.losses[0]} against {self.ref_loss}")
        for name, want in self.ref.items():
            rel = e2e.rel_diff(self.grads[name], want)
            self.assertLessEqual(rel, TOLERANCE,
                                 f"{name}: gradient {rel:.3g} from PyTorch float64")

    def test_eps_outside_the_square_root_is_seen(self):
        _, outside = reference(self.init, self.windows, eps_outside=True)
        worst = max(e2e.rel_diff(self.grads[k], outside[k]) for k in outside)
        self.assertGreater(worst, 20 * TOLERANCE)


if __name__ == "__main__":
    unittest.main()
