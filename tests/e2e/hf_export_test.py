"""tools/hf_export and --init-from FOLDER against Hugging Face transformers itself.

The same two directions for a small Llama (dsl_examples/llama_tiny.train made
small: 2 layers x 64 wide, 4 heads over 2 key/value heads, SwiGLU, RMSNorm,
rotary positions): exported, LlamaForCausalLM scores the eval text as trainc
does; a random LlamaForCausalLM with grouped-query heads, imported, is scored
by trainc as transformers scores it; one of another width is refused naming
its config.json key, and folders of the same shapes but another model (heads over
key/value heads, rope_theta, rms_norm_eps, rope_scaling, fewer positions,
another activation) are refused naming the config.json key; a checkpoint
trained with other heads is not exported under the .train's.

A small GPT-2 (2 layers x 32 wide, 4 heads, context 16, bytes) trains a few
steps; hf_export writes its checkpoint as a GPT2LMHeadModel folder; the
transformers 4.36.2 of tools/setup.sh's virtual environment (over Debian's
torch) loads it with from_pretrained and scores the eval text in float64:
the loss must be trainc's own eval loss within 1e-4 relative. The other
way, a randomly initialised GPT2LMHeadModel saved by save_pretrained is
trainc's --init-from: trainc then scores the text as transformers does, and
a model of another width is refused naming the config.json key. Without that
environment (no PyPI) the test skips, saying so.
"""
import json
import os
import random
import re
import subprocess
import unittest

import e2e_lib as e2e

HF_PYTHON = os.path.join(os.path.expanduser("~"), ".cache", "trainc", "hf-venv", "bin", "python")
EXPORT = e2e.runfile("tools/hf_export")
T = 16

# dsl_examples/tiny_gpt.train (GPT-2's parameter names), made small, on
# this test's own text.

# Scores every window of the eval text ([i T, i T + T], trainc's eval
# windows) with the exported model, as trainc does: the mean over windows
# of the mean next-byte cross entropy.
SCORE = """
import sys, torch
from transformers import AutoModelForCausalLM
# float64 throughout (transformers 4.36 builds Llama's causal mask in the
# default dtype, which must hold float64's min).
torch.set_default_dtype(torch.float64)
model = AutoModelForCausalLM.from_pretrained(sys.argv[1]).double().eval()
data = torch.tensor(list(open(sys.argv[2], "rb").read()), dtype=torch.long)
T = int(sys.argv[3])
windows = (len(data) - 1) // T
total = 0.0
with torch.no_grad():
    for i in range(windows):
        w = data[i * T:i * T + T + 1]
        logits = model(w[None, :T]).logits[0]
        total += torch.nn.functional.cross_entropy(logits, w[1:]).item()
print(f"LOSS {total / windows:.12f}")
"""


# Randomly initialised GPT2LMHeadModels saved as transformers saves them:
# argv positions, width, then pairs FOLDER, JSON of GPT2Config keys to change.
MAKE = """
import json, sys, torch
from transformers import GPT2Config, GPT2LMHeadModel
for folder, extra in zip(sys.argv[3::2], sys.argv[4::2]):
    torch.manual_seed(0)
    config = GPT2Config(**{**dict(vocab_size=256, n_positions=int(sys.argv[1]),
                                  n_embd=int(sys.argv[2]), n_layer=2, n_head=4,
                                  activation_function="gelu_new", resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5),
                           **json.loads(extra)})
    GPT2LMHeadModel(config).save_pretrained(folder, safe_serialization=True)
"""


# The same for LlamaForCausalLM (grouped-query heads, untied head).
MAKE_LLAMA = """
import json, sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
for folder, extra in zip(sys.argv[3::2], sys.argv[4::2]):
    torch.manual_seed(0)
    config = LlamaConfig(**{**dict(vocab_size=256, hidden_size=int(sys.argv[2]),
                                   intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=int(sys.argv[1]), rms_norm_eps=1e-6,
                                   rope_theta=10000.0, tie_word_embeddings=False),
                            **json.loads(extra)})
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # transformers initialises the norms at one: move them
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    model.save_pretrained(folder, safe_serialization=True)
"""

