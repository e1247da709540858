"""--save / --resume: a run stopped after step 10 and resumed ends bit for
bit where an uninterrupted 20-step run ends (weights and optimizer state),
and the --save file is a PyTorch state dict: Debian's PyTorch loads it with
load_state_dict(strict=True) into the .train file's model and gets trainc's
eval loss."""
import json
import math
import os
import unittest

import numpy as np

import e2e_lib as e2e

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover - depends on the machine
    torch = None


class ResumeTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)

    def test_resume_is_bit_exact(self):
        d = e2e.tmpdir()
        common = [e2e.EXAMPLE, "--device", "cpu", "--no-eval"]
        e2e.train(*common, "--steps", 20, "--save", f"{d}/full.safetensors")
        e2e.train(*common, "--steps", 10, "--save", f"{d}/half.safetensors")
        out = e2e.train(*common, "--steps", 20, "--resume",
                        f"{d}/half.safetensors", "--save",
                        f"{d}/resumed.safetensors")
        self.assertIn("resumed from", out.stdout)
        full, meta = e2e.read_checkpoint(f"{d}/full.safetensors")
        resumed, meta2 = e2e.read_checkpoint(f"{d}/resumed.safetensors")
        self.assertEqual(meta.get("step"), "20")
        self.assertEqual(meta2.get("step"), "20")
        self.assertEqual(sorted(full), sorted(resumed))
        self.assertTrue(any(n.endswith("exp_avg") for n in full))
        for name in full:
            self.assertTrue(np.array_equal(full[name].view(np.uint32),
                                           resumed[name].view(np.uint32)), name)

    def test_resumed_schedule_goes_on_at_the_checkpoint_s_step(self):
        # cosine(warmup = 10) over 40 steps: the lr of a step is a function
        # of the global step, so a run resumed after step 20 uses steps
        # 21..40's lrs (not 1..20's again), as the uninterrupted run does:
        # from a 20-step run's --save (its own schedule was 20 steps long:
        # the resumed run's 40 steps decide), and from the uninterrupted
        # run's own step-20 checkpoint, which then also ends on its bits.
        d = e2e.tmpdir()
        with open(e2e.EXAMPLE) as f:
            text = f.read()
        assert text.count("  seed        = 0\n") == 1, "the example changed"
        text = text.replace("  seed        = 0\n",
                            "  seed        = 0\n  schedule    = cosine(warmup = 10)\n")
        spec = f"{d}/cosine.train"
        with open(spec, "w") as f:
            f.write(text)
        base_lr, warmup, steps = 1e-3, 10, 40

        def lrs(name):
            with open(f"{d}/{name}.jsonl") as f:
                records = [r for r in map(json.loads, f) if r["kind"] == "train"]
            return {r["step"]: r["lr"] for r in records}

        common = [spec, "--device", "cpu", "--no-eval"]
        e2e.train(*common, "--steps", steps, "--save", f"{d}/full.safetensors",
                  "--metrics", f"{d}/full.jsonl", "--checkpoint_every", 20,
                  "--checkpoint_dir", f"{d}/ckpt")
        e2e.train(*common, "--steps", 20, "--save", f"{d}/half.safetensors",
                  "--no-metrics")
        for name, source in (("resumed", f"{d}/half.safetensors"),
                             ("resumed_ckpt", f"{d}/ckpt/step-00000020.safetensors")):
            out = e2e.train(*common, "--steps", steps, "--resume", source,
                            "--save", f"{d}/{name}.safetensors",
                            "--metrics", f"{d}/{name}.jsonl")
            self.assertIn("resumed from", out.stdout)
        full = lrs("full")
        self.assertEqual(sorted(full), list(range(1, steps + 1)))
        # The schedule itself (docs/language.md: step k at lr k / N in the warm-up,
        # then cosine to 0 reached on the last step).
        for k, lr in full.items():
            want = (base_lr * k / warmup if k <= warmup else
                    0.5 * base_lr * (1 + math.cos(math.pi * (k - warmup) / (steps - warmup))))
            self.assertAlmostEqual(lr, want, delta=1e-12, msg=f"step {k}")
        self.assertEqual(full[steps], 0.0)
        for name in ("resumed", "resumed_ckpt"):
            got = lrs(name)
            self.assertEqual(sorted(got), list(range(21, steps + 1)), name)
            for k, lr in got.items():
                self.assertEqual(lr, full[k], f"{name}: step {k}'s lr")
        whole, _ = e2e.read_checkpoint(f"{d}/full.safetensors")
        resumed, _ = e2e.read_checkpoint(f"{d}/resumed_ckpt.safetensors")
        e2e.assert_same_bits(self, resumed, whole,
                             "resumed from step 20's checkpoint, cosine schedule")

    def test_names_match_pytorch_modules(self):
        d = e2e.tmpdir()
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 1,
                  "--no-eval", "--save", f"{d}/w.safetensors")
        w, _ = e2e.read_checkpoint(f"{d}/w.safetensors")
        self.assertEqual(w["h1.weight"].shape, (256, 784))   # nn.Linear [out, in]
        self.assertEqual(w["logits.bias"].shape, (10,))


class PyTorchLoadsTheSaveFileTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        e2e.need_torch_reference(torch)

    def test_load_state_dict_strict_gives_trainc_eval_loss(self):
        d = e2e.tmpdir()
        save = f"{d}/mlp.safetensors"
        e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--steps", 30, "--save", save,
                  "--metrics", f"{d}/mlp.jsonl")
        with open(f"{d}/mlp.jsonl") as f:
            evals = [r for r in map(json.loads, f) if r["kind"] == "eval"]
        self.assertEqual(evals[-1]["examples"], 10000)

        class Mlp(torch.nn.Module):  # dsl_examples/fashion_mlp.train
            def __init__(self):
                super().__init__()
                self.h1 = torch.nn.Linear(784, 256)
                self.h2 = torch.nn.Linear(256, 128)
                self.logits = torch.nn.Linear(128, 10)

            def forward(self, x):
                return self.logits(F.relu(self.h2(F.relu(self.h1(x)))))

        weights, meta = e2e.read_safetensors(save)
        self.assertEqual(meta["format"], "pt")
        model = Mlp().double()
        # Raises on any missing or unexpected key (optimizer state included).
        model.load_state_dict({k: torch.from_numpy(v.astype(np.float64))
                               for k, v in weights.items()}, strict=True)
        # The optimizer state is beside it, for --resume.
        state, _ = e2e.read_safetensors(e2e.training_state_path(save))
        self.assertIn("optimizer.h1.weight.exp_avg", state)
        images = e2e.read_idx(e2e.FASHION.replace("train-images", "t10k-images"), 10000)
        labels = e2e.read_idx(e2e.TRAIN_LABELS.replace("train-labels", "t10k-labels"), 10000)
        x = torch.from_numpy(images.reshape(10000, 784).astype(np.float64) / 255)
        with torch.no_grad():
            loss = F.cross_entropy(model(x), torch.from_numpy(labels.astype(np.int64))).item()
        self.assertAlmostEqual(loss, evals[-1]["loss"], delta=1e-5 * loss)


if __name__ == "__main__":
    unittest.main()
