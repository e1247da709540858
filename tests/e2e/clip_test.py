"""clip_grad_norm through the real binary, beyond what gpt_equivalence_test
checks (clipping active on every step of a small GPT):

  - a threshold far above the gradient norm changes nothing: the weights
    and optimizer state are bit for bit those of a run without clipping
    (torch's min(1, clip / (norm + 1e-6)) is exactly 1 there; the clipping
    machinery, the norm's sums and the wait for the last bucket, must not
    touch the arithmetic);
  - the norm the metrics log reports (`grad_norm` of each `train` record)
    is the global L2 norm of the step's whole reduced gradient, as
    torch.nn.utils.clip_grad_norm_ returns it: compared with a float64
    PyTorch model of dsl_examples/fashion_mlp.train (shuffle = false) fed
    the same Fashion-MNIST examples from the same initial weights
    (--init-from), on a split of 2 ranks x 2 micro-steps and of 1 x 4 (a
    norm of one rank's or one micro-step's gradient shows), with clipping
    active so that steps 2.. also see the clipped updates."""
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


def read_train_records(path):
    with open(path) as f:
        return [r for r in map(json.loads, f) if r["kind"] == "train"]


class ClipAboveTheNormTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        self.dir = e2e.tmpdir()

    def run_example(self, name, *extra):
        out = os.path.join(self.dir, f"{name}.safetensors")
        metrics = os.path.join(self.dir, f"{name}.jsonl")
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--steps", 10, "--no-eval",
                  "--save", out, "--metrics", metrics, *extra)
        return e2e.read_checkpoint(out)[0], read_train_records(metrics)

    def test_a_threshold_above_the_norm_changes_no_bit(self):
        plain, plain_records = self.run_example("plain")
        high, records = self.run_example("clip_high", "--clip_grad_norm", 1e6)
        self.assertTrue(any(n.endswith("exp_avg_sq") for n in plain))
        # Clipping was on (the norm is computed and reported) and far
        # from the threshold on every step.
        self.assertEqual([r["step"] for r in records], list(range(1, 11)))
        norms = [r["grad_norm"] for r in records]
        self.assertTrue(all(0 < n < 1e3 for n in norms), norms)
        self.assertTrue(all("grad_norm" not in r for r in plain_records))
        e2e.assert_same_bits(self, high, plain,
                             "clip_grad_norm 1e6 against no clipping")
        # Control: a threshold below the norms does change the weights, so
        # the comparison above is not of runs that ignore the setting.
        low, _ = self.run_example("clip_low", "--clip_grad_norm",
                                  min(norms) / 4)
        self.assertGreater(e2e.rel_diff(low["h1.weight"], plain["h1.weight"]), 1e-4)


# --- the reported norm against PyTorch -----------------------------------------

LAYERS = e2e.MLP_LAYERS
GLOBAL_BATCH = 256  # the example's 2 gpus x 64 x 2
STEPS = 4
ADAMW_EXAMPLE = "adamw(lr = 1e-3, weight_decay = 0.01)"
# eps = 1e-5 as equivalence_test's reference: with 1e-8 Adam turns float32
# rounding of near-zero gradients into steps, and trainc's weights (so the
# later steps' norms) drift from float64's by more than the tolerance.
ADAMW_HERE = "adamw(lr = 1e-3, weight_decay = 0.01, eps = 1e-5)"
ADAMW = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-5, weight_decay=0.01)
TOLERANCE = 1e-5


def torch_grad_norms(init, images, labels, clip, batch=GLOBAL_BATCH):
    """clip_grad_norm_'s return value (the total norm before clipping) of
    each of STEPS steps of the example's MLP in float64, clipping to `clip`,
    AdamW with weight decay on matrices only. With shuffle = false global
    batch s is examples s*G .. s*G + G - 1 in file order; the loss is the
    mean cross-entropy over the global batch (`batch`: another size, for
    the controls)."""
    p = {k: torch.tensor(v.astype(np.float64), requires_grad=True)
         for k, v in init.items()}
    matrices = [p[n + ".weight"] for n, _, _ in LAYERS]
    vectors = [p[n + ".bias"] for n, _, _ in LAYERS]
    opt = torch.optim.AdamW(
        [{"params": matrices, "weight_decay": ADAMW["weight_decay"]},
         {"params": vectors, "weight_decay": 0.0}],
        lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"])
    G = batch
    norms = []
    for s in range(STEPS):
        loss = e2e.mlp_reference_loss(torch, F, p, images, labels, s, G)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(matrices + vectors, clip)))
        opt.step()
    return norms


class GradNormMatchesPyTorchTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch)
        e2e.set_up_reference(cls, STEPS * GLOBAL_BATCH, e2e.initial_mlp_weights(seed=3 + e2e.SEED))
        with open(e2e.EXAMPLE) as f:
            text = f.read()
        assert text.count("shuffle = true") == 1, "the example changed"
        assert ADAMW_EXAMPLE in text, "the example's optimizer changed"
        text = text.replace("shuffle = true", "shuffle = false")
        text = text.replace(ADAMW_EXAMPLE, ADAMW_HERE)
        cls.spec = os.path.join(cls.dir, "fashion_mlp_ordered.train")
        with open(cls.spec, "w") as f:
            f.write(text)

    def trainc_norms(self, gpus, accumulate, clip):
        metrics = os.path.join(self.dir, f"g{gpus}a{accumulate}.jsonl")
        e2e.train(self.spec, "--device", "cpu", "--gpus", gpus, "--accumulate",
                  accumulate, "--micro_batch", GLOBAL_BATCH // (gpus * accumulate),
                  "--steps", STEPS, "--no-eval", "--init-from", self.init_path,
                  "--clip_grad_norm", clip, "--metrics", metrics)
        records = read_train_records(metrics)
        self.assertEqual([r["step"] for r in records], list(range(1, STEPS + 1)))
        return [r["grad_norm"] for r in records]

    def test_reported_norm_is_clip_grad_norm_s(self):
        # The threshold: half the first step's norm, so that every step
        # clips (checked on the reference's norms below).
        first = torch_grad_norms(self.init, self.images, self.labels, 1e9)[0]
        clip = first / 2
        ref = torch_grad_norms(self.init, self.images, self.labels, clip)
        self.assertEqual(ref[0], first)
        self.assertTrue(all(n > clip for n in ref), (ref, clip))
        # Controls: the norm of a part of the batch (one rank's, one
        # micro-step's) is far from the whole batch's.
        for part in (GLOBAL_BATCH // 2, GLOBAL_BATCH // 4):
            n = torch_grad_norms(self.init, self.images, self.labels, 1e9, part)[0]
            self.assertGreater(abs(n - first), 100 * TOLERANCE * first, part)
        for gpus, acc in ((2, 2), (1, 4)):
            got = self.trainc_norms(gpus, acc, clip)
            what = f"gpus={gpus} accumulate={acc}"
            print(f"\n{what}: grad_norm {got}\n  PyTorch float64 {ref}")
            # Step 1: the gradient of the same weights on the same batch.
            self.assertLessEqual(abs(got[0] - ref[0]), TOLERANCE * ref[0],
                                 f"{what}: step 1's grad_norm {got[0]!r} is not "
                                 f"clip_grad_norm_'s {ref[0]!r}")
            # Later steps: after clipped AdamW updates.
            for step, (g, r) in enumerate(zip(got, ref), start=1):
                self.assertLessEqual(abs(g - r), TOLERANCE * r,
                                     f"{what}: step {step}: grad_norm {g!r}, "
                                     f"PyTorch {r!r}")


if __name__ == "__main__":
    unittest.main()
