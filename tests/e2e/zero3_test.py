"""ZeRO-3 (`zero = 3`) through the real binary: parameters kept as 1/N
shards and all-gathered before each forward and backward pass give the
weights and optimizer state of `zero = 0`, bit for bit in deterministic mode
(2, 3 and 4 ranks, uneven shards, accumulation 1 to 6, every prefetch
depth, bf16 with bf16 gathers, clipping, a transformer with
recomputation) and within 1e-6
otherwise; evaluation gathers too and agrees; checkpoints hold whole
tensors that resume under another stage and rank count; the plan keeps
1/N of the parameters."""
import re
import unittest

import e2e_lib as e2e

run = e2e.train_sharded
DET = ["--deterministic", "true", "--clip_grad_norm", 0.5]


class Zero3Test(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        self.dir = e2e.tmpdir()

    def test_deterministic_zero_3_gives_the_bits_of_zero_0(self):
        # The bits of a deterministic run depend on the micro-batch, not on
        # the ranks, the stage or how far ahead the gathers run.
        plain = {mb: run(self.dir, f"plain{mb}", 2, *DET, micro_batch=mb)[0] for mb in (4, 24)}
        for gpus, micro_batch, prefetch in ((2, 4, 1), (3, 4, 0), (4, 4, 2), (2, 24, "auto")):
            zero, log = run(self.dir, f"z{gpus}_{micro_batch}", gpus, *DET, "--zero", 3,
                            "--zero_prefetch", prefetch, micro_batch=micro_batch)
            e2e.assert_same_bits(self, plain[micro_batch], zero,
                                 f"{gpus} ranks, micro-batch {micro_batch}, prefetch {prefetch}")
        out = e2e.train(e2e.EXAMPLE, "--gpus", 3, "--zero", 3, "--compile-only").stdout
        self.assertIn("ZeRO-3", out)
        self.assertRegex(out, r"zero_prefetch = \d buckets ahead")

    def test_a_bf16_transformer_with_recomputation_keeps_the_bits(self):
        # tiny_gpt: a tied embedding read at both ends of the forward,
        # bf16 copies cast from each pass's gather, every block recomputed
        # in the backward (its own gathers), clipping: zero = 3 on 2 ranks x
        # accumulate 2 and 4 ranks x 1 against zero = 0.
        gpt = e2e.runfile("dsl_examples/tiny_gpt.train")
        common = ["--device", "cpu", "--deterministic", "true", "--precision", "bf16",
                  "--clip_grad_norm", 0.5, "--global_batch", 16, "--micro_batch", 4,
                  "--steps", 3, "--no-eval"]
        runs = e2e.train_gpts(self.dir, common, (
            ("plain", ["--gpus", 2]),
            ("z3x2", ["--gpus", 2, "--zero", 3, "--recompute", "true"]),
            ("z3x1", ["--gpus", 4, "--zero", 3, "--zero_prefetch", 2])))
        for name in ("z3x2", "z3x1"):
            e2e.assert_same_bits(self, runs["plain"], runs[name], f"tiny_gpt {name}")
        # The matrices' buckets travel as bf16 (each rank's shard cast
        # first); the vectors' (layernorm, read in f32) as f32.
        path = f"{self.dir}/gpt.plan"
        e2e.train(gpt, "--gpus", 2, "--zero", 3, "--precision", "bf16", "--compile-only",
                  "-o", path)
        with open(path) as f:
            labels = re.findall(r'^instr .* op=all_gather .* label="([^"]*)"', f.read(), re.M)
        self.assertTrue([x for x in labels if " bf16 params" in x], labels)
        self.assertTrue([x for x in labels if " bf16 " not in x], labels)

    def test_fp32_with_recomputation_on_three_ranks_keeps_the_bits(self):
        # fp32 (every pass gathers f32), every block recomputed, uneven
        # shards on 3 ranks, against one rank accumulating 3 micro-batches.
        common = ["--device", "cpu", "--deterministic", "true", "--clip_grad_norm", 0.5,
                  "--global_batch", 12, "--micro_batch", 4, "--steps", 3, "--no-eval"]
        runs = e2e.train_gpts(self.dir, common, (
            ("fp32_plain", ["--gpus", 1]),
            ("fp32_z3", ["--gpus", 3, "--zero", 3, "--recompute", "true"])))
        e2e.assert_same_bits(self, runs["fp32_plain"], runs["fp32_z3"], "tiny_gpt fp32, 3 ranks")

    def test_outside_deterministic_mode_within_1e_6(self):
        for gpus, extra in ((2, []), (3, ["--zero_accumulate", "shard"])):
            plain, _ = run(self.dir, f"nd{gpus}", gpus)
            zero, _ = run(self.dir, f"nd{gpus}z3", gpus, "--zero", 3, *extra)
            self.assertEqual(sorted(plain), sorted(zero))
            for name in plain:
                self.assertLessEqual(e2e.norm_rel(zero[name], plain[name]), 1e-6,
                                     f"{gpus} ranks {extra}: {name}")

    def test_a_bucket_per_parameter_keeps_the_bits_with_overlap_on_and_off(self):
        # A bucket per parameter and no prefetch: each gathered span dies at
        # its one reader, so the memory plan hands its bytes to the next
        # values (a relu's output over the bias its linear reads: a backend
        # that fuses the two must not). --no-overlap holds the gradient
        # collectives to the end of each backward; the gathers, which
        # compute waits for, still run in place.
        plain, _ = run(self.dir, "pp_plain", 2, *DET, steps=6, bucket_mb=0)
        for extra in ([], ["--no-overlap"]):
            zero, _ = run(self.dir, "pp_z3", 2, *DET, "--zero", 3, "--zero_prefetch", 0, *extra,
                          steps=6, bucket_mb=0)
            e2e.assert_same_bits(self, plain, zero, f"zero 3, a bucket per parameter {extra}")

    def test_evaluation_gathers_the_parameters(self):
        def eval_line(zero):
            out = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--global_batch", 48,
                            "--micro_batch", 8, "--steps", 10, "--deterministic", "true",
                            "--zero", zero).stdout
            m = re.search(r"^eval .*\| loss ([\d.]+) \| accuracy ([\d.]+)%", out, re.M)
            self.assertIsNotNone(m, out)
            return m.groups()
        self.assertEqual(eval_line(3), eval_line(0))

    def test_checkpoints_resume_under_another_stage_and_rank_count(self):
        whole, _ = run(self.dir, "whole", 2, *DET, steps=12)
        half, _ = run(self.dir, "half", 3, *DET, "--zero", 3, steps=6)
        e2e.assert_same_bits(self, run(self.dir, "half0", 2, *DET, steps=6)[0], half,
                             "the zero 3 checkpoint holds whole tensors")
        for gpus, zero in ((2, 0), (4, 3), (2, 2)):
            resumed, log = run(self.dir, f"resumed{gpus}{zero}", gpus, *DET, "--zero", zero,
                               "--resume", f"{self.dir}/half.safetensors", steps=12)
            self.assertIn("resumed from", log)
            e2e.assert_same_bits(self, whole, resumed, f"zero 3 -> {zero} on {gpus} ranks")

    def test_resident_memory_is_the_plan_the_communicator_and_a_constant_rest(self):
        # What changes with the stage is the device's arena (the plan's)
        # and the communicator's cached buffers; the rest (code, data,
        # libraries) stays, to within allocator noise. glibc's mmap
        # threshold is fixed so that freed large blocks go back to the
        # system instead of staying resident in its heap. The rest moves
        # by about 1 MiB from run to run (page faults in libraries and
        # thread stacks); leaving out the reduce-scatter buffers moves it
        # by 5.6 MiB, so the bound sits between the two.
        gpt = e2e.runfile("dsl_examples/tiny_gpt.train")
        rest = {}
        for zero in (0, 1, 2, 3):
            out = e2e.train(gpt, "--device", "cpu", "--gpus", 2, "--micro_batch", 16,
                            "--global_batch", 32, "--steps", 2, "--no-eval", "--zero", zero,
                            env={"MALLOC_MMAP_THRESHOLD_": "1048576"}).stdout
            arena = re.search(r"^  arena +([\d.]+) MiB per rank", out, re.M)
            m = re.search(r"^  resident +([\d.]+) MiB .*: ([\d.]+) MiB the device's arena, "
                          r"staging and scratch \+ ([\d.]+) (MiB|KiB) the communicators' "
                          r"buffers \+ ([\d.]+) MiB the rest", out, re.M)
            self.assertIsNotNone(m, out)
            self.assertAlmostEqual(float(m.group(2)), float(arena.group(1)), delta=0.01)
            rest[zero] = float(m.group(5))
        self.assertLess(max(rest.values()) - min(rest.values()), 3.0, rest)

    def test_memory_report_keeps_1_over_n_of_the_parameters(self):
        def parameter_bytes(zero):
            path = f"{self.dir}/mem{zero}.plan"
            out = e2e.train(e2e.EXAMPLE, "--gpus", 4, "--zero", zero,
                            "--compile-only", "-o", path).stdout
            with open(path) as f:
                m = re.search(r"^memory parameters=(\d+)", f.read(), re.M)
            self.assertIsNotNone(m, path)
            return int(m.group(1))
        full, quarter = parameter_bytes(2), parameter_bytes(3)
        self.assertEqual(quarter * 4, full)  # the buckets are padded to 4 equal shards


if __name__ == "__main__":
    unittest.main()
