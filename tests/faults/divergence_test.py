"""NaN injection: a learning rate of 1e10 makes the MLP's loss and gradients
non-finite within a few steps.

  - By default the run stops on every rank, naming the step and the first
    parameter whose gradient is not finite, and a good checkpoint at the
    --save path stays as it was.
  - With skip_nonfinite each such step is left out (weights unchanged),
    reported and counted; whether the run recovers or gives up after 100
    in a row, no non-finite weight is ever saved.
"""
import os
import re
import unittest

import numpy as np

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e


class DivergenceTest(unittest.TestCase):

    def test_divergence_stops_without_overwriting_the_checkpoint(self):
        e2e.need_fashion_mnist(self)
        d = e2e.tmpdir()
        ckpt = os.path.join(d, "good.safetensors")
        e2e.train(e2e.EXAMPLE, "--gpus", 1, "--steps", 2, "--no-eval",
                  "--save", ckpt)
        before = open(ckpt, "rb").read()
        proc = e2e.train(e2e.EXAMPLE, "--gpus", 2, "--steps", 30, "--no-eval",
                         "--lr", "1e10", "--log-every", 5, "--save", ckpt,
                         check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertRegex(proc.stdout, r"step \d+: the loss is (nan|inf|-inf)"
                                      r"; first non-finite gradient: \w+\.\w+: "
                                      r"training diverged")
        self.assertEqual(open(ckpt, "rb").read(), before,
                         "the good checkpoint must stay as it was")

    def test_clipped_divergence_is_named_at_its_step(self):
        # With clipping the optimizers leave a non-finite step out by
        # themselves; without skip_nonfinite the run must still stop there,
        # naming that step, not the next log line's (step 100 here).
        e2e.need_fashion_mnist(self)
        proc = e2e.train(e2e.EXAMPLE, "--gpus", 1, "--global_batch", 64, "--steps", 200,
                         "--no-eval", "--lr", "1e10", "--clip_grad_norm", 1,
                         "--log-every", 100, check=False)
        self.assertNotEqual(proc.returncode, 0)
        m = re.search(r"step (\d+): the gradient norm is (nan|inf)", proc.stdout)
        self.assertIsNotNone(m, proc.stdout)
        self.assertLess(int(m.group(1)), 100, proc.stdout)

    def test_skip_nonfinite_leaves_such_steps_out(self):
        # The same divergence with skip_nonfinite: every non-finite step is
        # left out (weights unchanged), reported, and counted; whether the
        # run then recovers or gives up after 100 in a row, no non-finite
        # weight is ever saved.
        e2e.need_fashion_mnist(self)
        ckpt = os.path.join(e2e.tmpdir(), "skip.safetensors")
        proc = e2e.train(e2e.EXAMPLE, "--gpus", 2, "--steps", 150, "--no-eval",
                         "--lr", "1e10", "--skip_nonfinite", "true",
                         "--save", ckpt, check=False)
        self.assertRegex(proc.stdout, r"step \d+: gradient norm (nan|inf): step "
                                      r"skipped, weights unchanged")
        if proc.returncode == 0:
            self.assertRegex(proc.stdout, r"skipped +[1-9]\d* step")
            for name, t in e2e.read_checkpoint(ckpt)[0].items():
                self.assertTrue(np.all(np.isfinite(t)), name)
        else:
            self.assertIn("steps in a row had a non-finite gradient", proc.stdout)
            self.assertFalse(os.path.exists(ckpt))


    def test_skip_nonfinite_changes_nothing_on_finite_steps(self):
        # skip_nonfinite alone computes the gradient norm without clipping:
        # on finite steps the weights are those of a run without it (the
        # CPU once scaled every gradient by 0 there, so nothing trained).
        e2e.need_fashion_mnist(self)
        d = e2e.tmpdir()
        runs = {}
        for skip in ("false", "true"):
            out = os.path.join(d, f"skip_{skip}.safetensors")
            e2e.train(e2e.EXAMPLE, "--gpus", 2, "--steps", 5, "--no-eval",
                      "--deterministic", "true", "--skip_nonfinite", skip,
                      "--save", out)
            runs[skip] = e2e.read_checkpoint(out)[0]
        e2e.assert_same_bits(self, runs["true"], runs["false"],
                             "skip_nonfinite on finite steps")


if __name__ == "__main__":
    unittest.main()
