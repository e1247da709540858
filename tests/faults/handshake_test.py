"""Ranks started by hand that disagree are refused before the first step.

Two ranks are started as a cluster launcher would (RANK, WORLD_SIZE,
LOCAL_RANK, a shared rendezvous folder), each with its own command line.
Before the plan handshake, ranks with different --micro_batch both trained
to the end and exited 0 on a silently wrong average. Now every rank
refuses with what differs from rank 0; ranks that agree train as before.
"""
import os
import subprocess
import unittest

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
import e2e_lib as e2e

ARGS = ["--device", "cpu", "--gpus", "2", "--steps", "3", "--no-eval", "--no-metrics"]


class HandshakeTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def run_by_hand(self, job, extra, files=None):
        """Rank r runs files[r] (default: the example) with ARGS + extra[r];
        returns [(exit code, output)]."""
        folder = os.path.join(e2e.tmpdir(), "rendezvous")
        os.makedirs(folder, exist_ok=True)
        procs = []
        for rank, more in enumerate(extra):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(len(extra)),
                       LOCAL_RANK=str(rank), TRAINC_RENDEZVOUS_DIR=folder, TRAINC_JOB_ID=job)
            env.pop("TRAINC_RENDEZVOUS", None)
            env.pop("TRAINC_LAUNCHER", None)
            train_file = files[rank] if files else e2e.EXAMPLE
            procs.append(subprocess.Popen([e2e.TRAIN, train_file, *ARGS, *more], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
        return [(p.wait(timeout=120), p.stdout.read()) for p in procs]

    def test_another_micro_batch_is_refused_naming_it(self):
        results = self.run_by_hand("micro", [[], ["--micro_batch", "32"]])
        for code, text in results:
            self.assertNotEqual(code, 0, text)
            self.assertIn("the ranks disagree before the first step", text)
            self.assertIn("rank 1: global_batch 128 (rank 0: 256), micro_batch 32 (rank 0: 64)",
                          text)
            self.assertNotIn("step 1/", text)  # nothing trained

    def test_another_learning_rate_is_another_plan(self):
        results = self.run_by_hand("lr", [[], ["--lr", "0.5"]])
        for code, text in results:
            self.assertNotEqual(code, 0, text)
            self.assertIn("rank 1: another compiled plan", text)

    def test_another_seed_names_the_seed_and_the_weights(self):
        results = self.run_by_hand("seed", [[], ["--seed", "7"]])
        for code, text in results:
            self.assertNotEqual(code, 0, text)
            self.assertIn("seed 7 (rank 0: 0)", text)
            self.assertIn("other initial weights", text)

    def test_another_data_file_is_refused_naming_the_data(self):
        # Rank 1's copy of the example trains on the test images instead.
        with open(e2e.EXAMPLE) as f:
            source = f.read()
        other = source.replace("train-images-idx3-ubyte.gz", "t10k-images-idx3-ubyte.gz", 1)
        other = other.replace("train-labels-idx1-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 1)
        self.assertNotEqual(other, source)
        path = os.path.join(e2e.tmpdir(), "other_data.train")
        with open(path, "w") as f:
            f.write(other)
        results = self.run_by_hand("data", [[], []], files=[e2e.EXAMPLE, path])
        for code, text in results:
            self.assertNotEqual(code, 0, text)
            self.assertIn("the ranks disagree before the first step", text)
            self.assertIn("other training data", text)
            self.assertNotIn("step 1/", text)

    def weight_files(self):
        """Two --init-from files of the default MLP with other weights (the
        same names and shapes, so each loads alone)."""
        d = e2e.tmpdir()
        paths = [os.path.join(d, f"init_{seed}.safetensors") for seed in (1, 2)]
        for seed, path in zip((1, 2), paths):
            e2e.write_safetensors(path, e2e.initial_mlp_weights(seed))
        return paths

    def test_other_weight_files_are_refused_under_zero_1_and_2(self):
        # Under ZeRO 1 and 2 every rank still holds all the weights, so the
        # handshake compares them as at ZeRO 0: two ranks started from
        # different --init-from files (same seed, same plan) are refused,
        # naming the weights and nothing else.
        first, second = self.weight_files()
        for zero in ("1", "2"):
            with self.subTest(zero=zero):
                results = self.run_by_hand(
                    f"init{zero}", [["--zero", zero, "--init-from", first],
                                    ["--zero", zero, "--init-from", second]])
                for code, text in results:
                    self.assertNotEqual(code, 0, text)
                    self.assertIn("the ranks disagree before the first step", text)
                    self.assertIn("rank 1: other initial weights (--init-from, --resume or the "
                                  "seed)\n", text + "\n")
                    self.assertNotIn("step 1/", text)  # nothing trained

    def test_the_same_weight_file_trains_under_zero_2(self):
        # The case above's control: the same file on both ranks agrees.
        first, _ = self.weight_files()
        results = self.run_by_hand("init_same", [["--zero", "2", "--init-from", first]] * 2)
        for code, text in results:
            self.assertEqual(code, 0, text)
        self.assertIn("step 3/3", results[0][1])

    def test_ranks_that_agree_train(self):
        results = self.run_by_hand("same", [[], []])
        for code, text in results:
            self.assertEqual(code, 0, text)
        self.assertIn("step 3/3", results[0][1])  # rank 0 reports


if __name__ == "__main__":
    unittest.main()
