"""--resume and --init-from refuse a checkpoint trained as another model.

dsl_examples/llama_tiny.train made small (2 layers x 64 wide, 4 heads of 16
over 2 key/value heads) and trained with --heads 2 --kv_heads 1 --head 32
has tensors of the same names and shapes: loaded into the plain model, its
weights would train as another attention without a word. Checkpoints record
what their model computes (metadata model_signature), and train refuses one
of another model, naming both files and the calls that differ; with the
options its run used it loads. In a --resume folder, the newest checkpoint
being of another model stops the search: an older one is not resumed in its
place (which would drop the other run's newer steps, then overwrite its
checkpoints). A checkpoint without the record (an older trainc's) loads as
before.
"""
import os
import random
import shutil
import unittest

import e2e_lib as e2e

T = 16
SMALL = ("const vocab = 256, ctx = 64, width = 256, heads = 8, kv_heads = 2, head = 32",
         f"const vocab = 256, ctx = {T}, width = 64, heads = 4, kv_heads = 2, head = 16")
# The same shapes: q|k|v of (2 + 2 x 1) x 32 = (4 + 2 x 2) x 16 rows.
OTHER_HEADS = ("--heads", "2", "--kv_heads", "1", "--head", "32")
COMMON = ("--device", "cpu", "--no-eval", "--no-metrics")


class CheckpointOfAnotherModelTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = e2e.tmpdir()
        rng = random.Random(3)
        paths = {}
        for key, n in (("TRAIN", 40 * T + 1), ("EVAL", 8 * T + 1)):
            paths[key] = os.path.join(cls.dir, key.lower() + ".txt")
            with open(paths[key], "wb") as f:
                f.write(bytes(rng.choice(b"etaoin shrdlu") for _ in range(n)))
        with open(e2e.runfile("dsl_examples/llama_tiny.train")) as f:
            source = f.read()
        assert SMALL[0] in source and "const hidden = 688, layers = 6" in source, \
            "llama_tiny.train changed"
        cls.model = e2e.small_language_model(
            "llama_tiny", os.path.join(cls.dir, "tiny.train"), paths["TRAIN"], paths["EVAL"],
            [SMALL, ("const hidden = 688, layers = 6", "const hidden = 96, layers = 2")])
        # Two steps as the other model, saved.
        cls.other = os.path.join(cls.dir, "other.safetensors")
        e2e.train(cls.model, *COMMON, "--steps", 2, "--save", cls.other, *OTHER_HEADS)

    def refused(self, *args):
        proc = e2e.train(self.model, *COMMON, *args, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertNotIn("step 1/", proc.stdout)  # nothing trained
        return proc.stdout

    def assert_names_the_difference(self, text, checkpoint):
        self.assertIn(f"{checkpoint} was trained as another model than {self.model}: ", text)
        self.assertIn("the checkpoint's model has 2 x causal_attention(heads=2, kv_heads=1,", text)
        self.assertIn(f"where {self.model}'s (with the options given here) has "
                      "2 x causal_attention(heads=4, kv_heads=2,", text)

    def test_resume_and_init_from_refuse_it_and_take_it_with_its_options(self):
        for flag in ("--resume", "--init-from"):
            with self.subTest(flag=flag):
                self.assert_names_the_difference(self.refused(flag, self.other), self.other)
        out = e2e.train(self.model, *COMMON, "--steps", 3, "--resume", self.other, *OTHER_HEADS)
        self.assertIn("resumed from", out.stdout)
        e2e.train(self.model, *COMMON, "--steps", 1, "--init-from", self.other, *OTHER_HEADS)

    def test_a_resume_folder_stops_at_its_newest_checkpoint_of_another_model(self):
        # Steps 1 and 2 of this model, then step 3 of the other in the same folder.
        folder = os.path.join(e2e.tmpdir(), "checkpoints")
        e2e.train(self.model, *COMMON, "--steps", 2, "--checkpoint_every", 1,
                  "--checkpoint_dir", folder)
        e2e.train(self.model, *COMMON, "--steps", 3, "--init-from", self.other,
                  "--checkpoint_every", 3, "--checkpoint_dir", folder, *OTHER_HEADS)
        newest = os.path.join(folder, "step-00000003.safetensors")
        weights = sorted(n for n in os.listdir(folder)
                         if not n.endswith(".train_state.safetensors"))
        self.assertEqual(weights, [f"step-0000000{i}.safetensors" for i in (1, 2, 3)])
        text = self.refused("--steps", 4, "--resume", folder, "--checkpoint_every", 1,
                            "--checkpoint_dir", folder)
        self.assert_names_the_difference(text, newest)
        self.assertIn(f"the older checkpoints in {folder} are not tried in its place", text)
        self.assertNotIn("resumed from", text)
        # With its own options the folder resumes from that newest checkpoint.
        out = e2e.train(self.model, *COMMON, "--steps", 4, "--resume", folder, *OTHER_HEADS)
        self.assertIn(f"resumed from {newest}", out.stdout)

    def test_a_checkpoint_without_the_record_loads_as_before(self):
        # As an older trainc wrote it: the same files without model_signature.
        tensors, meta = e2e.read_safetensors(self.other)
        self.assertIn("causal_attention(heads=2", meta["model_signature"])
        del meta["model_signature"]
        old = os.path.join(e2e.tmpdir(), "old.safetensors")
        e2e.write_safetensors(old, tensors, meta)
        shutil.copy(e2e.training_state_path(self.other), e2e.training_state_path(old))
        e2e.train(self.model, *COMMON, "--steps", 1, "--init-from", old)
        out = e2e.train(self.model, *COMMON, "--steps", 3, "--resume", old)
        self.assertIn("resumed from", out.stdout)


if __name__ == "__main__":
    unittest.main()
