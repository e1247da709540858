"""The headline property: one global batch, however it is split.

After 20 optimizer steps from the same weights and data order,
gpus=1 x accumulate=4, gpus=2 x accumulate=2 and gpus=4 x accumulate=1 give
the same weights: within 1e-5 relative by default, bit for bit with
deterministic = true.

Comparing the splits with each other cannot see an error common to all of
them (a wrong loss scale, a wrong optimizer formula), so PyTorchReferenceTest
also trains the default MLP (dsl_examples/fashion_mlp.train, with
shuffle = false) from initial weights written here (--init-from) and
compares it with a float64 PyTorch model written here from the .train
file's definition, not from trainc's code, fed the same Fashion-MNIST
examples read by a reader of its own:
  - AdamW as in the example (lr 1e-3, weight_decay 0.01 on matrices only,
    adamw's default decay = "matrices") but with eps = 1e-5, splits 1 x 4
    and 2 x 2. With the default eps = 1e-8 Adam turns the float32 rounding
    of near-zero gradients into steps: PyTorch's own float32 run is 2.1e-5
    from its float64 run on h1.weight (trainc 3.0e-5); with 1e-5 trainc is
    within 5e-7. Controls: decaying every parameter (decay = "all") or
    doubling the loss moves the reference beyond the tolerance;
  - SGD with momentum, 1 x 4: its step is proportional to the gradient, so
    a wrong loss scale shows in full (in Adam only through eps; a control
    checks that a 2x scale moves the reference far beyond the tolerance);
every parameter within 1e-5 relative (max abs difference / max abs) of the
reference after 5 steps, and moved from its initial value by far more."""
import os
import json
import unittest

import numpy as np

import e2e_lib as e2e

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

SPLITS = [(1, 4), (2, 2), (4, 1)]


def run_split(gpus, accumulate, deterministic):
    out = os.path.join(e2e.tmpdir(), f"g{gpus}a{accumulate}.safetensors")
    e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", gpus, "--accumulate",
              accumulate, "--micro_batch", 64, "--steps", 20, "--no-eval",
              "--deterministic", "true" if deterministic else "false",
              "--save", out)
    return e2e.read_checkpoint(out)[0]


class EquivalenceTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_within_float_rounding(self):
        ref = run_split(*SPLITS[0], deterministic=False)
        start = None
        for gpus, acc in SPLITS[1:]:
            got = run_split(gpus, acc, deterministic=False)
            self.assertEqual(sorted(got), sorted(ref))
            for name in ref:
                if name.startswith("optimizer."):
                    continue
                a, b = ref[name].astype(np.float64), got[name].astype(np.float64)
                rel = np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)
                self.assertLessEqual(rel, 1e-5, f"{name} gpus={gpus} acc={acc}")

    def test_bit_identical_when_deterministic(self):
        ref = run_split(*SPLITS[0], deterministic=True)
        for gpus, acc in SPLITS[1:]:
            got = run_split(gpus, acc, deterministic=True)
            for name in ref:
                self.assertTrue(np.array_equal(ref[name].view(np.uint32),
                                               got[name].view(np.uint32)),
                                f"{name} differs for gpus={gpus} acc={acc}")

    def test_weights_moved(self):
        # Guards the two tests above against comparing untrained weights.
        trained = run_split(1, 4, deterministic=False)
        out = os.path.join(e2e.tmpdir(), "zero.safetensors")
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--accumulate",
                  4, "--steps", 1, "--no-eval", "--save", out)
        one_step = e2e.read_checkpoint(out)[0]
        self.assertGreater(np.max(np.abs(trained["h1.weight"] -
                                         one_step["h1.weight"])), 1e-4)


# --- against PyTorch ---------------------------------------------------------

