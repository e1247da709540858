"""The headline property: one global batch, however it is split.

After 20 optimizer steps from the same weights and data order,
gpus=1 x accumulate=4, gpus=2 x accumulate=2 and gpus=4 x accumulate=1 give
the same weights: within 1e-5 relative by default, bit for bit with
deterministic = true."""
import os
import unittest

import numpy as np

import e2e_lib as e2e

SPLITS = [(1, 4), (2, 2), (4, 1)]


def run_split(gpus, accumulate, deterministic):
    out = os.path.join(e2e.tmpdir(), f"g{gpus}a{accumulate}.safetensors")
    e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", gpus, "--accumulate",
              accumulate, "--micro_batch", 64, "--steps", 20, "--no-eval",
              "--deterministic", "true" if deterministic else "false",
              "--save", out)
    return e2e.read_safetensors(out)[0]


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
        one_step = e2e.read_safetensors(out)[0]
        self.assertGreater(np.max(np.abs(trained["h1.weight"] -
                                         one_step["h1.weight"])), 1e-4)


if __name__ == "__main__":
    unittest.main()
