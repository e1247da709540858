"""group_norm against PyTorch's nn.GroupNorm in float64.

Two of the smallest models that run group_norm's forward and both of its
backward instructions in a real plan, one per layout the op takes:
  - an image [C, H, W] (channels first): Fashion-MNIST through a 3x3
    conv2d to 6 channels, group_norm(groups = 3), flatten, a linear head,
    cross entropy;
  - a sequence [T, C] (channels last): bytes, an embedding of width 8,
    group_norm(groups = 4), a linear head, cross entropy per token. PyTorch
    normalizes channels on axis 1, so the reference transposes to [N, C, T]
    and back.
trainc runs one SGD step (lr 1, no momentum, no decay) from weights this
test writes (--init-from), group_norm's weight and bias random rather than
ones and zeros so their gradients reach every operand, and each parameter's
gradient is its initial value minus its saved one. The reference is the
same model written here with torch.nn.GroupNorm in float64 and autograd
(not from trainc's code). Checks:
  - the first step's loss, within 1e-5 relative, and the gradient of every
    parameter (the head's reads the forward's output, the group_norm's
    weight and bias their gradient op, the conv's or embedding's the input
    gradient), within 1e-4 relative of the reference;
  - control: the reference with one group instead (a LayerNorm over all
    channels) is over 20 times that tolerance from trainc's gradients, so
    the check sees where the groups are.
"""
import json
import os
import unittest

import numpy as np

import e2e_lib as e2e

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

TOLERANCE = 1e-4
EPS = 1e-5

TRAIN = """
train {
  gpus        = 1
  micro_batch = BATCH
  accumulate  = 1
  steps       = 1
  optimizer   = sgd(lr = 1)
  seed        = 0
}
"""

IMAGE_BATCH, CHANNELS, IMAGE_GROUPS = 4, 6, 3
IMAGE_MODEL = f"""
model gn_image {{
  input  image: f32[1, 28, 28]
  label  class: i32[10]

  c      = conv2d(image, {CHANNELS}, kernel = 3, padding = 1)   # [6, 28, 28]
  n      = group_norm(c, {IMAGE_GROUPS}, eps = {EPS})
  logits = linear(flatten(n), 10)
  loss   = cross_entropy(logits, class)
}}

data {{
  train   = idx("{e2e.TRAIN_IMAGES}", "{e2e.TRAIN_LABELS}")
  scale   = 1/255
  shuffle = false
}}
""" + TRAIN.replace("BATCH", str(IMAGE_BATCH))

VOCAB, CTX, WIDTH, SEQ_BATCH, SEQ_GROUPS = 256, 12, 8, 3, 4
SEQUENCE_MODEL = f"""
model gn_sequence {{
  const vocab = {VOCAB}, ctx = {CTX}, width = {WIDTH}

  input  tokens: i32[ctx]
  label  next:   i32[ctx]

  emb    = embedding(tokens, vocab, width)
  n      = group_norm(emb, {SEQ_GROUPS}, eps = {EPS})
  logits = linear(n, vocab, bias = false)
  loss   = cross_entropy(logits, next)
}}

data {{
  train   = text("TEXT")
  shuffle = false
}}
""" + TRAIN.replace("BATCH", str(SEQ_BATCH))


def one_step(cls, name, model_text, init):
    """Trains `model_text` one step from `init`: ({name: gradient}, loss)."""
    model = os.path.join(cls.dir, name + ".train")
    with open(model, "w") as f:
        f.write(model_text)
    init_path = os.path.join(cls.dir, name + ".init.safetensors")
    e2e.write_safetensors(init_path, init)
    out = os.path.join(cls.dir, name + ".after.safetensors")
    metrics = os.path.join(cls.dir, name + ".metrics.jsonl")
    e2e.train(model, "--device", "cpu", "--no-eval", "--init-from", init_path,
              "--save", out, "--metrics", metrics)
    after = e2e.parameters_of(e2e.read_safetensors(out)[0])
    # One SGD step at lr 1: the gradient is what the step subtracted.
    grads = {k: init[k].astype(np.float64) - after[k].astype(np.float64) for k in init}
    with open(metrics) as f:
        losses = [json.loads(line)["loss"] for line in f if '"kind":"train"' in line]
    assert len(losses) == 1, losses
    return grads, losses[0]


def leaf(p):
    return {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in p.items()}


def group_norm(x, groups, weight, bias):
    """nn.GroupNorm with the given parameters, on [N, C, ...]."""
    gn = nn.GroupNorm(groups, x.shape[1], eps=EPS).double()
    with torch.no_grad():
        gn.weight.copy_(weight)
        gn.bias.copy_(bias)
    # The module's own parameters get the gradients; hand them back.
    y = gn(x)
    return y, gn


