"""dsl_examples/llama_tiny.train, made small, through the runtime's modes.

The example itself (RMSNorm, rotary positions, grouped-query attention,
SwiGLU, untied head), shrunk by its constants to 2 layers x 64 wide (4 query
heads over 2 key/value heads of 16, MLP 96), on its own text:
  - deterministic splits of one global batch of 8, gpus x accumulate =
    1 x 4 and 2 x 2, end bit for bit identical;
  - with precision = bf16, zero = 1 and clip_grad_norm on two ranks it
    trains: every step's loss is finite, the last is below the first, and
    the weights moved;
  - repeat(..., recompute = true) ends with the same bits (bf16, 2 x 2)
    while the plan's peak activations shrink;
  - SwiGLU fused (swiglu and swiglu_grad, compiler/graph/fuse_swiglu.h)
    trains on the bits of silu, mul and their gradients apart (fusion =
    false), fp32 and bf16.
"""
import json
import math
import os
import random
import re
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
  seed = {3 + e2e.SEED}
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

    def test_recompute_gives_the_same_bits_in_less_memory(self):
        # The same model with its layers recomputed in the backward.
        with open(self.model) as f:
            source = f.read()
        recompute = os.path.join(self.dir, "llama_recompute.train")
        with open(recompute, "w") as f:
            f.write(source.replace("repeat(layer, layers, embed_tokens)",
                                   "repeat(layer, layers, embed_tokens, recompute = true)"))
        plain, _ = self.run_split("plain", 2, 2, "--deterministic", "true", "--precision", "bf16")
        saved = self.model
        try:
            self.model = recompute
            again, _ = self.run_split("again", 2, 2, "--deterministic", "true",
                                      "--precision", "bf16")
        finally:
            self.model = saved
        e2e.assert_same_bits(self, again, plain, "recompute against keeping activations")
        flags = [x for k, v in SMALL.items() for x in (f"--{k}", v)]
        def peak(path):
            out = e2e.train(path, "--compile-only", *flags, "--gpus", 2, "--micro_batch", 2,
                            "--accumulate", 2).stdout
            line = next(l for l in out.splitlines() if l.strip().startswith("peak activations"))
            value, unit = line.split()[2:4]
            return float(value) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit], out
        before, _ = peak(self.model)
        after, text = peak(recompute)
        self.assertIn("forward instructions run again in the backward", text)
        self.assertLess(after, 0.8 * before)

    def test_swiglu_fusion_trains_the_unfused_bits(self):
        flags = [x for k, v in SMALL.items() for x in (f"--{k}", v)]
        plan = os.path.join(self.dir, "swiglu.plan")
        e2e.train(self.model, "--compile-only", *flags, "--gpus", 1, "-o", plan)
        with open(plan) as f:
            ops = re.findall(r"^instr \d+ op=(\w+) ", f.read(), re.M)
        # One of each per layer; nothing of the five left.
        self.assertEqual((ops.count("swiglu"), ops.count("swiglu_grad")), (2, 2))
        self.assertFalse({"silu", "silu_grad", "mul", "mul_grad"} & set(ops))
        for precision in ("fp32", "bf16"):
            runs = {}
            for fusion in ("true", "false"):
                runs[fusion], _ = self.run_split(f"swiglu_{precision}_{fusion}", 1, 2,
                                                 "--deterministic", "true", "--precision",
                                                 precision, "--fusion", fusion)
            e2e.assert_same_bits(self, runs["false"], runs["true"],
                                 f"{precision}: swiglu against silu and mul apart")

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
