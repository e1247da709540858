"""The plan's fusion (`fusion = true`, the default): cross_entropy and its
gradient as one instruction (compiler/graph/fuse_classifier.h), each
MLP's linear with its tanh GELU (compiler/graph/fuse_linear_gelu.h), in
the backward each MLP's projection input gradient with the GELU's gradient
(compiler/graph/fuse_linear_gelu_grad.h), each residual add with the
layernorm of its sum (compiler/graph/fuse_add_layernorm.h), and a linear or
convolution with the activation after it (compiler/graph/fuse_activation.h:
linear_relu, linear_tanh, linear_gelu_erf, conv2d_relu), and a relu before a
max pooling moved after it (compiler/graph/relu_after_max_pool.h). The fused plan
trains on the same bits as the unfused one (fp32, bf16 and fp32 with
recomputation, two ranks, all four fusions), the plan file shows the
fused instructions, and
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
        # With recomputation the backward runs linear_gelu again, and
        # add_layernorm for each block's r and ln_2.
        for precision, recompute in (("fp32", "false"), ("bf16", "false"), ("fp32", "true")):
            runs = {}
            for fusion in ("true", "false"):
                out = f"{self.dir}/{precision}_{recompute}_{fusion}.safetensors"
                e2e.train(GPT, "--device", "cpu", "--seed", e2e.SEED, "--gpus", 2, "--micro_batch", 4,
                          "--accumulate", 2, "--steps", 3, "--no-eval",
                          "--deterministic", "true", "--precision", precision,
                          "--recompute", recompute, "--fusion", fusion, "--save", out,
                          timeout=600)
                runs[fusion] = e2e.read_checkpoint(out)[0]
            e2e.assert_same_bits(self, runs["false"], runs["true"],
                                 f"{precision}, recompute {recompute}")

    def test_activation_fusions_train_the_same_bits(self):
        # fashion_cnn: each conv block's relu after its max pooling
        # (compiler/graph/relu_after_max_pool.h: "p1 = relu" of p1.pre), so
        # no conv2d_relu, and the hidden linear and its relu as linear_relu;
        # autoencoder_mse: linear_tanh; residual_mlp: linear_gelu_erf (pre
        # kept for gelu_grad). bf16 leaves them apart; fp32 fuses
        # (compiler/graph/fuse_activation.h).
        e2e.need_fashion_mnist(self)
        fused_ops = {"fashion_cnn": {"linear_relu"},
                     "autoencoder_mse": {"linear_tanh"},
                     "residual_mlp": {"linear_gelu_erf"}}
        for example, want in fused_ops.items():
            train_file = e2e.runfile(f"dsl_examples/{example}.train")
            path = f"{self.dir}/{example}.plan"
            e2e.train(train_file, "--device", "cpu", "--compile-only", "-o", path)
            with open(path) as f:
                ops = set(re.findall(r"^instr \d+ op=(\w+) ", f.read(), re.M))
            self.assertLessEqual(want, ops, example)
            if example == "fashion_cnn":
                self.assertNotIn("conv2d_relu", ops)
                with open(path) as f:
                    text = f.read()
                for p in ("p1", "p2"):
                    self.assertRegex(text, rf'op=relu .*in=\d+ .*label="{p} = relu"')
                    self.assertIn(f'label="{p}.pre = max_pool2d"', text)
            runs = {}
            for fusion in ("true", "false"):
                out = f"{self.dir}/{example}_{fusion}.safetensors"
                e2e.train(train_file, "--device", "cpu", "--seed", e2e.SEED, "--gpus", 1,
                          "--micro_batch", 16, "--steps", 3, "--no-eval", "--fusion", fusion,
                          "--save", out, timeout=600)
                runs[fusion] = e2e.read_checkpoint(out)[0]
            e2e.assert_same_bits(self, runs["false"], runs["true"], example)

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

    def test_the_plan_shows_the_backward_fused_instruction(self):
        def plan(*flags):
            path = f"{self.dir}/backward.plan"
            e2e.train(GPT, *flags, "--accumulate", 2, "--compile-only", "-o", path)
            with open(path) as f:
                return f.read()

        def mlp_backward(text):
            return re.findall(r"^instr \d+ op=(\w+) .*phase=backward micro=(\d) .*"
                              r'label="grad/h\.0\.mlp\.', text, re.M)
        # h.0's c_proj input gradient and its gelu's gradient (dh, the
        # gradient of c_proj's input, read by the gelu's gradient alone) as
        # one, in each micro-step; recomputed too.
        unfused = ["copy_grad", "linear_grad_params", "linear_grad_input", "gelu_tanh_grad",
                   "linear_grad_params"]
        fused = ["copy_grad", "linear_grad_params", "linear_grad_input_gelu",
                 "linear_grad_params"]
        self.assertEqual(mlp_backward(plan("--fusion", "false")),
                         [(op, m) for m in "01" for op in unfused])
        self.assertEqual(mlp_backward(plan()), [(op, m) for m in "01" for op in fused])
        text = plan("--recompute", "true")
        self.assertEqual(mlp_backward(text), [(op, m) for m in "01" for op in fused])
        # Recomputed, it reads the micro-step's recomputed pre-activation.
        names = {m.group(1): m.group(2) for m in
                 re.finditer(r"^buffer (\d+) name=(\S+) ", text, re.M)}
        ins = re.findall(r"^instr \d+ op=linear_grad_input_gelu .*micro=(\d) "
                         r"in=(\d+),(\d+),(\d+) ", text, re.M)
        self.assertEqual([(m, names[dy], names[w], names[pre]) for m, dy, w, pre in ins],
                         [(m, f"grad/h.{i}.mlp.c_proj@{m}", f"h.{i}.mlp.c_proj.weight",
                           f"h.{i}.mlp.c_fc.recompute@{m}")
                          for m in "01" for i in (3, 2, 1, 0)])

    def test_the_plan_shows_each_residual_sum_and_its_layernorm_as_one(self):
        def norms(*flags):
            path = f"{self.dir}/norms.plan"
            e2e.train(GPT, *flags, "--compile-only", "-o", path)
            with open(path) as f:
                return re.findall(r'^instr \d+ op=(add|layernorm|add_layernorm) .*'
                                  r'phase=(\w+) micro=0 .*label="([^"]*)"', f.read(), re.M)
        # wte + wpe and h.0.ln_1; in each layer r and ln_2, its output and
        # the next ln_1 (after the last, ln_f).
        sums = ["h.0, h.0.ln_1"]
        for i in range(4):
            after = f"h.{i + 1}.ln_1" if i < 3 else "ln_f"
            sums += [f"h.{i}.r, h.{i}.ln_2", f"h.{i}.return.0, {after}"]
        fused = [("add_layernorm", "forward", f"{s} = add_layernorm") for s in sums]
        self.assertEqual(norms(), fused)
        unfused = norms("--fusion", "false")
        self.assertEqual([op for op, _, _ in unfused], ["add", "layernorm"] * 9)
        # Recomputed, a layer's ln_1 reads the layer before's output (its
        # checkpoint) and stays a layernorm; r and ln_2 fuse (h.0's sum
        # wte + wpe is recomputed too).
        recomputed = [(op, label) for op, phase, label in norms("--recompute", "true")
                      if phase == "backward"]
        want = []
        for i in (3, 2, 1):
            want += [("layernorm", f"h.{i}.ln_1 = layernorm (recompute)"),
                     ("add_layernorm", f"h.{i}.r, h.{i}.ln_2 = add_layernorm (recompute)")]
        want += [("add_layernorm", "h.0, h.0.ln_1 = add_layernorm (recompute)"),
                 ("add_layernorm", "h.0.r, h.0.ln_2 = add_layernorm (recompute)")]
        self.assertEqual(recomputed, want)

    def bf16_plan(self):
        """tiny_gpt's bf16 plan file and each buffer's dtype by id."""
        path = f"{self.dir}/bf16.plan"
        e2e.train(GPT, "--precision", "bf16", "--compile-only", "-o", path)
        with open(path) as f:
            text = f.read()
        return text, {m.group(1): m.group(2) for m in
                      re.finditer(r"^buffer (\d+) .* dtype=(\w+) ", text, re.M)}

    def test_bf16_linear_gelu_reads_and_writes_bf16(self):
        text, dtype = self.bf16_plan()
        fused = re.findall(r"^instr \d+ op=linear_gelu .* in=([\d,]+) out=([\d,]+) ",
                           text, re.M)
        self.assertEqual(len(fused), 4)  # 4 layers, one micro-step
        for ins, outs in fused:
            # x, w, b as the linear's bf16 copies; pre and y bf16.
            self.assertEqual([dtype[b] for b in ins.split(",")], ["bf16"] * 3)
            self.assertEqual([dtype[b] for b in outs.split(",")], ["bf16"] * 2)

    def test_bf16_linear_grad_input_gelu_reads_and_writes_bf16(self):
        text, dtype = self.bf16_plan()
        fused = re.findall(r"^instr \d+ op=linear_grad_input_gelu .* in=([\d,]+) "
                           r"out=([\d,]+) ", text, re.M)
        self.assertEqual(len(fused), 4)  # 4 layers, one micro-step
        for ins, outs in fused:
            # dy, the projection's weight as its bf16 copy, pre: bf16; dpre
            # bf16 as the gelu's gradient wrote it (dh was bf16 too), and the
            # f32 workspace, empty (dpre is written, not accumulated).
            self.assertEqual([dtype[b] for b in ins.split(",")], ["bf16"] * 3)
            self.assertEqual([dtype[b] for b in outs.split(",")], ["bf16", "f32"])
        self.assertEqual(len(re.findall(r"^buffer \d+ .*kind=workspace .*bytes=0 ", text, re.M)),
                         4)

    def test_bf16_add_layernorm_keeps_the_residual_stream_f32(self):
        text, dtype = self.bf16_plan()
        fused = re.findall(r"^instr \d+ op=add_layernorm .*phase=forward micro=0 "
                           r'in=([\d,]+) out=([\d,]+) .*label="([^"]*)"', text, re.M)
        self.assertEqual(len(fused), 9)
        for ins, outs, label in fused:
            # The stream f32 plus a bf16 linear's output (wte + wpe: both
            # f32); the sum, y, mean and rstd f32, as add and layernorm.
            b = "f32" if label.startswith("h.0, ") else "bf16"
            self.assertEqual([dtype[i] for i in ins.split(",")], ["f32", b, "f32", "f32"], label)
            self.assertEqual([dtype[o] for o in outs.split(",")], ["f32"] * 4, label)

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
