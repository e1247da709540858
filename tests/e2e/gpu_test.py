"""The CUDA backend trains like the CPU backend: 20 steps of the default
example on one GPU against the CPU, same initial weights and data order.
Skips, saying why, where no GPU is present."""
import os
import unittest

import numpy as np

import e2e_lib as e2e


def weights(device, d):
    out = os.path.join(d, f"{device}.safetensors")
    e2e.train(e2e.EXAMPLE, "--device", device, "--gpus", 1, "--accumulate", 4,
              "--steps", 20, "--no-eval", "--save", out)
    return e2e.read_safetensors(out)[0]


class GpuTest(unittest.TestCase):

    def test_cuda_matches_cpu_over_20_steps(self):
        e2e.need_fashion_mnist(self)
        probe = e2e.train(e2e.EXAMPLE, "--device", "cuda", "--gpus", 1,
                          "--steps", 1, "--no-eval", check=False)
        if probe.returncode != 0 and "no CUDA GPU" in probe.stdout:
            self.skipTest("no CUDA GPU on this machine: " + probe.stdout.strip())
        self.assertEqual(probe.returncode, 0, probe.stdout)
        d = e2e.tmpdir()
        cpu, gpu = weights("cpu", d), weights("cuda", d)
        for name in cpu:
            if name.startswith("optimizer."):
                continue
            a, b = cpu[name].astype(np.float64), gpu[name].astype(np.float64)
            rel = np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)
            self.assertLessEqual(rel, 1e-4, name)


if __name__ == "__main__":
    unittest.main()
