"""Subword tokens: text(..., tokenizer = "spm.model"), tools/tokenize and sample.

A SentencePiece BPE model (512 pieces, byte fallback) is made here with
Debian's spm_train from fortune text. A small Llama-style model then:
  - trains on text(..., tokenizer = ...) and reports its eval loss per
    token and in bits per byte: nats per token / ln 2 over the eval text's
    bytes per token, which the test recomputes from spm_encode's own count;
  - trains the same way from an llm.c shard that tools/tokenize wrote from
    the same text (deterministic mode): the losses of every step are equal
    bit for bit, so the shard holds exactly the tokens the text source
    makes;
  - samples text through the tokenizer (the prompt, then decoded pieces).
Errors: a tokenizer path that does not exist is refused at file:line:col,
and a model whose vocabulary is smaller than the tokenizer's pieces is
refused naming both.
"""
import json
import math
import os
import subprocess
import unittest

import e2e_lib as e2e

TOKENIZE = e2e.runfile("tools/tokenize")
SAMPLE = e2e.runfile("tools/sample")

MODEL = """
model lm {
  const vocab = VOCAB, ctx = 32, width = 64, heads = 4, kv = 2, d = 16
  input  tokens: i32[ctx]
  label  next:   i32[ctx]
  block layer(x) {
    n   = rmsnorm(x)
    qkv = linear(n, (heads + 2 * kv) * d, bias = false)
    a   = linear(causal_attention(qkv, heads, kv_heads = kv, rope = true), width, bias = false)
    r   = x + a
    m   = rmsnorm(r)
    g   = linear(m, 128, bias = false)
    u   = linear(m, 128, bias = false)
    f   = linear(silu(g) * u, width, bias = false)
    return r + f
  }
  emb    = embedding(tokens, vocab, width)
  h      = repeat(layer, 2, emb)
  norm   = rmsnorm(h)
  logits = linear(norm, vocab, bias = false)
  loss   = cross_entropy(logits, next)
}
data {
  train = TRAIN
  EVAL
  shuffle = false
}
train { gpus = 1  micro_batch = 8  steps = 12  optimizer = adamw(lr = 3e-3)  deterministic = true }
"""


class TokenizerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = e2e.tmpdir()
        text = b""
        for name in sorted(os.listdir("/usr/share/games/fortunes")):
            path = os.path.join("/usr/share/games/fortunes", name)
            if os.path.isfile(path) and not name.endswith((".dat", ".u8")):
                with open(path, "rb") as f:
                    text += f.read()
            if len(text) >= 200000:
                break
        text = text[:200000]
        cls.train_text = os.path.join(cls.dir, "train.txt")
        cls.eval_text = os.path.join(cls.dir, "eval.txt")
        with open(cls.train_text, "wb") as f:
            f.write(text[:180000])
        with open(cls.eval_text, "wb") as f:
            f.write(text[180000:])
        prefix = os.path.join(cls.dir, "spm")
        proc = subprocess.run(
            ["spm_train", f"--input={cls.train_text}", f"--model_prefix={prefix}",
             "--vocab_size=512", "--model_type=bpe", "--character_coverage=1.0",
             "--byte_fallback=true"], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise AssertionError("spm_train failed (tools/setup.sh installs Debian's "
                                 "sentencepiece):\n" + proc.stderr[-2000:])
        cls.spm = prefix + ".model"

    def write(self, name, train, eval_line="", vocab=512):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(MODEL.replace("VOCAB", str(vocab)).replace("TRAIN", train)
                    .replace("EVAL", eval_line))
        return path

    def run_metrics(self, model, *args, check=True):
        metrics = os.path.join(self.dir, os.path.basename(model) + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        proc = e2e.train(model, "--device", "cpu", "--seed", e2e.SEED, "--metrics", metrics,
                         *args, check=check)
        if not check:
            return proc, []
        with open(metrics) as f:
            return proc, [json.loads(line) for line in f]

    def test_text_with_a_tokenizer_trains_and_reports_bits_per_byte(self):
        model = self.write("text.train", f'text("{self.train_text}", tokenizer = "{self.spm}")',
                           f'eval = text("{self.eval_text}", tokenizer = "{self.spm}")')
        proc, records = self.run_metrics(model, "--save", os.path.join(self.dir, "lm.safetensors"))
        evals = [r for r in records if r["kind"] == "eval"]
        self.assertTrue(evals, records[:3])
        loss, bpb = evals[-1]["loss"], evals[-1]["bits_per_byte"]
        # bits per byte from spm_encode's own token count of the eval text.
        ids = subprocess.run(["spm_encode", f"--model={self.spm}", "--output_format=id",
                              self.eval_text], capture_output=True, text=True, check=True)
        tokens = sum(len(line.split()) for line in ids.stdout.splitlines())
        size = os.path.getsize(self.eval_text)
        want = loss / math.log(2) * tokens / size
        print(f"eval: {loss:.4f} nats/token, {bpb:.4f} bits/byte ({tokens} tokens, {size} bytes; "
              f"expected {want:.4f})")
        self.assertAlmostEqual(bpb, want, delta=0.02 * want)
        self.assertGreater(size / tokens, 1.5)  # subwords, not bytes
        # sample reads and writes text through the same model.
        out = subprocess.run([SAMPLE, model, os.path.join(self.dir, "lm.safetensors"),
                              "--prompt", "The meaning of life is", "--tokens", "20",
                              "--seed", str(1 + e2e.SEED)], capture_output=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr.decode("latin-1"))
        text = out.stdout.decode("utf-8")  # decoded pieces: valid UTF-8
        self.assertTrue(text.startswith("The meaning of life is"), text)
        self.assertGreater(len(text), len("The meaning of life is") + 10, text)

    def test_a_shard_from_tools_tokenize_trains_bit_for_bit_alike(self):
        shard = os.path.join(self.dir, "train.bin")
        proc = subprocess.run([TOKENIZE, "--tokenizer", self.spm, "--out", shard,
                               self.train_text], capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("uint16", proc.stdout)
        from_text = self.write("a.train", f'text("{self.train_text}", tokenizer = "{self.spm}")')
        from_shard = self.write("b.train", f'tokens("{shard}")')
        _, a = self.run_metrics(from_text)
        _, b = self.run_metrics(from_shard)
        losses_a = [r["loss"] for r in a if r["kind"] == "train"]
        losses_b = [r["loss"] for r in b if r["kind"] == "train"]
        self.assertEqual(len(losses_a), 12)
        self.assertEqual(losses_a, losses_b)

    def test_bad_tokenizers_are_refused_clearly(self):
        missing = self.write("missing.train",
                             f'text("{self.train_text}", tokenizer = "no_such.model")')
        proc = e2e.train(missing, "--device", "cpu", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("missing.train:", proc.stdout)
        self.assertIn("cannot read tokenizer 'no_such.model'", proc.stdout)
        small = self.write("small.train", f'text("{self.train_text}", tokenizer = "{self.spm}")',
                           vocab=256)
        proc = e2e.train(small, "--device", "cpu", check=False)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("has 512 pieces but the model's vocabulary is 256", proc.stdout)


if __name__ == "__main__":
    unittest.main()
