"""--save / --resume: a run stopped after step 10 and resumed ends bit for
bit where an uninterrupted 20-step run ends (weights and optimizer state)."""
import os
import unittest

import numpy as np

import e2e_lib as e2e


class ResumeTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_resume_is_bit_exact(self):
        d = e2e.tmpdir()
        common = [e2e.EXAMPLE, "--device", "cpu", "--no-eval"]
        e2e.train(*common, "--steps", 20, "--save", f"{d}/full.safetensors")
        e2e.train(*common, "--steps", 10, "--save", f"{d}/half.safetensors")
        out = e2e.train(*common, "--steps", 20, "--resume",
                        f"{d}/half.safetensors", "--save",
                        f"{d}/resumed.safetensors")
        self.assertIn("resumed from", out.stdout)
        full, meta = e2e.read_safetensors(f"{d}/full.safetensors")
        resumed, meta2 = e2e.read_safetensors(f"{d}/resumed.safetensors")
        self.assertEqual(meta.get("step"), "20")
        self.assertEqual(meta2.get("step"), "20")
        self.assertEqual(sorted(full), sorted(resumed))
        self.assertTrue(any(n.endswith("exp_avg") for n in full))
        for name in full:
            self.assertTrue(np.array_equal(full[name].view(np.uint32),
                                           resumed[name].view(np.uint32)), name)

    def test_names_match_pytorch_modules(self):
        d = e2e.tmpdir()
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 1,
                  "--no-eval", "--save", f"{d}/w.safetensors")
        w, _ = e2e.read_safetensors(f"{d}/w.safetensors")
        self.assertEqual(w["h1.weight"].shape, (256, 784))   # nn.Linear [out, in]
        self.assertEqual(w["logits.bias"].shape, (10,))


if __name__ == "__main__":
    unittest.main()
