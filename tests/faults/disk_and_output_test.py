"""A disk that fills, memory that does not suffice, and output that must show
as it happens.

  - Periodic checkpoints into a 4 MiB tmpfs (mounted by the test; skipped,
    saying so, where mounting is not allowed): the first fits, the second
    does not. The run stops naming the step, the error (no space left) and
    the newest whole checkpoint; no temporary file is left, that checkpoint
    loads, and --resume from the folder continues it.
  - A local job whose ranks cannot fit in memory is refused before any
    starts, with the arithmetic, rather than killed by the kernel.
  - With 2 ranks the step lines reach a pipe while the run goes on, not all
    at once at the end.
"""
import os
import shutil
import subprocess
import time
import unittest

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e


class DiskFullTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        self.mount = os.path.join(e2e.tmpdir(), "small")
        os.makedirs(self.mount)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", self.mount],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if proc.returncode != 0:
            self.skipTest(f"cannot mount a small tmpfs here: {proc.stdout.strip()}")
        self.addCleanup(subprocess.run, ["umount", "-l", self.mount])

    def test_the_previous_checkpoint_stays_whole(self):
        folder = os.path.join(self.mount, "ckpt")
        # The MLP's checkpoint (weights and AdamW state) is 2.7 MiB.
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 20,
                         "--no-eval", "--no-metrics", "--checkpoint_every", 5,
                         "--checkpoint_keep", 3, "--checkpoint_dir", folder, check=False)
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("step 10: checkpoint not written", proc.stdout)
        self.assertIn("No space left on device", proc.stdout)
        self.assertIn("the newest whole one is " + folder + "/step-00000005.safetensors",
                      proc.stdout)
        self.assertEqual(sorted(os.listdir(folder)), ["step-00000005.safetensors"])
        tensors, meta = e2e.read_safetensors(os.path.join(folder, "step-00000005.safetensors"))
        self.assertEqual(meta["step"], "5")
        # It loads: the run continues from it (copied to a disk with room).
        saved = os.path.join(e2e.tmpdir(), "step5.safetensors")
        shutil.copy(os.path.join(folder, "step-00000005.safetensors"), saved)
        resumed = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 8,
                            "--no-eval", "--no-metrics", "--resume", saved)
        self.assertIn("resumed from " + saved + " at step 5", resumed.stdout)


class MemoryTest(unittest.TestCase):

    def test_a_job_that_cannot_fit_is_refused_before_it_starts(self):
        # 20M samples per micro-batch: an arena of ~116 GiB per rank.
        e2e.need_fashion_mnist(self)
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--micro_batch",
                         20000000, "--accumulate", 1, "--steps", 1, "--no-eval",
                         check=False, timeout=60)
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertRegex(proc.stdout, r"2 ranks need about \d+\.\d GiB of memory \(per rank: "
                                      r"arena \d+\.\d GiB")
        self.assertNotIn("launching", proc.stdout)


class LiveOutputTest(unittest.TestCase):

    def test_step_lines_arrive_while_the_run_goes_on(self):
        e2e.need_fashion_mnist(self)
        proc = subprocess.Popen(
            [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", "600",
             "--no-eval", "--no-metrics", "--log-every", "50"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        arrivals = []
        for line in proc.stdout:
            if line.startswith("step "):
                arrivals.append(time.time())
        self.assertEqual(proc.wait(), 0)
        self.assertGreaterEqual(len(arrivals), 12)  # every 50 steps, and epoch ends
        # The first line long before the last: they came as the run went.
        self.assertGreater(arrivals[-1] - arrivals[0], 1.0)


if __name__ == "__main__":
    unittest.main()