# Folders whose tensors have the small models' shapes (GPT-2: 4 heads of 8,
# Llama: 4 heads of 16 over 2 key/value heads, rope_theta 10000, eps 1e-6,
# context 16) but whose config.json makes them other models: each is
# refused naming the key.
GPT2_OTHERS = {
    "n_head": {"n_head": 2},
    "layer_norm_epsilon": {"layer_norm_epsilon": 1e-6},
    "activation_function": {"activation_function": "gelu"},
    "scale_attn_by_inverse_layer_idx": {"scale_attn_by_inverse_layer_idx": True},
}
LLAMA_OTHERS = {
    # 2 heads of 32 over 1: q, k and v of 64, 32 and 32 rows, as 64, 32, 32.
    "num_attention_heads": {"num_attention_heads": 2, "num_key_value_heads": 1},
    "rope_theta": {"rope_theta": 500000.0},
    "rms_norm_eps": {"rms_norm_eps": 1e-5},
    "rope_scaling": {"rope_scaling": {"type": "linear", "factor": 2.0}},
    "max_position_embeddings": {"max_position_embeddings": 8},
    "hidden_act": {"hidden_act": "gelu"},
}

LLAMA_SMALL = ("const vocab = 256, ctx = 64, width = 256, heads = 8, kv_heads = 2, head = 32",
               "const vocab = 256, ctx = {T}, width = 64, heads = 4, kv_heads = 2, head = 16")


def hf_available():
    if not os.path.exists(HF_PYTHON):
        return False
    return subprocess.run([HF_PYTHON, "-c", "import transformers, torch"],
                          capture_output=True).returncode == 0


