"""The metrics log (--metrics, JSON lines) and TensorBoard event files
(--tensorboard) of real runs: what the lines hold, that they agree with the
progress lines, where they go by default, that a resumed run appends, and
that TensorBoard's own EventAccumulator reads back the same tags, steps and
values.

TensorBoard comes from PyPI into a virtual environment: the one
tools/setup.sh prepares ($HOME/.cache/trainc/tensorboard-venv), else one
made in the test's temporary folder. Only when neither exists and PyPI
cannot be reached does the TensorBoard test skip, saying so."""
import glob
import json
import math
import os
import re
import subprocess
import sys
import unittest

import numpy as np

from e2e_lib import EXAMPLE, SEED, need_fashion_mnist, tmpdir, train

TENSORBOARD = "tensorboard>=2,<3"
SETUP_VENV = os.path.join(os.path.expanduser("~"), ".cache", "trainc",
                          "tensorboard-venv")


def read_jsonl(path):
    with open(path) as f:
        text = f.read()
    assert text.endswith("\n"), "the last line was not completed"
    return [json.loads(line) for line in text.splitlines()]


def scalar_keys(record):
    """The measured values of a train or eval record: written as floats
    (2.0, not 2), unlike its descriptive integers (epoch, examples)."""
    return [k for k, v in record.items()
            if k not in ("kind", "step", "time") and (isinstance(v, float) or v is None)]


def tensorboard_python():
    """A python with tensorboard, or (None, why)."""
    for venv in (os.environ.get("TRAINC_TENSORBOARD_VENV"), SETUP_VENV):
        if venv:
            py = os.path.join(venv, "bin", "python")
            if os.path.exists(py) and subprocess.run(
                    [py, "-c", "import tensorboard"], capture_output=True).returncode == 0:
                return py, None
    venv = os.path.join(tmpdir(), "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    py = os.path.join(venv, "bin", "python")
    pip = subprocess.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "--timeout", "20", "--retries", "1", TENSORBOARD],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=600)
    if pip.returncode != 0:
        last = (pip.stdout.strip().splitlines() or ["no output"])[-1]
        return None, ("TensorBoard is not in %s (tools/setup.sh puts it there) and "
                      "pip could not install %s from PyPI, unreachable? pip said: %s"
                      % (SETUP_VENV, TENSORBOARD, last))
    return py, None