REF_STEPS = 5
REF_GLOBAL_BATCH = 256        # the example's 2 gpus x 64 x 2
REF_SPLITS = [(1, 4), (2, 2)]  # gpus x accumulate, micro_batch 64
TOLERANCE = 1e-5
LAYERS = e2e.MLP_LAYERS
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-5, weight_decay=0.01)
ADAMW_EXAMPLE = "adamw(lr = 1e-3, weight_decay = 0.01)"
ADAMW_HERE = "adamw(lr = 1e-3, weight_decay = 0.01, eps = 1e-5)"
SGD = dict(lr=0.05, momentum=0.9)
SGD_LINE = "optimizer   = sgd(lr = 0.05, momentum = 0.9, weight_decay = 0)"
def torch_reference(init, images, labels, optimizer, grad_scale=1.0,
                    decay="matrices"):
    """Final float64 weights after REF_STEPS steps of the example's MLP.

    With shuffle = false global batch s is examples s*G .. s*G + G - 1 in
    file order (runtime/data/sampler.h: the identity permutation), however
    it is split; the loss is the mean cross-entropy over the global batch.
    Weight decay applies to matrices only (adamw's default decay =
    "matrices"): two parameter groups (decay="all": one). grad_scale
    multiplies the loss (the control for a wrong loss scale)."""
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True)
         for k, v in init.items()}
    matrices = [p[n + ".weight"] for n, _, _ in LAYERS]
    vectors = [p[n + ".bias"] for n, _, _ in LAYERS]
    if optimizer == "adamw":
        wd = ADAMW["weight_decay"]
        opt = torch.optim.AdamW(
            [{"params": matrices, "weight_decay": wd},
             {"params": vectors, "weight_decay": wd if decay == "all" else 0.0}],
            lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"])
    else:
        opt = torch.optim.SGD(matrices + vectors, lr=SGD["lr"],
                              momentum=SGD["momentum"])
    G = REF_GLOBAL_BATCH
    for s in range(REF_STEPS):
        loss = e2e.mlp_reference_loss(torch, F, p, images, labels, s, G) * grad_scale
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return {k: v.detach().numpy() for k, v in p.items()}



class PyTorchReferenceTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch)
        e2e.set_up_reference(cls, REF_STEPS * REF_GLOBAL_BATCH, e2e.initial_mlp_weights(seed=3 + e2e.SEED))
        cls.refs = {}

    @classmethod
    def train_file(cls, optimizer):
        """The example with shuffle = false (and SGD instead of AdamW)."""
        with open(e2e.EXAMPLE) as f:
            text = f.read()
        assert text.count("shuffle = true") == 1, "the example changed"
        text = text.replace("shuffle = true", "shuffle = false")
        if optimizer == "sgd":
            lines = [l for l in text.splitlines() if "optimizer" in l and "=" in l
                     and l.strip().startswith("optimizer")]
            assert len(lines) == 1, lines
            text = text.replace(lines[0], "  " + SGD_LINE)
        else:
            assert ADAMW_EXAMPLE in text, \
                "the example's optimizer changed: update ADAMW"
            text = text.replace(ADAMW_EXAMPLE, ADAMW_HERE)
        path = os.path.join(cls.dir, f"fashion_mlp_{optimizer}.train")
        with open(path, "w") as f:
            f.write(text)
        return path

    @classmethod
    def reference(cls, optimizer, grad_scale=1.0, decay="matrices"):
        key = (optimizer, grad_scale, decay)
        if key not in cls.refs:
            cls.refs[key] = torch_reference(cls.init, cls.images, cls.labels,
                                            optimizer, grad_scale, decay)
        return cls.refs[key]

    def run_trainc(self, optimizer, gpus, accumulate):
        out = os.path.join(self.dir, f"{optimizer}_g{gpus}a{accumulate}.safetensors")
        e2e.train(self.train_file(optimizer), "--device", "cpu", "--gpus", gpus,
                  "--accumulate", accumulate, "--micro_batch", 64,
                  "--steps", REF_STEPS, "--no-eval", "--init-from",
                  self.init_path, "--save", out)
        tensors = e2e.read_checkpoint(out)[0]
        return e2e.parameters_of(tensors)

    def assert_matches(self, got, ref, what):
        worst = e2e.assert_close_to_reference(self, got, ref, TOLERANCE, what)
        for name, want in ref.items():
            moved = e2e.rel_diff(want, self.init[name])
            self.assertGreater(moved, 100 * TOLERANCE,
                               f"{name} barely moved in the reference")
            self.assertGreater(e2e.rel_diff(got[name], self.init[name]),
                               100 * TOLERANCE, f"{name} barely moved")
        print(f"\n{what}: max relative difference from PyTorch float64 "
              f"{worst:.3g}")

    def test_adamw_matches_pytorch(self):
        ref = self.reference("adamw")
        # Controls: the comparison tells decayed biases and a doubled loss
        # apart from the real thing.
        decay_all = self.reference("adamw", decay="all")
        doubled = self.reference("adamw", grad_scale=2.0)
        for name, want in ref.items():
            if want.ndim == 1:
                self.assertGreater(e2e.rel_diff(decay_all[name], want),
                                   3 * TOLERANCE, name)
            self.assertGreater(e2e.rel_diff(doubled[name], want),
                               10 * TOLERANCE, name)
        for gpus, acc in REF_SPLITS:
            self.assert_matches(self.run_trainc("adamw", gpus, acc), ref,
                                f"adamw gpus={gpus} accumulate={acc}")

    def test_sgd_matches_pytorch(self):
        ref = self.reference("sgd")
        # Control: twice the loss (e.g. 1/micro_batch where 1/global_batch
        # belongs) moves SGD's weights far beyond the tolerance.
        doubled = self.reference("sgd", grad_scale=2.0)
        for name in ref:
            self.assertGreater(e2e.rel_diff(doubled[name], ref[name]),
                               100 * TOLERANCE, name)
        self.assert_matches(self.run_trainc("sgd", 1, 4), ref,
                            "sgd gpus=1 accumulate=4")


if __name__ == "__main__":
    unittest.main()
