"""The CNN example trained by trainc against an independent PyTorch reference.

The test takes dsl_examples/fashion_cnn.train (conv2d, max_pool2d, flatten,
linear, relu, cross_entropy) and writes a test copy of it with five changes,
none of them to the model's layers or parameters:
  - no augmentation (the example's random_flip line removed): the reference
    reads the images as they are;
  - shuffle = false, so that global batch s is examples s*G .. s*G + G - 1
    of the file (runtime/data/sampler.h: the identity permutation), however
    it is split into ranks and micro-steps;
  - the dropout (p = 0.3) before the classifier removed: the test copy says
    `h = relu(linear(flatten(p2), 256))`, so the parameters keep their names
    (h.weight, h.bias). Dropout's masks are checked against a reference
    applying the same masks by gpt_equivalence_test.py; here they would only
    add a second copy of that Philox code;
  - SGD with momentum (lr 0.05, momentum 0.9, no weight decay) instead of
    AdamW: its step is proportional to the gradient, so a wrong loss scale
    (1/micro_batch where 1/global_batch belongs) or a wrong gradient of any
    op shows in full, where Adam's normalisation would hide most of it (see
    equivalence_test.py);
  - schedule = constant instead of cosine(warmup = 100), whose first 5 steps
    would have learning rates near 0.
Everything else comes from the command line as in equivalence_test.py:
--device cpu, --gpus, --accumulate, --micro_batch 16 (a global batch of
64), --steps 5, --no-eval, --init-from initial weights written here
(PyTorch's default init, U(+-1/sqrt(fan_in)), biases included, with
PyTorch's names and layouts: <stmt>.weight [out, in, kh, kw]).

The reference is a float64 PyTorch module written here from the .train
file's definition (nn.Conv2d with padding 1, F.relu, F.max_pool2d(2),
torch.flatten(x, 1), nn.Linear, F.cross_entropy, the mean over the global
batch), not from trainc's code, loaded with load_state_dict(strict=True) and
fed the same Fashion-MNIST examples, read by e2e_lib's own IDX
reader, scaled by 1/255.

Checks:
  - splits gpus x accumulate = 1 x 4 and 2 x 2, deterministic off and on:
    every parameter within 1e-5 relative (max abs difference / max abs) of
    the reference after 5 steps, and moved from its initial value by far
    more (100x the tolerance), in trainc and in the reference;
  - with --deterministic true the two splits are bit for bit identical;
  - controls, so that the comparison can fail: a doubled loss, kernels
    flipped (true convolution instead of PyTorch's cross-correlation) and
    average instead of max pooling each move every parameter of the
    reference far beyond the tolerance.
"""
import os
import unittest

import numpy as np

import e2e_lib as e2e
# The MLP test's IDX reader and data paths: one reader of our own for both.

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

EXAMPLE = e2e.runfile("dsl_examples/fashion_cnn.train")
STEPS = 5
MICRO_BATCH = 16
GLOBAL_BATCH = 64         # = gpus x micro_batch x accumulate for every split
SPLITS = [(1, 4), (2, 2)]
TOLERANCE = 1e-5
SGD = dict(lr=0.05, momentum=0.9)
SGD_LINE = "optimizer   = sgd(lr = 0.05, momentum = 0.9, weight_decay = 0)"

# The example's model, as the reference below implements it: if the example
# changes, the test says so instead of comparing with another model.
EXAMPLE_MODEL = [
    "input  image: f32[1, 28, 28]",
    "c1     = relu(conv2d(image, 32, kernel = 3, padding = 1))",
    "p1     = max_pool2d(c1, 2)",
    "c2     = relu(conv2d(p1, 64, kernel = 3, padding = 1))",
    "p2     = max_pool2d(c2, 2)",
    "logits = linear(h, 10)",
    "loss   = cross_entropy(logits, class)",
    "scale   = 1/255",
]
WITH_DROPOUT = "dropout(relu(linear(flatten(p2), 256)), p = 0.3)"
WITHOUT_DROPOUT = "relu(linear(flatten(p2), 256))"

