"""dsl_examples/llama_tiny.train, made small, through the runtime's modes.

The example itself (RMSNorm, rotary positions, grouped-query attention,
SwiGLU, untied head), shrunk by its constants to 2 layers x 64 wide (4 query
heads over 2 key/value heads of 16, MLP 96), on its own text:
  - deterministic splits of one global batch of 8, gpus x accumulate =
    1 x 4 and 2 x 2, end bit for bit identical;
  - with precision = bf16, zero = 1 and clip_grad_norm on two ranks it
    trains: every step's loss is finite, the last is below the first, and
    the weights moved.
"""
import json
import math
import os
import random
import unittest

import numpy as np

import e2e_lib as e2e

SMALL = {"ctx": 16, "width": 64, "heads": 4, "kv_heads": 2, "head": 16, "hidden": 96,
         "layers": 2}


class LlamaTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = e2e.tmpdir()
        rng = random.Random(7)
        words = [bytes(rng.choice(b"etaoinshrdlu") for _ in range(rng.randint(2, 7)))
                 for _ in range(50)]
        text = b""
        while len(text) < 6000:
            text += rng.choice(words) + b" "
        corpus = os.path.join(cls.dir, "corpus.txt")
        with open(corpus, "wb") as f:
            f.write(text)
        with open(e2e.runfile("dsl_examples/llama_tiny.train")) as f:
            source = f.read()
        source = source[:source.index("data {")] + f"""
data {{
  train = text("{corpus}", split = "0:90%")
  eval  = text("{corpus}", split = "90%:100%")
  shuffle = true
}}
train {{
  global_batch = 8
  steps = 6
  optimizer = adamw(lr = 3e-3, weight_decay = 0.1, betas = (0.9, 0.95))
  seed = 3
}}
"""
        cls.model = os.path.join(cls.dir, "llama.train")
        with open(cls.model, "w") as f:
            f.write(source)

    def run_split(self, name, gpus, accumulate, *extra):
        out = os.path.join(self.dir, name + ".safetensors")
        metrics = os.path.join(self.dir, name + ".jsonl")
        flags = [x for k, v in SMALL.items() for x in (f"--{k}", v)]
        e2e.train(self.model, "--device", "cpu", *flags, "--gpus", gpus,
                  "--micro_batch", 8 // (gpus * accumulate), "--accumulate", accumulate,
                  "--save", out, "--metrics", metrics, "--no-eval", *extra, timeout=600)
        weights, _ = e2e.read_safetensors(out)
        with open(metrics) as f:
            losses = [json.loads(line)["loss"] for line in f if '"kind":"train"' in line]
        return e2e.parameters_of(weights), losses

    def test_splits_are_bit_identical(self):
        one, losses = self.run_split("1x4", 1, 4, "--deterministic", "true")
        two, _ = self.run_split("2x2", 2, 2, "--deterministic", "true")
        self.assertEqual(len(losses), 6)
        self.assertIn("h.1.self_attn.qkv.weight", one)
        e2e.assert_same_bits(self, two, one, "2 x 2 against 1 x 4")

    def test_bf16_zero1_and_clipping_train(self):
        start, _ = self.run_split("start", 1, 1, "--steps", 1, "--lr", "1e-30")
        got, losses = self.run_split("bf16", 2, 1, "--precision", "bf16", "--zero", 1,
                                     "--clip_grad_norm", 0.5)
        self.assertEqual(len(losses), 6)
        self.assertTrue(all(math.isfinite(l) for l in losses), losses)
        self.assertLess(losses[-1], losses[0])
        moved = max(float(np.max(np.abs(got[k] - start[k]))) for k in start)
        self.assertGreater(moved, 1e-3)


if __name__ == "__main__":
    unittest.main()
