"""ZeRO-1 (`zero = 1`) through the real binary: the sharded optimizer gives
the weights and optimizer state of `zero = 0` (bit for bit in deterministic
mode, within 1e-6 otherwise) on 2, 3 and 4 ranks, whose shards do not divide
the buckets evenly; the plan keeps 1/N of the optimizer state per rank; and
a checkpoint holds whole tensors, so a ZeRO run resumes on another rank
count. With zero_gather = next_forward (the all-gathers at the next step's
start) the same holds: the trainer gathers before evaluating and saving,
so the evaluation, the checkpoints and the weights equal step_end's. All
of it at once (bf16, clipping, ZeRO-1 gathering in the next forward) still
gives one result whatever the split. With grad_comm = bf16 and clipping,
ZeRO-1 reports zero = 0's gradient norm (its partial sums travel in fp32)."""
import json
import re
import unittest

import e2e_lib as e2e


def run(d, name, gpus, *extra, steps=12):
    """fashion_mlp on `gpus` CPU ranks, AdamW, global batch 48 in
    micro-batches of 4 (so 2, 3 and 4 ranks are splits of one batch:
    accumulate 6, 4, 3); returns the checkpoint's tensors and the log."""
    out = f"{d}/{name}.safetensors"
    proc = e2e.train(e2e.EXAMPLE, "--device", "cpu", "--seed", e2e.SEED, "--gpus", gpus,
                     "--global_batch", 48, "--micro_batch", 4,
                     "--steps", steps, "--no-eval", "--save", out, *extra)
    return e2e.read_checkpoint(out)[0], proc.stdout


def read_grad_norms(path):
    """The grad_norm of each `train` record of a metrics log, in step order."""
    with open(path) as f:
        records = [r for r in map(json.loads, f) if r["kind"] == "train"]
    assert [r["step"] for r in records] == list(range(1, len(records) + 1)), path
    return [r["grad_norm"] for r in records]


