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
        # The MLP's checkpoint (0.9 MiB of weights, 1.8 MiB of AdamW state
        # beside them) is 2.7 MiB.
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 20,
                         "--no-eval", "--no-metrics", "--checkpoint_every", 5,
                         "--checkpoint_keep", 3, "--checkpoint_dir", folder, check=False)
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("step 10: checkpoint not written", proc.stdout)
        self.assertIn("No space left on device", proc.stdout)
        self.assertIn("the newest whole one is " + folder + "/step-00000005.safetensors",
                      proc.stdout)
        self.assertEqual(sorted(os.listdir(folder)), ["step-00000005.safetensors",
                                                      "step-00000005.train_state.safetensors"])
        tensors, meta = e2e.read_checkpoint(os.path.join(folder, "step-00000005.safetensors"))
        self.assertEqual(meta["step"], "5")
        # It loads: the run continues from it (copied to a disk with room).
        saved = os.path.join(e2e.tmpdir(), "step5.safetensors")
        shutil.copy(os.path.join(folder, "step-00000005.safetensors"), saved)
        shutil.copy(os.path.join(folder, "step-00000005.train_state.safetensors"),
                    e2e.training_state_path(saved))
        resumed = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 8,
                            "--no-eval", "--no-metrics", "--resume", saved)
        self.assertIn("resumed from " + saved + " at step 5", resumed.stdout)


    def test_metrics_on_a_full_disk_warn_and_the_run_goes_on(self):
        # The metrics log on the small disk, nearly full; the checkpoint
        # elsewhere. Metrics are not worth the run.
        with open(os.path.join(self.mount, "filler"), "wb") as f:
            f.write(b"\0" * (4 * 1024 * 1024 - 24 * 1024))
        metrics = os.path.join(self.mount, "m.jsonl")
        save = os.path.join(e2e.tmpdir(), "m.safetensors")
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", 300,
                         "--no-eval", "--metrics", metrics, "--save", save, check=False)
        self.assertEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("warning: cannot write the metrics log " + metrics +
                      ": No space left on device; it stops here; training goes on",
                      proc.stdout)
        self.assertEqual(proc.stdout.count("warning:"), 1, proc.stdout)
        self.assertIn("summary", proc.stdout)
        self.assertEqual(e2e.read_checkpoint(save)[1]["step"], "300")


class UnwritableFoldersTest(unittest.TestCase):

    def test_are_refused_before_any_rank_starts(self):
        e2e.need_fashion_mnist(self)
        d = e2e.tmpdir()
        not_a_folder = os.path.join(d, "file")
        open(not_a_folder, "w").close()
        for flags, message in [
                (["--checkpoint_every", 5, "--checkpoint_dir", not_a_folder + "/ckpt"],
                 "checkpoint_dir: checkpoint folder " + not_a_folder + "/ckpt: cannot create it"),
                (["--tensorboard", not_a_folder + "/tb"],
                 "--tensorboard " + not_a_folder + "/tb: cannot write in it")]:
            proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", 10,
                             "--no-eval", *flags, check=False)
            self.assertEqual(proc.returncode, 1, proc.stdout)
            self.assertIn(message, proc.stdout)
            self.assertNotIn("launching", proc.stdout)
            self.assertNotIn("Connection", proc.stdout)


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
        # The order of events, not durations: the first step line must be
        # read while the job still runs. 2,400 steps logged every 200 print
        # about 2 KB, less than a pipe's stdio buffer (4 KiB), so output held
        # back by buffering would arrive only at exit and fail this however
        # fast the machine; on a machine 3x faster than the one the suite
        # was written on the run still lasts over a second after that line.
        e2e.need_fashion_mnist(self)
        proc = subprocess.Popen(
            [e2e.TRAIN, e2e.EXAMPLE, "--device", "cpu", "--gpus", "2", "--steps", "2400",
             "--no-eval", "--no-metrics", "--log-every", "200"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        running_at_step_line = []
        output = []
        for line in proc.stdout:
            output.append(line)
            if line.startswith("step "):
                running_at_step_line.append(proc.poll() is None)
        self.assertEqual(proc.wait(), 0, "".join(output))
        self.assertGreaterEqual(len(running_at_step_line), 12, "".join(output))
        self.assertTrue(running_at_step_line[0],
                        "the first step line arrived after the job had ended:\n" +
                        "".join(output))
        self.assertLess(sum(len(line) for line in output), 4096)


if __name__ == "__main__":
    unittest.main()