class HfExportTest(unittest.TestCase):

    def setUp(self):
        if not hf_available():
            self.skipTest(f"no transformers at {HF_PYTHON} (tools/setup.sh installs it from PyPI)")
        self.dir = e2e.tmpdir()

    def write_model(self, example="tiny_gpt"):
        rng = random.Random(5)
        words = [bytes(rng.choice(b"etaoinshrdlu") for _ in range(rng.randint(2, 7)))
                 for _ in range(40)]
        def text(n):
            out = b""
            while len(out) < n:
                out += rng.choice(words) + b" "
            return out[:n]
        paths = {"TRAIN": os.path.join(self.dir, "train.txt"),
                 "EVAL": os.path.join(self.dir, "eval.txt")}
        with open(paths["TRAIN"], "wb") as f:
            f.write(text(20 * T + 1))
        with open(paths["EVAL"], "wb") as f:
            f.write(text(8 * T + 1))
        model = e2e.small_language_model(
            example, os.path.join(self.dir, "tiny.train"), paths["TRAIN"], paths["EVAL"],
            [("ctx = 64, width = 128, heads = 4, layers = 4",
              f"ctx = {T}, width = 32, heads = 4, layers = 2"),
             (LLAMA_SMALL[0], LLAMA_SMALL[1].format(T=T)),
             ("const hidden = 688, layers = 6", "const hidden = 96, layers = 2")])
        return model, paths["EVAL"]

    def trainc_eval_loss(self, model, name, *args):
        """Trains `model` with `args` and returns its final eval loss."""
        metrics = os.path.join(self.dir, name + ".jsonl")
        e2e.train(model, "--device", "cpu", "--metrics", metrics, *args)
        with open(metrics) as f:
            return [json.loads(line) for line in f if '"summary"' in line][-1]["eval_loss"]

    def export(self, model, ckpt, out):
        """tools/hf_export into `out`; returns its config.json and stdout."""
        proc = subprocess.run([EXPORT, model, ckpt, out], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with open(os.path.join(out, "config.json")) as f:
            return json.load(f), proc.stdout

    def make(self, script, folder, width, others=None):
        """A random transformers model of `width` saved by save_pretrained
        into `folder`; with `others` ({name: config keys}), one into
        `folder`_name for each instead."""
        pairs = ([f"{folder}_{name}", json.dumps(keys)] for name, keys in others.items()) \
            if others else [[folder, "{}"]]
        made = subprocess.run([HF_PYTHON, "-c", script, str(T), str(width)] +
                              [x for pair in pairs for x in pair],
                              capture_output=True, text=True, timeout=300)
        self.assertEqual(made.returncode, 0, made.stderr)

    def assert_other_models_refused(self, model, script, width, others):
        """Each folder of `others` (the .train's shapes, another config.json)
        is refused before training, naming config.json, the key, both values
        and the .train's line."""
        base = os.path.join(self.dir, "other")
        self.make(script, base, width, others)
        for key in others:
            folder = f"{base}_{key}"
            proc = e2e.train(model, "--device", "cpu", "--init-from", folder, "--steps", 1,
                             "--no-eval", check=False)
            self.assertNotEqual(proc.returncode, 0, proc.stdout)
            self.assertRegex(proc.stdout, re.escape(f"{folder}/config.json: {key} is ") +
                             r"[^\n]*(, but|, fewer than [^\n]* of) " + re.escape(model) +
                             r":[0-9]+:[0-9]+ ")
            self.assertNotIn("step 1", proc.stdout)

    def import_and_score(self, model, eval_text, script, width, name):
        """A transformers model made with `script` as --init-from: trainc's eval
        loss after one negligible step (the imported weights) against
        transformers'; returns the folder and trainc's loss."""
        folder = os.path.join(self.dir, name)
        self.make(script, folder, width)
        want = self.hf_loss(folder, eval_text)
        got = self.trainc_eval_loss(model, name, "--init-from", folder, "--steps", 1,
                                    "--lr", "1e-30")
        print(f"{name} eval loss: trainc {got:.9f}, transformers (float64) {want:.9f}")
        self.assertLess(abs(got - want) / want, 1e-4)
        return folder, got

    def assert_other_width_refused(self, model, script, width, key, values):
        """Another width is refused before its tensors are read, naming the
        config.json key and both values."""
        wide = os.path.join(self.dir, f"wide_{width}")
        self.make(script, wide, width)
        proc = e2e.train(model, "--device", "cpu", "--init-from", wide, "--steps", 1,
                         check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn(f"{wide}/config.json: {key} is {values[0]}, but {model}:", proc.stdout)
        self.assertIn(f" has {values[1]}", proc.stdout)

    def test_exported_model_scores_as_trainc_does(self):
        model, eval_text = self.write_model()
        ckpt = os.path.join(self.dir, "tiny.safetensors")
        trainc_loss = self.trainc_eval_loss(model, "tiny", "--save", ckpt)
        out = os.path.join(self.dir, "hf")
        config, _ = self.export(model, ckpt, out)
        self.assertEqual(config["model_type"], "gpt2")
        self.assertEqual((config["n_layer"], config["n_embd"], config["n_head"]), (2, 32, 4))
        hf_loss = self.hf_loss(out, eval_text)
        print(f"eval loss: trainc {trainc_loss:.9f}, transformers (float64) {hf_loss:.9f}")
        self.assertLess(abs(hf_loss - trainc_loss) / trainc_loss, 1e-4,
                        f"transformers {hf_loss} against trainc {trainc_loss}")

    def hf_loss(self, folder, eval_text):
        score = subprocess.run([HF_PYTHON, "-c", SCORE, folder, eval_text, str(T)],
                               capture_output=True, text=True, timeout=300)
        self.assertEqual(score.returncode, 0, score.stderr)
        return float(score.stdout.split("LOSS")[1])

    def test_a_transformers_model_is_a_starting_point(self):
        model, eval_text = self.write_model()
        folder, _ = self.import_and_score(model, eval_text, MAKE, 32, "imported")
        self.assert_other_width_refused(model, MAKE, 48, "n_embd", (48, 32))
        self.assert_other_models_refused(model, MAKE, 32, GPT2_OTHERS)
        # A folder has no optimizer state to resume.
        proc = e2e.train(model, "--device", "cpu", "--resume", folder, check=False)
        self.assertNotEqual(proc.returncode, 0, proc.stdout)
        self.assertIn("holds weights only", proc.stdout)

    def test_exported_llama_scores_as_trainc_does(self):
        model, eval_text = self.write_model("llama_tiny")
        ckpt = os.path.join(self.dir, "llama.safetensors")
        trainc_loss = self.trainc_eval_loss(model, "llama", "--save", ckpt)
        out = os.path.join(self.dir, "hf_llama")
        config, stdout = self.export(model, ckpt, out)
        self.assertIn("LlamaForCausalLM", stdout)
        self.assertEqual(config["model_type"], "llama")
        self.assertEqual((config["num_hidden_layers"], config["hidden_size"],
                          config["num_attention_heads"], config["num_key_value_heads"],
                          config["intermediate_size"]), (2, 64, 4, 2, 96))
        hf_loss = self.hf_loss(out, eval_text)
        print(f"llama eval loss: trainc {trainc_loss:.9f}, transformers (float64) {hf_loss:.9f}")
        self.assertLess(abs(hf_loss - trainc_loss) / trainc_loss, 1e-4)

    def test_a_transformers_llama_is_a_starting_point(self):
        model, eval_text = self.write_model("llama_tiny")
        folder, got = self.import_and_score(model, eval_text, MAKE_LLAMA, 64, "imported_llama")
        # Imported, fine-tuned, exported: transformers scores what trainc scored.
        tuned = os.path.join(self.dir, "tuned.safetensors")
        tuned_loss = self.trainc_eval_loss(model, "tuned", "--init-from", folder, "--save", tuned)
        back = os.path.join(self.dir, "tuned_hf")
        self.export(model, tuned, back)
        again = self.hf_loss(back, eval_text)
        print(f"fine-tuned llama eval loss: trainc {tuned_loss:.9f}, transformers {again:.9f}")
        self.assertLess(abs(again - tuned_loss) / tuned_loss, 1e-4)
        self.assertGreater(abs(tuned_loss - got) / got, 1e-3)  # training moved it
        self.assert_other_width_refused(model, MAKE_LLAMA, 128, "hidden_size", (128, 64))
        self.assert_other_models_refused(model, MAKE_LLAMA, 64, LLAMA_OTHERS)

    def test_a_checkpoint_of_another_model_is_not_exported_as_this_one(self):
        # Trained as 2 heads of 32 over 1 key/value head: the same tensor
        # shapes as tiny.train's 4 heads of 16 over 2.
        model, _ = self.write_model("llama_tiny")
        ckpt = os.path.join(self.dir, "other.safetensors")
        heads = ("--heads", "2", "--kv_heads", "1", "--head", "32")
        e2e.train(model, "--device", "cpu", "--steps", 1, "--no-eval", "--save", ckpt, *heads)
        proc = subprocess.run([EXPORT, model, ckpt, os.path.join(self.dir, "wrong")],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn(f"{ckpt} was trained as another model than {model}", proc.stderr)
        self.assertIn("the checkpoint's model has 2 x causal_attention(heads=2, kv_heads=1,",
                      proc.stderr)
        self.assertIn("has 2 x causal_attention(heads=4, kv_heads=2,", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "wrong")))
        # With the run's own options it exports as that model.
        out = os.path.join(self.dir, "right")
        proc = subprocess.run([EXPORT, model, ckpt, out, *heads], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        with open(os.path.join(out, "config.json")) as f:
            config = json.load(f)
        self.assertEqual((config["num_attention_heads"], config["num_key_value_heads"]), (2, 1))

    def test_a_model_without_gpt2s_layout_is_refused(self):
        proc = subprocess.run([EXPORT, e2e.EXAMPLE, "nothing.safetensors",
                               os.path.join(self.dir, "x")], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stderr)
        self.assertIn("does not have GPT-2's layout", proc.stderr)
        self.assertIn("does not have Llama's layout", proc.stderr)
        self.assertIn("wte.weight", proc.stderr)


if __name__ == "__main__":
    unittest.main()