class FashionRunTest(unittest.TestCase):
    """Two ranks of the default example, 30 steps: the default metrics path
    beside --save, and a TensorBoard folder."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tmpdir()
        cls.proc = None
        if not os.path.exists("/usr/share/datasets/fashion-mnist"):
            return
        cls.proc = train(EXAMPLE, "--seed", SEED, "--steps", 30, "--log-every", 10,
                         "--save", os.path.join(cls.dir, "model.safetensors"),
                         "--tensorboard", os.path.join(cls.dir, "tb"))
        cls.records = read_jsonl(os.path.join(cls.dir, "model.metrics.jsonl"))

    def setUp(self):
        need_fashion_mnist(self)

    def of_kind(self, kind):
        return [r for r in self.records if r["kind"] == kind]

    def test_records_in_order(self):
        kinds = [r["kind"] for r in self.records]
        self.assertEqual(kinds, ["run"] + ["train"] * 30 + ["eval", "summary"])
        run = self.records[0]
        self.assertEqual((run["model"], run["gpus"], run["micro_batch"], run["accumulate"],
                          run["global_batch"], run["steps"], run["device"]),
                         ("fashion_mlp", 2, 64, 2, 256, 30, "cpu"))
        self.assertIn("metrics: " + os.path.join(self.dir, "model.metrics.jsonl"),
                      self.proc.stdout)

    def test_one_train_record_per_step(self):
        train_records = self.of_kind("train")
        self.assertEqual([r["step"] for r in train_records], list(range(1, 31)))
        times = [r["time"] for r in train_records]
        self.assertEqual(times, sorted(times))
        for r in train_records:
            self.assertTrue(0 < r["loss"] < 5, r)
            self.assertEqual(r["lr"], 0.001)  # constant schedule
            self.assertEqual(r["epoch"], 1)
            self.assertGreater(r["step_ms"], 0)
            self.assertAlmostEqual(r["samples_per_s"], 256 / (r["step_ms"] / 1e3),
                                   delta=1e-6 * r["samples_per_s"])
            self.assertNotIn("tokens_per_s", r)  # not a language model
        # Training lowers the loss.
        self.assertLess(train_records[-1]["loss"], train_records[0]["loss"] - 0.5)

    def test_losses_match_the_progress_lines(self):
        by_step = {r["step"]: r for r in self.of_kind("train")}
        lines = re.findall(r"step (\d+)/30 \| epoch 1/1 \| loss ([0-9.]+)", self.proc.stdout)
        self.assertEqual([int(s) for s, _ in lines], [10, 20, 30])
        for step, loss in lines:
            self.assertEqual("%.4f" % by_step[int(step)]["loss"], loss)

    def test_exposed_communication_on_measured_steps(self):
        measured = [r for r in self.of_kind("train") if "exposed_comm_ms" in r]
        # The trainer traces steps 2-4 to measure overlap.
        self.assertEqual([r["step"] for r in measured], [2, 3, 4])
        for r in measured:
            self.assertGreaterEqual(r["exposed_comm_ms"], 0)
            self.assertLessEqual(r["exposed_comm_ms"], r["allreduce_ms"])

    def test_eval_and_summary(self):
        (ev,) = self.of_kind("eval")
        self.assertEqual((ev["step"], ev["epoch"], ev["examples"]), (30, 1, 10000))
        m = re.search(r"eval epoch 1 \| loss ([0-9.]+) \| accuracy ([0-9.]+)%",
                      self.proc.stdout)
        self.assertEqual("%.4f" % ev["loss"], m.group(1))
        self.assertEqual("%.2f" % (100 * ev["accuracy"]), m.group(2))
        self.assertNotIn("bits_per_byte", ev)  # images, not text
        (s,) = self.of_kind("summary")
        self.assertEqual(s["steps"], 30)
        # Summary numbers are exact; scalars have 10 significant digits.
        self.assertEqual(np.float32(s["final_loss"]),
                         np.float32(self.of_kind("train")[-1]["loss"]))
        self.assertEqual(np.float32(s["eval_accuracy"]), np.float32(ev["accuracy"]))

    def test_tensorboard_reads_the_same_scalars(self):
        files = glob.glob(os.path.join(self.dir, "tb", "events.out.tfevents.*"))
        self.assertEqual(len(files), 1, files)
        self.assertRegex(os.path.basename(files[0]),
                         r"^events\.out\.tfevents\.\d{10}\.[^.]+.*\.\d+$")
        py, why = tensorboard_python()
        if py is None:
            self.skipTest(why)
        dump = subprocess.run(
            [py, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                              "tensorboard_dump.py"), os.path.join(self.dir, "tb")],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        self.assertEqual(dump.returncode, 0, dump.stderr)
        tb = json.loads(dump.stdout)
        self.assertEqual(tb["file_version"], 2.0)  # "brain.Event:2"
        expected = {}
        for r in self.records:
            if r["kind"] not in ("train", "eval"):
                continue
            for k in scalar_keys(r):
                expected.setdefault(r["kind"] + "/" + k, []).append(
                    [r["step"], r["time"], r[k]])
        self.assertEqual(sorted(tb["scalars"]), sorted(expected))
        self.assertIn("train/loss", expected)
        self.assertIn("train/exposed_comm_ms", expected)
        self.assertIn("eval/accuracy", expected)
        for tag, want in expected.items():
            got = tb["scalars"][tag]
            self.assertEqual([g[0] for g in got], [w[0] for w in want], tag)
            self.assertEqual([g[1] for g in got], [w[1] for w in want], tag)
            # TensorBoard keeps float32 of the value, the JSON its 10
            # significant digits: the two round to the same float32 or, when
            # the value lies within 5e-11 of a float32 midpoint, to
            # neighbours (seen: 39570.703125 vs 39570.69921875). One float32
            # ulp apart at most.
            g32 = np.float32([g[2] for g in got])
            w32 = np.float32([w[2] for w in want])
            ulp = np.spacing(np.abs(w32))
            self.assertTrue(np.all(np.abs(g32 - w32) <= ulp),
                            f"{tag}: {g32.tolist()} vs {w32.tolist()}")


TINY_LM = """
model tiny_lm {
  const vocab = 256, ctx = 16, width = 32
  input  tokens: i32[ctx]
  label  next:   i32[ctx]
  wte    = embedding(tokens, vocab, width)
  wpe    = position_embedding(ctx, width)
  ln     = layernorm(wte + wpe)
  logits = linear(ln, vocab)
  loss   = cross_entropy(logits, next)
}
data {
  train = text("%(text)s", split = "0:90%%")
  eval  = text("%(text)s", split = "90%%:100%%")
}
train {
  gpus        = 1
  micro_batch = 8
  accumulate  = 1
  steps       = 4
  optimizer   = adamw(lr = 1e-2)
  schedule    = cosine(warmup = 2)
}
"""


class LanguageModelTest(unittest.TestCase):
    """A tiny byte-level model on a small text file: tokens/s, bits per
    byte, a resumed run appending, --metrics and --no-metrics."""

    def setUp(self):
        self.dir = tmpdir()
        text = os.path.join(self.dir, "text.txt")
        with open(text, "w") as f:
            for i in range(400):
                f.write("the quick brown fox %d jumps over the lazy dog.\n" % i)
        self.spec = os.path.join(self.dir, "tiny_lm.train")
        with open(self.spec, "w") as f:
            f.write(TINY_LM % {"text": text})

    def test_tokens_bits_per_byte_and_resume(self):
        ckpt = os.path.join(self.dir, "lm.safetensors")
        train(self.spec, "--save", ckpt)
        path = os.path.join(self.dir, "lm.metrics.jsonl")
        first = read_jsonl(path)
        self.assertEqual([r["kind"] for r in first],
                         ["run"] + ["train"] * 4 + ["eval", "summary"])
        self.assertEqual(first[0]["loss_terms"], 16)
        lrs = []
        for r in first[1:5]:
            self.assertAlmostEqual(r["tokens_per_s"], 16 * r["samples_per_s"],
                                   delta=1e-6 * r["tokens_per_s"])
            lrs.append(r["lr"])
            for k in ("loss", "lr", "step_ms", "samples_per_s", "tokens_per_s"):
                self.assertIsInstance(r[k], float, k)  # the last lr too: 0.0
        # cosine(warmup = 2) over 4 steps: up, peak, down, 0 on the last.
        np.testing.assert_allclose(lrs, [5e-3, 1e-2, 5e-3, 0], atol=1e-9)
        ev = first[5]
        self.assertEqual(ev["tokens"] % 16, 0)
        self.assertAlmostEqual(ev["bits_per_byte"], ev["loss"] / math.log(2), places=6)
        self.assertTrue(0 < ev["accuracy"] <= 1)

        # Resumed to step 6: the same file goes on.
        train(self.spec, "--resume", ckpt, "--save", ckpt, "--steps", 6)
        both = read_jsonl(path)
        self.assertEqual(both[:len(first)], first)
        rest = both[len(first):]
        self.assertEqual([r["kind"] for r in rest],
                         ["run"] + ["train"] * 2 + ["eval", "summary"])
        self.assertEqual(rest[0]["step"], 4)
        self.assertEqual([r["step"] for r in rest[1:3]], [5, 6])

    def test_explicit_path_and_none(self):
        explicit = os.path.join(self.dir, "logs", "run1.jsonl")
        train(self.spec, "--steps", 1, "--no-eval", "--metrics", explicit)
        self.assertEqual([r["kind"] for r in read_jsonl(explicit)],
                         ["run", "train", "summary"])
        train(self.spec, "--steps", 1, "--no-eval", "--no-metrics",
              "--save", os.path.join(self.dir, "quiet.safetensors"))
        self.assertFalse(os.path.exists(os.path.join(self.dir, "quiet.metrics.jsonl")))
        self.assertEqual(train(self.spec, "--metrics", "", check=False).returncode, 2)


if __name__ == "__main__":
    unittest.main(verbosity=2)