class ZeroTest(unittest.TestCase):

    def setUp(self):
        e2e.need_fashion_mnist(self)
        self.dir = e2e.tmpdir()

    def test_deterministic_zero_gives_the_bits_of_zero_0(self):
        for gpus in (2, 3, 4):
            plain, _ = run(self.dir, f"plain{gpus}", gpus, "--deterministic", "true")
            zero, log = run(self.dir, f"zero{gpus}", gpus, "--deterministic", "true",
                            "--zero", 1)
            self.assertTrue(any(n.endswith("exp_avg_sq") for n in zero))
            e2e.assert_same_bits(self, plain, zero, f"{gpus} ranks")

    def test_deterministic_zero_with_clipping_gives_the_bits_of_zero_0(self):
        clip = ["--deterministic", "true", "--clip_grad_norm", 0.5]
        plain, _ = run(self.dir, "dclip", 3, *clip)
        zero, _ = run(self.dir, "dclipz", 3, *clip, "--zero", 1)
        e2e.assert_same_bits(self, plain, zero, "3 ranks, clipped")

    def test_zero_matches_zero_0_within_1e_6(self):
        # Outside deterministic mode the reduce-scatter (Gloo's halving-
        # doubling) adds the ranks in another order than the all-reduce's
        # ring, and clipping sums the squares shard by shard, then over
        # ranks. Rounding differences of ~1e-7; Adam's update of weights
        # whose gradient is (nearly) always zero (the images' blank border
        # pixels) magnifies them element-wise (up to 3e-6 of max |w| on
        # h1.weight after 12 steps), so the measure is tensor-wise,
        # ||zero - plain|| / ||plain||.
        for gpus, extra in ((2, []), (3, []), (3, ["--clip_grad_norm", 0.5])):
            plain, _ = run(self.dir, f"nd{gpus}{len(extra)}", gpus, *extra)
            zero, _ = run(self.dir, f"ndz{gpus}{len(extra)}", gpus, *extra, "--zero", 1)
            self.assertEqual(sorted(plain), sorted(zero))
            for name in plain:
                self.assertLessEqual(e2e.norm_rel(zero[name], plain[name]), 1e-6,
                                     f"{gpus} ranks {extra}: {name}")

    def test_bf16_gradients_with_clipping_keep_zero_0_s_norm(self):
        # grad_comm = bf16 narrows the gradients on the wire; ZeRO-1's
        # squared-norm partial sums (one per rank, all-reduced) must still
        # travel in fp32. On 2 ranks the bf16 reduce-scatter gives the
        # all-reduce's gradient bits (without clipping the two runs agree
        # bit for bit), so at step 1 the norms differ only by the fp32
        # rounding of the shard-by-shard sum (measured <= 7e-8 relative),
        # not by bf16's ~2^-9 nor by a missing rank's share. Not bit for
        # bit: zero = 0 sums each whole bucket's squares, ZeRO-1 rounds each
        # shard's sum to fp32 before adding the ranks'. Adam's first
        # moment after step 1 is 0.1 x the clipped gradient, so it shows
        # the clip factor each run applied (measured <= 9e-8 apart; the
        # second moments <= 2.4e-7).
        # One step only: the clip factors' last bits move the weights apart
        # by ~1e-8, and bf16 then rounds some of step 2's gradient elements
        # to the other neighbour (2^-8 apart): h1.weight's first moment
        # 1.6e-5 apart at step 2, and Adam magnifies it from step to step
        # (1e-6 of h2.weight and of step 4's norm at seed 2 by step 6).
        clip = 0.1   # below any step 1's norm (0.45 .. 0.57 at seeds 0 .. 6)
        norms, state = {}, {}
        for zero in (0, 1):
            name = f"bf16clip_z{zero}"
            state[zero], _ = run(self.dir, name, 2, "--grad_comm", "bf16",
                                 "--clip_grad_norm", clip, "--zero", zero, steps=1)
            norms[zero], = read_grad_norms(f"{self.dir}/{name}.metrics.jsonl")
        self.assertGreater(norms[0], clip, "clipping must be active")
        self.assertLessEqual(abs(norms[1] - norms[0]), 1e-6 * norms[0],
                             f"step 1: grad_norm {norms[1]!r} with ZeRO-1, "
                             f"{norms[0]!r} without")
        self.assertEqual(sorted(state[1]), sorted(state[0]))
        for name in state[0]:  # the second moment squares the clip factor
            tolerance = 2e-6 if name.endswith(".exp_avg_sq") else 1e-6
            self.assertLessEqual(e2e.norm_rel(state[1][name], state[0][name]),
                                 tolerance, name)
        # Control: the gradients really travel as bf16. With fp32
        # communication every first moment is a norm of per-element bf16
        # roundings away (from 1e-3 relative), where the grad_norm, their
        # signed sum, can nearly cancel (8e-6 relative at seed 3).
        fp32, _ = run(self.dir, "fp32clip_z1", 2, "--clip_grad_norm", clip,
                      "--zero", 1, steps=1)
        for name in state[0]:
            if name.endswith(".exp_avg"):
                self.assertGreater(e2e.norm_rel(fp32[name], state[0][name]),
                                   1e-4, name)

    def test_gather_in_next_forward_gives_the_bits_of_step_end(self):
        det = ["--deterministic", "true", "--zero", 1]
        end, _ = run(self.dir, "end", 3, *det)
        nf, _ = run(self.dir, "nf", 3, *det, "--zero_gather", "next_forward")
        e2e.assert_same_bits(self, end, nf, "3 ranks, next_forward vs step_end")
        # Evaluation between steps and periodic checkpoints see whole
        # parameters too (the step leaves only this rank's shard updated).
        logs, ckpts = {}, {}
        for mode in ("step_end", "next_forward"):
            d = f"{self.dir}/ckpt_{mode}"
            out = f"{self.dir}/eval_{mode}.safetensors"
            logs[mode] = e2e.train(
                e2e.EXAMPLE, "--device", "cpu", "--gpus", 2, "--steps", 8,
                "--eval-every", 4, "--checkpoint_every", 4, "--checkpoint_dir", d,
                "--zero", 1, "--zero_gather", mode, "--deterministic", "true",
                "--save", out).stdout
            ckpts[mode] = e2e.read_checkpoint(f"{d}/step-00000004.safetensors")[0]
        evals = {m: re.findall(r"eval .*accuracy ([\d.]+)%", log) for m, log in logs.items()}
        self.assertEqual(len(evals["step_end"]), 2, logs["step_end"])
        self.assertEqual(evals["next_forward"], evals["step_end"])
        e2e.assert_same_bits(self, ckpts["next_forward"], ckpts["step_end"],
                             "step 4's checkpoint")
        plan = e2e.train(e2e.EXAMPLE, "--gpus", 2, "--zero", 1, "--zero_gather",
                         "next_forward", "--compile-only").stdout
        self.assertRegex(plan, r"all_gather")

    def test_every_setting_at_once_keeps_the_bits_of_every_split(self):
        # precision = bf16 casts each parameter's bf16 copy at micro-step 0:
        # under next_forward that cast is the parameter's first reader and
        # must wait for its all-gather, or it copies a stale shard.
        every = ["--deterministic", "true", "--precision", "bf16",
                 "--clip_grad_norm", 0.5]
        plain, _ = run(self.dir, "all_plain", 2, *every)
        for gpus in (2, 3, 4):
            zero, _ = run(self.dir, f"all_zero{gpus}", gpus, *every, "--zero", 1,
                          "--zero_gather", "next_forward")
            e2e.assert_same_bits(self, plain, zero,
                                 f"{gpus} ranks, bf16 + clip + ZeRO-1 next_forward")

    def test_memory_report_shards_the_optimizer_state(self):
        def state_bytes(gpus, zero):
            path = f"{self.dir}/plan{gpus}{zero}"
            out = e2e.train(e2e.EXAMPLE, "--gpus", gpus, "--zero", zero,
                            "--compile-only", "-o", path).stdout
            with open(path) as f:
                m = re.search(r"^memory .*optimizer_state=(\d+)", f.read(), re.M)
            self.assertIsNotNone(m, path)
            return int(m.group(1)), out
        full, _ = state_bytes(4, 0)
        quarter, out = state_bytes(4, 1)
        self.assertIn("reduce_scatter", out)
        self.assertIn("all_gather", out)
        self.assertIn("(shard ", out)
        # 1/4 of the state, plus under 64 bytes of padding per bucket and
        # state kind (3 buckets, Adam's 2).
        self.assertGreaterEqual(quarter, full // 4)
        self.assertLess(quarter, full // 4 + 6 * 64, out)

    def test_checkpoint_holds_whole_tensors_and_resumes_on_other_rank_counts(self):
        det = ["--deterministic", "true"]
        whole, _ = run(self.dir, "whole", 2, *det, steps=12)
        half, _ = run(self.dir, "half", 2, *det, "--zero", 1, steps=6)
        plain_half, _ = run(self.dir, "plain_half", 2, *det, steps=6)
        e2e.assert_same_bits(self, plain_half, half, "the ZeRO checkpoint's tensors")
        for gpus in (3, 4):
            resumed, log = run(self.dir, f"resumed{gpus}", gpus, *det, "--zero", 1,
                               "--resume", f"{self.dir}/half.safetensors", steps=12)
            self.assertIn("resumed from", log)
            e2e.assert_same_bits(self, whole, resumed, f"resumed on {gpus} ranks")


if __name__ == "__main__":
    unittest.main()
