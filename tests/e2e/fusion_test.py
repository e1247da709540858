"""The plan's fusion (`fusion = true`, the default): cross_entropy and its
gradient as one instruction (compiler/graph/fuse_classifier.h), and each
MLP's linear with its tanh GELU (compiler/graph/fuse_linear_gelu.h). The
fused plan trains on the same bits as the unfused one (fp32 and bf16, two
ranks, both fusions), the plan file shows the fused instructions, and
under bf16 the memory report drops the f32 probabilities of GPT-2 small's
50,257-wide logits, the gradient taking the logits' own bytes."""
import re
import unittest

import e2e_lib as e2e

GPT = e2e.runfile("dsl_examples/tiny_gpt.train")
GPT2 = e2e.runfile("dsl_examples/gpt2_small.train")


class FusionTest(unittest.TestCase):

    def setUp(self):
        self.dir = e2e.tmpdir()

    def test_fused_and_unfused_plans_train_the_same_bits(self):
        # With recomputation the backward runs linear_gelu again.
        for precision, recompute in (("fp32", "false"), ("bf16", "false"), ("fp32", "true")):
            runs = {}
            for fusion in ("true", "false"):
                out = f"{self.dir}/{precision}_{recompute}_{fusion}.safetensors"
                e2e.train(GPT, "--device", "cpu", "--gpus", 2, "--micro_batch", 4,
                          "--accumulate", 2, "--steps", 3, "--no-eval",
                          "--deterministic", "true", "--precision", precision,
                          "--recompute", recompute, "--fusion", fusion, "--save", out,
                          timeout=600)
                runs[fusion] = e2e.read_checkpoint(out)[0]
            e2e.assert_same_bits(self, runs["false"], runs["true"],
                                 f"{precision}, recompute {recompute}")

    def test_the_plan_shows_the_fused_instruction(self):
        ops, mlp = {}, {}
        for fusion in ("true", "false"):
            path = f"{self.dir}/{fusion}.plan"
            e2e.train(GPT, "--fusion", fusion, "--compile-only", "-o", path)
            with open(path) as f:
                text = f.read()
            ops[fusion] = re.findall(r"^instr \d+ op=(cross_entropy\w*) .*micro=0 ", text, re.M)
            mlp[fusion] = re.findall(r"^instr \d+ op=(\w+) .*phase=forward micro=0 .*"
                                     r'label="h\.0\.mlp\.', text, re.M)
        self.assertEqual(ops["true"], ["cross_entropy_fused"])
        self.assertEqual(ops["false"], ["cross_entropy", "cross_entropy_grad"])
        # Each layer's c_fc and its gelu (tiny_gpt: 4 layers) as one.
        self.assertEqual(mlp["true"], ["linear_gelu", "linear"])
        self.assertEqual(mlp["false"], ["linear", "gelu_tanh", "linear"])

    def test_bf16_linear_gelu_reads_and_writes_bf16(self):
        path = f"{self.dir}/bf16.plan"
        e2e.train(GPT, "--precision", "bf16", "--compile-only", "-o", path)
        with open(path) as f:
            text = f.read()
        dtype = {m.group(1): m.group(2) for m in
                 re.finditer(r"^buffer (\d+) .* dtype=(\w+) ", text, re.M)}
        fused = re.findall(r"^instr \d+ op=linear_gelu .* in=([\d,]+) out=([\d,]+) ",
                           text, re.M)
        self.assertEqual(len(fused), 4)  # 4 layers, one micro-step
        for ins, outs in fused:
            # x, w, b as the linear's bf16 copies; pre and y bf16.
            self.assertEqual([dtype[b] for b in ins.split(",")], ["bf16"] * 3)
            self.assertEqual([dtype[b] for b in outs.split(",")], ["bf16"] * 2)

    def test_bf16_gpt2_small_keeps_no_f32_probabilities(self):
        def peak(fusion):
            out = e2e.train(GPT2, "--gpus", 1, "--micro_batch", 16, "--precision", "bf16",
                            "--fusion", fusion, "--compile-only").stdout
            m = re.search(r"peak activations\s+([\d.]+) MiB", out)
            self.assertIsNotNone(m, out)
            return float(m.group(1))
        # [16, 1024, 50257] probabilities in f32 (3,141 MiB) gone, and the
        # bf16 dlogits (1,571 MiB) written over the bf16 logits.
        saved = peak("false") - peak("true")
        self.assertGreater(saved, 3000)
        self.assertLess(saved, 3200)

    def test_fp32_dlogits_take_the_logits_bytes(self):
        # The plan file: the fused instruction's dlogits at its logits'
        # offset, and the peak 3,141 MiB below the unfused plan's.
        texts = {}
        for fusion in ("true", "false"):
            path = f"{self.dir}/gpt2_{fusion}.plan"
            e2e.train(GPT2, "--gpus", 1, "--micro_batch", 16, "--fusion", fusion,
                      "--compile-only", "-o", path)
            with open(path) as f:
                texts[fusion] = f.read()
        fused = re.search(r"^instr \d+ op=cross_entropy_fused .* in=(\d+),\d+ out=\d+,(\d+) ",
                          texts["true"], re.M)
        self.assertIsNotNone(fused)
        offset = {m.group(1): int(m.group(2)) for m in
                  re.finditer(r"^buffer (\d+) .* offset=(\d+) ", texts["true"], re.M)}
        self.assertEqual(offset[fused.group(1)], offset[fused.group(2)])
        peak = {k: int(re.search(r"^memory .*peak_activations=(\d+)", t, re.M).group(1))
                for k, t in texts.items()}
        self.assertEqual(peak["false"] - peak["true"], 16 * 1024 * 50257 * 4)


if __name__ == "__main__":
    unittest.main()
