"""Files from elsewhere: checkpoints with a NaN weight, a FIFO, a device
file; IDX labels outside the model's classes. Each is a clear error naming
the file (and the tensor or example), before any training, and nothing
hangs."""
import os
import struct
import unittest

import numpy as np

import faults_lib  # noqa: F401  (puts tests/e2e on the path)
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

    def test_a_checkpoint_at_step_int64_max_is_refused_cleanly(self):
        # A header from another tool (or an overflow) claiming step 2^63 - 1:
        # a clear refusal, no negative epochs or ETAs.
        good = os.path.join(self.dir, "good.safetensors")
        e2e.train(e2e.EXAMPLE, "--gpus", 1, "--steps", 1, "--no-eval", "--no-metrics",
                  "--save", good)
        tensors, meta = e2e.read_safetensors(good)
        meta["step"] = str(2**63 - 1)
        far = os.path.join(self.dir, "far.safetensors")
        e2e.write_safetensors(far, tensors, meta)
        proc = e2e.train(e2e.EXAMPLE, "--gpus", 1, "--steps", 5, "--no-eval",
                         "--no-metrics", "--resume", far, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertNotIn("step -", proc.stdout)
        self.assertNotIn("epoch -", proc.stdout)
        self.assertRegex(proc.stdout, far + r"(:| is at step 9223372036854775807)")

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


MLP = """
model mlp {
  input  image: f32[784]
  label  class: i32[10]
  h      = relu(linear(image, 32))
  logits = linear(h, 10)
  loss   = cross_entropy(logits, class)
}
data {
  train = idx("%(images)s", "%(labels)s")
  eval  = idx("%(images)s", "%(eval_labels)s")
}
train { gpus = 1  micro_batch = 16  steps = 2  optimizer = sgd(lr = 0.1) }
"""


def write_idx(path, magic, dims, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">I", magic))
        f.write(b"".join(struct.pack(">I", d) for d in dims))
        f.write(bytes(payload))


class HostileLabelsTest(unittest.TestCase):

    def run_with_labels(self, train_labels, eval_labels):
        d = e2e.tmpdir()
        n = len(train_labels)
        paths = {k: os.path.join(d, k + ".idx")
                 for k in ("images", "labels", "eval_labels")}
        write_idx(paths["images"], 0x803, (n, 28, 28), [7] * (n * 784))
        write_idx(paths["labels"], 0x801, (n,), train_labels)
        write_idx(paths["eval_labels"], 0x801, (n,), eval_labels)
        train_file = os.path.join(d, "mlp.train")
        with open(train_file, "w") as f:
            f.write(MLP % paths)
        return e2e.train(train_file, "--device", "cpu", check=False)

    def test_a_label_outside_the_classes_names_file_example_and_value(self):
        labels = [i % 10 for i in range(64)]
        labels[37] = 10
        proc = self.run_with_labels(labels, [0] * 64)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("labels.idx: label 10 of example 37 is outside [0, 10)",
                      proc.stdout)
        self.assertNotIn("step 1/", proc.stdout)

    def test_the_eval_labels_are_checked_before_training_too(self):
        eval_labels = [0] * 64
        eval_labels[63] = 255
        proc = self.run_with_labels([i % 10 for i in range(64)], eval_labels)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("eval_labels.idx: label 255 of example 63", proc.stdout)
        self.assertNotIn("step 1/", proc.stdout)

    def test_good_labels_train(self):
        proc = self.run_with_labels([i % 10 for i in range(64)], [3] * 64)
        self.assertEqual(proc.returncode, 0, proc.stdout)


LM = """
model lm {
  const ctx = 8
  input  tokens: i32[ctx]
  label  next:   i32[ctx]
  e      = embedding(tokens, 256, 16)
  logits = linear(e, 256)
  loss   = cross_entropy(logits, next)
}
data { train = text(%(train)s) }
train { gpus = 1  micro_batch = 2  steps = 2  optimizer = sgd(lr = 0.1) }
"""


