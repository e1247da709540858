"""Checkpoints from elsewhere: a NaN weight, a FIFO, a device file. Each
is a clear error naming the file (and the tensor), before any training,
and nothing hangs."""
import os
import unittest

import numpy as np

import e2e_lib as e2e


class HostileCheckpointTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        self.dir = e2e.tmpdir()
        self.good = os.path.join(self.dir, "good.safetensors")
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 1,
                  "--no-eval", "--save", self.good)

    def weights(self):
        return e2e.parameters_of(e2e.read_safetensors(self.good)[0])

    def test_a_nan_weight_is_refused_naming_the_tensor(self):
        w = self.weights()
        w["h2.weight"] = w["h2.weight"].copy()
        w["h2.weight"][3, 7] = np.nan
        bad = os.path.join(self.dir, "nan.safetensors")
        e2e.write_safetensors(bad, w)
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1,
                         "--steps", 1, "--no-eval", "--init-from", bad,
                         check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("nan.safetensors: tensor 'h2.weight' holds a "
                      "non-finite value (nan) at element 775", proc.stdout)
        self.assertNotIn("final loss", proc.stdout)

    def test_an_inf_is_refused_too(self):
        w = self.weights()
        w["logits.bias"] = w["logits.bias"].copy()
        w["logits.bias"][0] = -np.inf
        bad = os.path.join(self.dir, "inf.safetensors")
        e2e.write_safetensors(bad, w)
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1,
                         "--steps", 1, "--no-eval", "--init-from", bad,
                         check=False)
        self.assertIn("tensor 'logits.bias' holds a non-finite value (-inf)",
                      proc.stdout)

    def test_a_fifo_does_not_hang(self):
        fifo = os.path.join(self.dir, "pipe.safetensors")
        os.mkfifo(fifo)
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1,
                         "--steps", 1, "--no-eval", "--init-from", fifo,
                         check=False, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("pipe.safetensors: not a regular file", proc.stdout)

    def test_dev_zero_is_not_read_forever(self):
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1,
                         "--steps", 1, "--no-eval", "--resume", "/dev/zero",
                         check=False, timeout=30)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("/dev/zero: not a regular file", proc.stdout)


if __name__ == "__main__":
    unittest.main()
