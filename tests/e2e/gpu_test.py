"""The CUDA backend trains like the CPU backend: 20 steps of the default
example on one GPU against the CPU, same initial weights and data order;
and the CUDA-graph replay of a step gives the bits of launching its kernels
one by one. Skips, saying why, where no GPU is present."""
import os
import re
import unittest

import numpy as np

import e2e_lib as e2e


def run(device, d, *extra):
    out = os.path.join(d, f"{device}{''.join(extra)}.safetensors")
    proc = e2e.train(e2e.EXAMPLE, "--device", device, "--gpus", 1,
                     "--accumulate", 4, "--steps", 20, "--no-eval",
                     "--save", out, *extra)
    return e2e.read_checkpoint(out)[0], proc.stdout


class GpuTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        probe = e2e.train(e2e.EXAMPLE, "--device", "cuda", "--gpus", 1,
                          "--steps", 1, "--no-eval", check=False)
        if probe.returncode != 0 and "no CUDA GPU" in probe.stdout:
            self.skipTest("no CUDA GPU on this machine: " + probe.stdout.strip())
        self.assertEqual(probe.returncode, 0, probe.stdout)
        self.dir = e2e.tmpdir()

    def test_cuda_matches_cpu_over_20_steps(self):
        cpu, _ = run("cpu", self.dir)
        gpu, log = run("cuda", self.dir)
        # Step 1 warms up, steps 2-4 are traced for the overlap figures, so
        # step 5 is captured and 5..20 are replays.
        self.assertRegex(log, r"cuda graph +16 of 20 steps replayed "
                              r"\(captured at step 5\)")
        for name in cpu:
            if name.startswith("optimizer."):
                continue
            a, b = cpu[name].astype(np.float64), gpu[name].astype(np.float64)
            rel = np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30)
            self.assertLessEqual(rel, 1e-4, name)

    def test_graph_replay_gives_the_eager_bits(self):
        graph, _ = run("cuda", self.dir)
        eager, log = run("cuda", self.dir, "--no-graph")
        self.assertRegex(log, r"cuda graph +not used: step capture is off")
        for name in graph:
            np.testing.assert_array_equal(graph[name], eager[name], name)


if __name__ == "__main__":
    unittest.main()