class HostileFilesTest(unittest.TestCase):
    """What a user can name by mistake: each is refused at once with what it
    is, never a hang, a wrong size or another file read."""

    def setUp(self):
        self.dir = e2e.tmpdir()

    def lm(self, train, *args):
        path = os.path.join(self.dir, "lm.train")
        with open(path, "wb") as f:
            f.write((LM % {"train": train}).encode("utf-8", "surrogateescape"))
        return e2e.train(path, "--device", "cpu", "--no-metrics", *args, check=False,
                         timeout=60)

    def test_a_folder_as_the_train_file(self):
        for folder in (self.dir, os.path.join(self.dir, "x.train")):
            os.makedirs(folder, exist_ok=True)
            proc = e2e.train(folder, check=False, timeout=30)
            self.assertEqual(proc.returncode, 1, proc.stdout)
            self.assertIn("is a directory", proc.stdout)
            self.assertNotIn("empty plan", proc.stdout)

    def test_a_fifo_as_the_train_file_or_as_data_does_not_hang(self):
        fifo = os.path.join(self.dir, "f.train")
        os.mkfifo(fifo)
        proc = e2e.train(fifo, check=False, timeout=30)
        self.assertIn("not a regular file", proc.stdout)
        data = os.path.join(self.dir, "data.fifo")
        os.mkfifo(data)
        proc = self.lm(f'"{data}"')
        self.assertEqual(proc.returncode, 1, proc.stdout)
        self.assertIn("lm.train:10:21: error: cannot read", proc.stdout)
        self.assertIn("not a regular file", proc.stdout)
        paths = {k: os.path.join(self.dir, k) for k in ("images", "labels", "eval_labels")}
        paths["labels"] = data
        with open(os.path.join(self.dir, "mlp.train"), "w") as f:
            f.write(MLP % paths)
        proc = e2e.train(os.path.join(self.dir, "mlp.train"), check=False, timeout=30)
        self.assertIn("it is a pipe or a socket", proc.stdout)

    def test_a_large_file_is_reported_at_its_real_size(self):
        big = os.path.join(self.dir, "big.train")
        with open(big, "wb") as f:
            f.truncate(50_000_000)
        proc = e2e.train(big, check=False, timeout=30)
        self.assertIn("too large (50000000 bytes", proc.stdout)

    def test_empty_text_is_named_where_the_train_file_says_it(self):
        empty = os.path.join(self.dir, "empty.txt")
        open(empty, "w").close()
        proc = self.lm(f'"{empty}"')
        self.assertIn(f"lm.train:10:21: error: '{empty}' is empty: no text to train on",
                      proc.stdout)
        open(os.path.join(self.dir, "also_empty.txt"), "w").close()
        proc = self.lm(f'"{self.dir}/*.txt"')
        self.assertIn("matches 2 files, all empty", proc.stdout)

    def test_a_path_with_a_byte_that_is_not_utf8_is_the_file_named(self):
        name = os.fsdecode(b"caf\xe9.txt")  # Latin-1, as an old tool writes it
        with open(os.path.join(os.fsencode(self.dir), b"caf\xe9.txt"), "w") as f:
            f.write("the text of a file whose name is not UTF-8. " * 4)
        proc = self.lm(f'"{self.dir}/{name}"', "--steps", 1)
        self.assertEqual(proc.returncode, 0, proc.stdout)

    def test_absurd_sizes(self):
        e2e.need_fashion_mnist(self)
        proc = e2e.train(e2e.runfile("dsl_examples/tiny_gpt.train"), "--width", 1000000000,
                         check=False, timeout=30)
        self.assertIn("is too large: 3000000000 (the largest dimension is", proc.stdout)
        # One rank of a model that cannot fit: the same arithmetic as two.
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--micro_batch",
                         20000000, "--accumulate", 1, "--steps", 1, "--no-eval",
                         check=False, timeout=60)
        self.assertRegex(proc.stdout, r"1 rank needs about \d+\.\d GiB of memory")
        self.assertNotIn("cannot allocate", proc.stdout)
        # A bucket larger than any model holds them all (matrices and
        # biases apart, for weight decay), not one parameter each.
        proc = e2e.train("--compile-only", e2e.EXAMPLE, "--bucket_mb", "1e30", timeout=30)
        self.assertIn("buckets: 2 (bucket_mb 1e+30", proc.stdout)


if __name__ == "__main__":
    unittest.main()
