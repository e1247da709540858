"""The train command as a user meets it: --help, --compile-only, errors,
a short real training run with evaluation and a summary."""
import json
import os
import re
import unittest

import e2e_lib as e2e

# An MLP whose data is never read: --compile-only plans it all the same.
NO_DATA_MLP = """
model mlp {
  input  image: f32[784]
  label  class: i32[10]
  h1     = relu(linear(image, 128))
  logits = linear(h1, 10)
  loss   = cross_entropy(logits, class)
}
data { train = idx("/dev/null", "/dev/null")  scale = 1/255 }
train {
  gpus = 2  micro_batch = 64  global_batch = 256  steps = 10
  optimizer = adamw(lr = 1e-3, weight_decay = 0.01)
}
"""


class CliTest(unittest.TestCase):

    def test_help(self):
        out = e2e.train("--help").stdout
        self.assertIn("usage: train", out)
        self.assertIn("--compile-only", out)

    def test_help_offers_what_each_option_accepts(self):
        # Every "--OPTION a|b|c" of --help (written from the front end's and
        # the parser's tables): each value listed compiles with
        # --compile-only, and a closed list holds every value accepted: the
        # ZeRO stage after the last one, or a made-up name, is refused,
        # naming the option. A placeholder (X in "X|auto") opens a list.
        text = e2e.train("--help").stdout
        offered = dict(re.findall(r"(--[a-z][a-z0-9_-]*) ((?:[A-Za-z0-9_]+\|)+[A-Za-z0-9_]+)",
                                  text))
        self.assertEqual(offered.get("--zero"), "0|1|2|3", text)
        for option in ("--precision", "--grad_comm", "--zero_accumulate", "--zero_gather",
                       "--deterministic", "--tf32", "--recompute", "--fusion",
                       "--skip_nonfinite", "--device", "--comm", "--bucket_mb"):
            self.assertIn(option, offered, text)
        source = os.path.join(e2e.tmpdir(), "mlp.train")
        with open(source, "w") as f:  # no data to read: compiled only
            f.write(NO_DATA_MLP)
        for option, listed in offered.items():
            values = listed.split("|")
            for value in values:
                if value.isupper():
                    continue
                proc = e2e.train("--compile-only", source, option, value, check=False)
                if (option, value) == ("--comm", "mpi"):  # a value, but only under mpirun
                    self.assertIn("not started by mpirun", proc.stdout)
                    continue
                self.assertEqual(proc.returncode, 0, f"{option} {value}:\n{proc.stdout}")
            if any(v.isupper() for v in values):
                continue
            other = str(int(values[-1]) + 1) if values[-1].isdigit() else "other"
            proc = e2e.train("--compile-only", source, option, other, check=False)
            self.assertNotEqual(proc.returncode, 0, f"{option} {other} was accepted")
            self.assertIn(option, proc.stdout)

    def test_help_names_every_model_init_from_reads(self):
        # A Hugging Face folder of another architecture is refused with the
        # ones --init-from reads; --help's --init-from names each of them.
        e2e.need_fashion_mnist(self)
        folder = e2e.tmpdir()
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump({"model_type": "bert", "architectures": ["BertModel"]}, f)
        proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 1, "--no-eval",
                         "--init-from", folder, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        read = set(re.findall(r"\b[A-Z]\w*(?:LMHeadModel|ForCausalLM)\b", proc.stdout))
        self.assertGreaterEqual(len(read), 2, proc.stdout)  # GPT-2 and Llama
        text = e2e.train("--help").stdout
        row = text[text.index("--init-from"):text.index("--resume")]
        for architecture in read:
            self.assertIn(architecture, " ".join(row.split()))

    def test_compile_only_writes_a_plan(self):
        for example in ("fashion_mlp", "residual_mlp", "autoencoder_mse"):
            plan = os.path.join(e2e.tmpdir(), f"{example}.plan")
            out = e2e.train("--compile-only",
                            e2e.runfile(f"dsl_examples/{example}.train"),
                            "-o", plan).stdout
            self.assertIn("bucket", out)
            with open(plan) as f:
                self.assertTrue(f.readline().startswith("trainc-plan 1"))

    def test_bad_input_is_a_diagnostic(self):
        bad = os.path.join(e2e.tmpdir(), "bad.train")
        with open(bad, "w") as f:
            f.write("model m {\n  input x: f32[4]\n  loss = rleu(x)\n}\n")
        proc = e2e.train(bad, check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("bad.train:3:", proc.stdout)
        self.assertNotIn("Segmentation", proc.stdout)

    def test_unknown_flag(self):
        # Checked by the front end against the train fields and the model's
        # constants, with a did-you-mean.
        proc = e2e.train(e2e.EXAMPLE, "--gpsu", 2, check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--gpsu: unknown flag", proc.stdout)
        self.assertIn("did you mean '--gpus'?", proc.stdout)
        # Last on the line, with no value: not a field, so a mistyped option.
        proc = e2e.train(e2e.EXAMPLE, "--bogus", check=False)
        self.assertEqual(proc.returncode, 2)  # a usage error
        self.assertIn("unknown option --bogus", proc.stdout)
        self.assertNotIn("needs a value", proc.stdout)
        proc = e2e.train(e2e.EXAMPLE, "--no-evl", check=False)
        self.assertIn("unknown option --no-evl: did you mean --no-eval?", proc.stdout)
        # A field that does need its value says so.
        proc = e2e.train(e2e.EXAMPLE, "--steps", check=False)
        self.assertIn("--steps: needs a value", proc.stdout)
        # optimizer and schedule are calls, set in the file: --help says so.
        proc = e2e.train(e2e.EXAMPLE, "--optimizer", "sgd(lr = 0.1)", check=False)
        self.assertEqual(proc.returncode, 1)
        self.assertIn("--optimizer: set in the file's train { }", proc.stdout)
        self.assertIn("--lr overrides", proc.stdout)
        self.assertIn("but optimizer and schedule", e2e.train("--help").stdout)

    def test_a_warmup_as_long_as_the_run_is_said(self):
        # cosine(warmup = N) with N >= the run's steps never decays: allowed
        # (a short smoke test of a long recipe), with a warning.
        e2e.need_fashion_mnist(self)
        with open(e2e.EXAMPLE) as f:
            text = f.read()
        d = e2e.tmpdir()
        path = os.path.join(d, "warm.train")
        with open(path, "w") as f:
            # fashion_mlp's data folder is absolute; 1 epoch is 234 steps.
            f.write(text.replace("  seed        = 0",
                                 "  seed        = 0\n  schedule    = cosine(warmup = 234)"))
        # With --steps the compiler knows the length: at the setting.
        proc = e2e.train(path, "--device", "cpu", "--gpus", 1, "--accumulate", 4, "--steps", 3,
                         "--no-eval", "--log-every", 1, "--metrics", f"{d}/w.jsonl")
        self.assertIn("warm.train:30:17: warning: cosine(warmup = 234) is as long as the whole "
                      "run of 3 steps from --steps: every step is warm-up, the last at "
                      "lr * 3/234", proc.stdout)
        with open(f"{d}/w.jsonl") as f:
            lrs = [r["lr"] for r in map(json.loads, f) if r["kind"] == "train"]
        self.assertEqual(len(lrs), 3)
        for k, lr in enumerate(lrs, 1):
            self.assertAlmostEqual(lr, 1e-3 * k / 234, delta=1e-12)
        # With epochs, the trainer says so once it has read the data.
        proc = e2e.train(path, "--device", "cpu", "--gpus", 1, "--accumulate", 4, "--epochs", 1,
                         "--no-eval", "--log-every", 1000)
        self.assertIn("is as long as the whole run of 234 steps (1 epoch(s) of 234)",
                      proc.stdout)
        self.assertLess(proc.stdout.index("warning:"), proc.stdout.index("training fashion_mlp"))
        # One step more is a plain cosine that ends at 0: no warning.
        proc = e2e.train(path, "--device", "cpu", "--gpus", 1, "--accumulate", 4, "--steps", 235,
                         "--no-eval", "--log-every", 1000)
        self.assertNotIn("warning", proc.stdout)

    def test_more_gpus_than_present_is_an_error_before_work(self):
        proc = e2e.train(e2e.EXAMPLE, "--device", "cuda", check=False)
        if "CUDA GPU" not in proc.stdout:
            self.skipTest("a GPU is present")
        self.assertEqual(proc.returncode, 1)
        # Before work: no rank started, no data read, no step.
        for later in ("launching", "training fashion_mlp", "step 1/", "[rank"):
            self.assertNotIn(later, proc.stdout)

    def test_short_run_trains_and_summarises(self):
        e2e.need_fashion_mnist(self)
        d = e2e.tmpdir()
        out = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--seed", e2e.SEED, "--steps", 60,
                        "--trace", f"{d}/t.json").stdout
        self.assertIn("eval epoch", out)
        self.assertIn("summary", out)
        self.assertIn("all-reduce", out)
        acc = float(out.split("eval accuracy")[1].split("%")[0])
        self.assertGreater(acc, 60.0)  # 60 steps of a 10-class problem

    def test_plan_file_trains_like_the_source(self):
        e2e.need_fashion_mnist(self)
        plan = os.path.join(e2e.tmpdir(), "p.plan")
        e2e.train("--compile-only", e2e.EXAMPLE, "--gpus", 1, "-o", plan)
        out = e2e.train(plan, "--device", "cpu", "--steps", 5, "--no-eval").stdout
        self.assertIn("step 5/5", out)

    def test_summary_names_the_gemm_library(self):
        # --blas openblas under OPENBLAS_CORETYPE=Prescott: OpenBLAS's
        # Prescott kernels are named and said set by the environment, with
        # no advice to set it (the fallback warning's text is gemm_test's:
        # no run can force OpenBLAS's own fallback). auto under the same
        # environment leaves that fallback for oneDNN and says why; --blas
        # onednn names oneDNN's kernels. TRAINC_BLAS="": auto means auto.
        e2e.need_fashion_mnist(self)
        run = ("--device", "cpu", "--steps", 2, "--no-eval")
        prescott = {"OPENBLAS_CORETYPE": "Prescott", "TRAINC_BLAS": ""}
        openblas = r"matrix products +OpenBLAS \S+, (\w+) kernels \(CPU: [^)]+\)(.*)"
        onednn = r"matrix products +oneDNN [\d.]+, (\w+) kernels \(CPU: [^)]+\); (.*)"
        out = e2e.train(e2e.EXAMPLE, *run, "--blas", "openblas", env=prescott).stdout
        m = re.search(openblas, out)
        self.assertIsNotNone(m, out)
        self.assertEqual(m.group(1), "Prescott", out)
        self.assertIn("OPENBLAS_CORETYPE set by the environment", m.group(2))
        self.assertNotIn("set OPENBLAS_CORETYPE=", out)
        out = e2e.train(e2e.EXAMPLE, *run, env=prescott).stdout
        m = re.search(onednn, out)
        self.assertIsNotNone(m, out)
        self.assertEqual(m.group(2), "auto: " + re.search(r"OpenBLAS \S+", out).group(0) +
                         " would run its Prescott kernels (OPENBLAS_CORETYPE set by the "
                         "environment), a fallback", out)
        out = e2e.train(e2e.EXAMPLE, *run, "--blas", "onednn").stdout
        m = re.search(onednn, out)
        self.assertIsNotNone(m, out)
        self.assertRegex(m.group(1), r"^(sse41|avx|avx2|avx2_vnni|avx512_\w+)$")
        self.assertEqual(m.group(2), "asked for (--blas or TRAINC_BLAS)")
        if "OPENBLAS_CORETYPE" in os.environ:
            self.skipTest("OPENBLAS_CORETYPE is set around the test")
        m = re.search(openblas, e2e.train(e2e.EXAMPLE, *run, "--blas", "openblas").stdout)
        self.assertIsNotNone(m)
        self.assertNotIn("environment", m.group(2))

    def test_blas_values_are_checked(self):
        out = e2e.train(e2e.EXAMPLE, "--blas", "mkl", check=False)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("--blas: 'mkl' is not one of auto, openblas, onednn", out.stdout)

    def test_output_paths_are_checked_before_training(self):
        d = e2e.tmpdir()
        for flag, path, want in (
                ("--save", os.path.join(d, "missing", "m.safetensors"),
                 "does not exist"),
                ("--save", d, "is a folder"),
                ("--trace", os.path.join(d, "nope", "t.json"), "does not exist")):
            proc = e2e.train(e2e.EXAMPLE, "--steps", 1, flag, path, check=False)
            self.assertNotEqual(proc.returncode, 0, flag)
            self.assertIn(want, proc.stdout)
            self.assertNotIn("step 1/", proc.stdout, "checked before training")

    def test_bad_run_flags(self):
        for args, want in ((("--log-every", 0), "--log-every: must be >= 1"),
                           (("--trace-steps", -1), "--trace-steps: must be >= 1"),
                           (("--blas-threads", 0), "--blas-threads: must be in"),
                           (("--init-from", "a", "--resume", "b"),
                            "--init-from and --resume: give one")):
            proc = e2e.train(e2e.EXAMPLE, *args, check=False)
            self.assertEqual(proc.returncode, 2, args)
            self.assertIn(want, proc.stdout)

    def test_resume_past_the_end_is_an_error(self):
        e2e.need_fashion_mnist(self)
        d = e2e.tmpdir()
        ckpt = os.path.join(d, "c.safetensors")
        e2e.train(e2e.EXAMPLE, "--gpus", 1, "--steps", 3, "--no-eval",
                  "--save", ckpt)
        proc = e2e.train(e2e.EXAMPLE, "--gpus", 1, "--steps", 3, "--no-eval",
                         "--resume", ckpt, check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("is at step 3, and this run has 3 steps", proc.stdout)
        self.assertNotIn("final loss nan", proc.stdout)


if __name__ == "__main__":
    unittest.main()