def image_reference(init, images, labels, groups=IMAGE_GROUPS):
    p = leaf(init)
    x = torch.tensor(images, dtype=torch.float64).unsqueeze(1) / 255
    c = F.conv2d(x, p["c.weight"], p["c.bias"], padding=1)
    n, gn = group_norm(c, groups, p["n.weight"], p["n.bias"])
    logits = torch.flatten(n, 1) @ p["logits.weight"].t() + p["logits.bias"]
    loss = F.cross_entropy(logits, torch.tensor(labels.astype(np.int64)))
    loss.backward()
    grads = {k: v.grad.numpy() for k, v in p.items() if v.grad is not None}
    grads["n.weight"], grads["n.bias"] = gn.weight.grad.numpy(), gn.bias.grad.numpy()
    return float(loss), grads


def sequence_reference(init, windows, groups=SEQ_GROUPS):
    p = leaf(init)
    x = F.embedding(windows[:, :-1], p["emb.weight"])           # [N, T, C]
    n, gn = group_norm(x.transpose(1, 2), groups, p["n.weight"], p["n.bias"])
    logits = n.transpose(1, 2) @ p["logits.weight"].t()
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1))
    loss.backward()
    grads = {k: v.grad.numpy() for k, v in p.items() if v.grad is not None}
    grads["n.weight"], grads["n.bias"] = gn.weight.grad.numpy(), gn.bias.grad.numpy()
    return float(loss), grads


class GroupNormTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch)
        cls.dir = e2e.tmpdir()
        rng = np.random.RandomState(7)
        cls.image_init = {
            "c.weight": (rng.standard_normal((CHANNELS, 1, 3, 3)) * 0.3).astype(np.float32),
            "c.bias": (rng.standard_normal(CHANNELS) * 0.1).astype(np.float32),
            "n.weight": (1 + 0.3 * rng.standard_normal(CHANNELS)).astype(np.float32),
            "n.bias": (0.2 * rng.standard_normal(CHANNELS)).astype(np.float32),
            "logits.weight": (rng.standard_normal((10, CHANNELS * 28 * 28)) * 0.02)
                             .astype(np.float32),
            "logits.bias": (rng.standard_normal(10) * 0.1).astype(np.float32),
        }
        cls.seq_init = {
            "emb.weight": rng.standard_normal((VOCAB, WIDTH)).astype(np.float32),
            "n.weight": (1 + 0.3 * rng.standard_normal(WIDTH)).astype(np.float32),
            "n.bias": (0.2 * rng.standard_normal(WIDTH)).astype(np.float32),
            "logits.weight": (rng.standard_normal((VOCAB, WIDTH)) * 0.2).astype(np.float32),
        }
        cls.image_grads, cls.image_loss = one_step(cls, "image", IMAGE_MODEL, cls.image_init)
        cls.images = e2e.read_idx(e2e.TRAIN_IMAGES, IMAGE_BATCH)
        cls.labels = e2e.read_idx(e2e.TRAIN_LABELS, IMAGE_BATCH)

        data = rng.randint(32, 127, size=SEQ_BATCH * CTX + 100).astype(np.uint8)
        text = os.path.join(cls.dir, "corpus.txt")
        with open(text, "wb") as f:
            f.write(data.tobytes())
        cls.seq_grads, cls.seq_loss = one_step(
            cls, "sequence", SEQUENCE_MODEL.replace("TEXT", text), cls.seq_init)
        # With shuffle = false, window i is bytes [i*T, i*T + T].
        cls.windows = torch.tensor(np.stack([data[i * CTX:i * CTX + CTX + 1]
                                             for i in range(SEQ_BATCH)]).astype(np.int64))

    def check(self, grads, loss, ref_loss, ref):
        self.assertLessEqual(abs(loss - ref_loss) / ref_loss, 1e-5,
                             f"loss {loss} against {ref_loss}")
        self.assertEqual(sorted(ref), sorted(grads))
        for name, want in ref.items():
            rel = e2e.rel_diff(grads[name], want)
            self.assertLessEqual(rel, TOLERANCE,
                                 f"{name}: gradient {rel:.3g} from PyTorch float64")
            self.assertGreater(np.abs(want).max(), 0, f"{name}: no gradient to compare")

    def test_image_matches_nn_group_norm(self):
        ref_loss, ref = image_reference(self.image_init, self.images, self.labels)
        self.check(self.image_grads, self.image_loss, ref_loss, ref)

    def test_sequence_matches_nn_group_norm(self):
        ref_loss, ref = sequence_reference(self.seq_init, self.windows)
        self.check(self.seq_grads, self.seq_loss, ref_loss, ref)

    def test_one_group_instead_is_seen(self):
        _, image = image_reference(self.image_init, self.images, self.labels, groups=1)
        _, seq = sequence_reference(self.seq_init, self.windows, groups=1)
        worst_image = max(e2e.rel_diff(self.image_grads[k], image[k]) for k in image)
        worst_seq = max(e2e.rel_diff(self.seq_grads[k], seq[k]) for k in seq)
        self.assertGreater(worst_image, 20 * TOLERANCE)
        self.assertGreater(worst_seq, 20 * TOLERANCE)


if __name__ == "__main__":
    unittest.main()