# name, shape (PyTorch's layouts)
PARAMETERS = [
    ("c1.weight", (32, 1, 3, 3)), ("c1.bias", (32,)),
    ("c2.weight", (64, 32, 3, 3)), ("c2.bias", (64,)),
    ("h.weight", (256, 64 * 7 * 7)), ("h.bias", (256,)),
    ("logits.weight", (10, 256)), ("logits.bias", (10,)),
]


def initial_weights(seed=11):
    """PyTorch's default init of nn.Conv2d and nn.Linear, U(+-1/sqrt(fan_in))
    for weights and biases alike (fan_in = in x kh x kw for a convolution)."""
    rng = np.random.RandomState(seed)
    w = {}
    for name, shape in PARAMETERS:
        layer = name.rsplit(".", 1)[0]
        weight_shape = dict(PARAMETERS)[layer + ".weight"]
        bound = 1 / np.sqrt(np.prod(weight_shape[1:]))
        w[name] = rng.uniform(-bound, bound, shape).astype(np.float32)
    return w


if torch is not None:

    class FashionCnn(nn.Module):
        """dsl_examples/fashion_cnn.train without its dropout. The controls:
        grad_scale multiplies the loss; flip_kernels convolves (kernels
        rotated by 180 degrees) where PyTorch cross-correlates; avg_pool
        averages where the model takes the maximum."""

        def __init__(self, grad_scale=1.0, flip_kernels=False, avg_pool=False):
            super().__init__()
            self.c1 = nn.Conv2d(1, 32, kernel_size=3, padding=1)
            self.c2 = nn.Conv2d(32, 64, kernel_size=3, padding=1)
            self.h = nn.Linear(64 * 7 * 7, 256)
            self.logits = nn.Linear(256, 10)
            self.grad_scale = grad_scale
            self.flip_kernels = flip_kernels
            self.pool = F.avg_pool2d if avg_pool else F.max_pool2d

        def conv(self, layer, x):
            w = layer.weight.flip(-2, -1) if self.flip_kernels else layer.weight
            return F.conv2d(x, w, layer.bias, padding=1)

        def forward(self, image, label):
            x = self.pool(F.relu(self.conv(self.c1, image)), 2)   # [32, 14, 14]
            x = self.pool(F.relu(self.conv(self.c2, x)), 2)       # [64, 7, 7]
            x = F.relu(self.h(torch.flatten(x, 1)))
            # The mean over the global batch.
            return F.cross_entropy(self.logits(x), label) * self.grad_scale


def reference(init, images, labels, **controls):
    """Final float64 weights after STEPS SGD steps, global batch s being
    examples s*G .. s*G + G - 1 (shuffle = false)."""
    model = FashionCnn(**controls).double()
    model.load_state_dict(
        {k: torch.from_numpy(v.astype(np.float64)) for k, v in init.items()},
        strict=True)
    opt = torch.optim.SGD(model.parameters(), lr=SGD["lr"],
                          momentum=SGD["momentum"])
    G = GLOBAL_BATCH
    for s in range(STEPS):
        x = torch.from_numpy(images[s * G:(s + 1) * G].astype(np.float64)
                             .reshape(G, 1, 28, 28)) / 255
        y = torch.from_numpy(labels[s * G:(s + 1) * G].astype(np.int64))
        opt.zero_grad(set_to_none=True)
        model(x, y).backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


class CnnEquivalenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch)
        e2e.set_up_reference(cls, STEPS * GLOBAL_BATCH, initial_weights(seed=11 + e2e.SEED))
        cls.train_path = cls.write_train_file()
        cls.ref = reference(cls.init, cls.images, cls.labels)
        cls.runs = {}

    @classmethod
    def write_train_file(cls):
        """The example with shuffle = false, no augmentation, no dropout, SGD,
        constant lr."""
        with open(EXAMPLE) as f:
            text = f.read()
        for line in EXAMPLE_MODEL:
            assert line in text, f"the example changed: no '{line}'"
        for old, new in [("shuffle = true", "shuffle = false"),
                         (WITH_DROPOUT, WITHOUT_DROPOUT)]:
            assert text.count(old) == 1, f"the example changed: '{old}'"
            text = text.replace(old, new)
        # No augmentation: the reference reads the images as they are.
        text = "\n".join(l for l in text.splitlines()
                         if not l.strip().startswith(("random_flip", "random_crop")))
        for field, new in [("optimizer", SGD_LINE),
                           ("schedule", "schedule    = constant")]:
            lines = [l for l in text.splitlines()
                     if l.strip().startswith(field) and "=" in l]
            assert len(lines) == 1, lines
            text = text.replace(lines[0], "  " + new)
        path = os.path.join(cls.dir, "fashion_cnn_test.train")
        with open(path, "w") as f:
            f.write(text)
        return path

    @classmethod
    def run_split(cls, gpus, accumulate, deterministic):
        key = (gpus, accumulate, deterministic)
        if key not in cls.runs:
            out = os.path.join(cls.dir, f"g{gpus}a{accumulate}"
                               f"d{int(deterministic)}.safetensors")
            e2e.train(cls.train_path, "--device", "cpu", "--gpus", gpus,
                      "--accumulate", accumulate, "--micro_batch", MICRO_BATCH,
                      "--steps", STEPS, "--no-eval", "--init-from",
                      cls.init_path,
                      "--deterministic", "true" if deterministic else "false",
                      "--save", out)
            cls.runs[key] = e2e.parameters_of(e2e.read_safetensors(out)[0])
        return cls.runs[key]

    def check_splits(self, deterministic):
        worst = {}
        for gpus, acc in SPLITS:
            got = self.run_split(gpus, acc, deterministic)
            what = (f"gpus={gpus} accumulate={acc} "
                    f"deterministic={deterministic}")
            worst[(gpus, acc)] = e2e.assert_close_to_reference(
                self, got, self.ref, TOLERANCE, what)
            for name, start in self.init.items():
                ours = e2e.rel_diff(got[name], start)
                theirs = e2e.rel_diff(self.ref[name], start)
                self.assertGreater(ours, 100 * TOLERANCE,
                                   f"{name} barely moved in trainc ({ours:.3g})")
                self.assertGreater(theirs, 100 * TOLERANCE,
                                   f"{name} barely moved in PyTorch ({theirs:.3g})")
        print(f"\ndeterministic={deterministic}: max relative difference "
              "from PyTorch float64 per split: " +
              ", ".join(f"{g}x{a}: {r:.3g}" for (g, a), r in worst.items()))

    def test_matches_pytorch(self):
        self.check_splits(deterministic=False)

    def test_matches_pytorch_deterministic(self):
        self.check_splits(deterministic=True)

    def test_bit_identical_when_deterministic(self):
        first = self.run_split(*SPLITS[0], deterministic=True)
        for gpus, acc in SPLITS[1:]:
            got = self.run_split(gpus, acc, deterministic=True)
            self.assertEqual(sorted(got), sorted(first))
            for name in first:
                self.assertTrue(
                    np.array_equal(first[name].view(np.uint32),
                                   got[name].view(np.uint32)),
                    f"{name} differs bitwise between gpus={SPLITS[0][0]} "
                    f"accumulate={SPLITS[0][1]} and gpus={gpus} "
                    f"accumulate={acc}")

    def test_controls_move_the_reference(self):
        # The comparison tells a wrong loss scale, a convolution's kernel
        # orientation and the pooling op from the real thing: each moves
        # every parameter of the reference far beyond the tolerance (from
        # 2.7e-3 relative, c1.weight with average pooling, upwards).
        for controls in [dict(grad_scale=2.0), dict(flip_kernels=True),
                         dict(avg_pool=True)]:
            other = reference(self.init, self.images, self.labels, **controls)
            for name, want in self.ref.items():
                rel = e2e.rel_diff(other[name], want)
                self.assertGreater(rel, 100 * TOLERANCE,
                                   f"{controls}: {name} ({rel:.3g})")

if __name__ == "__main__":
    unittest.main()
