"""Helpers for the end-to-end tests: run the real `train` binary on real
.train files and data, read what it wrote (safetensors, traces)."""
import gzip
import json
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np

FASHION = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
TRAIN_IMAGES = FASHION
TRAIN_LABELS = "/usr/share/datasets/fashion-mnist/train-labels-idx1-ubyte.gz"


def runfile(path):
    """A file of this workspace, from the test's runfiles."""
    base = os.environ.get("TEST_SRCDIR")
    if base:
        p = os.path.join(base, os.environ.get("TEST_WORKSPACE", "trainc"), path)
        if os.path.exists(p):
            return p
    return os.path.join(os.path.dirname(__file__), "..", "..", path)


# The seed of everything random in a test that trains and judges what it
# learned (initialisation, data order, sampling). .ci/run runs the tests
# tagged "trains" a second time with TRAINC_TEST_SEED=1 and oneDNN capped at
# AVX2, so an outcome that holds for one seed's or one kernel path's
# rounding only fails there first, not on a user's machine.
SEED = int(os.environ.get("TRAINC_TEST_SEED", "0"))

TRAIN = runfile("tools/train")
EXAMPLE = runfile("dsl_examples/fashion_mlp.train")
# The default example's linear layers: (name, in, out).
MLP_LAYERS = [("h1", 784, 256), ("h2", 256, 128), ("logits", 128, 10)]


def initial_mlp_weights(seed, layers=MLP_LAYERS):
    """The default MLP's weights (or those of `layers`: (name, in, out, ...))
    as nn.Linear initialises them, U(+-1/sqrt(in)), biases included, under
    PyTorch's names."""
    rng = np.random.RandomState(seed)
    w = {}
    for name, fan_in, fan_out, *_ in layers:
        bound = 1 / np.sqrt(fan_in)
        w[name + ".weight"] = rng.uniform(-bound, bound, (fan_out, fan_in)).astype(np.float32)
        w[name + ".bias"] = rng.uniform(-bound, bound, fan_out).astype(np.float32)
    return w


def tmpdir():
    return tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))


SMALL_LM_DATA_AND_TRAIN = """
data {{
  train = text("{train}")
  eval  = text("{eval}")
}}
train {{
  gpus = 1
  micro_batch = 4
  steps = 4
  optimizer = adamw(lr = 3e-3)
}}
"""


def small_language_model(example, path, train_text, eval_text, replacements):
    """Writes to `path` dsl_examples/`example`.train's model with each (old,
    new) of `replacements` applied (constants made small), on the text
    files given, for 4 AdamW steps of micro-batch 4; returns `path`."""
    with open(runfile(f"dsl_examples/{example}.train")) as f:
        source = f.read()
    source = source[:source.index("data {")] + SMALL_LM_DATA_AND_TRAIN.format(
        train=train_text, eval=eval_text)
    for old, new in replacements:
        source = source.replace(old, new)
    with open(path, "w") as f:
        f.write(source)
    return path


def train(*args, timeout=300, check=True, env=None):
    """Runs tools/train (with `env` added to the environment); returns
    CompletedProcess (stdout+stderr as text)."""
    proc = subprocess.run([TRAIN, *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=None if env is None else {**os.environ, **env})
    if check and proc.returncode != 0:
        raise AssertionError(f"train {' '.join(map(str, args))} failed "
                             f"({proc.returncode}):\n{proc.stdout}")
    return proc


def train_sharded(d, name, gpus, *extra, steps=12, micro_batch=4, bucket_mb=0.05):
    """fashion_mlp on `gpus` CPU ranks, AdamW, global batch 48 in
    micro-batches of `micro_batch` (4: accumulate 6, 4 and 3 on 2, 3 and 4
    ranks), small buckets (several per step), for the ZeRO tests; returns
    the checkpoint's tensors and the log."""
    out = f"{d}/{name}.safetensors"
    proc = train(EXAMPLE, "--device", "cpu", "--seed", SEED, "--gpus", gpus, "--global_batch", 48,
                 "--micro_batch", micro_batch, "--bucket_mb", bucket_mb, "--steps", steps,
                 "--no-eval", "--save", out, *extra)
    return read_checkpoint(out)[0], proc.stdout


def train_gpts(d, common, variants):
    """tiny_gpt once per (name, extra flags) of `variants`, with `common`
    flags and --save; returns {name: the checkpoint's tensors}."""
    gpt = runfile("dsl_examples/tiny_gpt.train")
    runs = {}
    for name, extra in variants:
        out = f"{d}/gpt_{name}.safetensors"
        train(gpt, "--seed", SEED, *common, *extra, "--save", out, timeout=600)
        runs[name] = read_checkpoint(out)[0]
    return runs


def write_safetensors(path, tensors, metadata=None):
    """F32 tensors in the published safetensors layout (our own writer),
    with string `metadata` when given."""
    header, offset, blobs = {}, 0, []
    if metadata:
        header["__metadata__"] = {k: str(v) for k, v in metadata.items()}
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f4")
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def rel_diff(a, b):
    """max |a - b| / max |b|, in float64."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def norm_rel(a, b):
    """||a - b|| / ||b||, in float64: a tensor-wise relative difference."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def assert_same_bits(test, got, want, what):
    """The same tensor names, and every tensor bit for bit equal."""
    test.assertEqual(sorted(got), sorted(want), what)
    for name in want:
        test.assertTrue(np.array_equal(got[name].view(np.uint32),
                                       want[name].view(np.uint32)),
                        f"{what}: {name} differs")


def assert_close_to_reference(test, got, ref, tolerance, what):
    """Every parameter of `got` within `tolerance` (rel_diff) of the
    reference's, the same names and shapes; returns the worst difference."""
    test.assertEqual(sorted(got), sorted(ref),
                     "parameter names differ from the PyTorch model's")
    worst = 0.0
    for name, want in ref.items():
        test.assertEqual(got[name].shape, want.shape, name)
        rel = rel_diff(got[name], want)
        worst = max(worst, rel)
        test.assertLessEqual(
            rel, tolerance, f"{name}: {what}: relative difference "
            f"{rel:.3g} from PyTorch float64 (tolerance {tolerance})")
    return worst


def parameters_of(tensors):
    """A checkpoint's parameters: without the optimizer state tensors
    (optimizer.<name>.exp_avg ...)."""
    return {k: v for k, v in tensors.items() if not k.startswith("optimizer.")}


def read_safetensors(path):
    """{name: np.ndarray}, metadata — a reader of our own, independent of
    the C++ one, following the published format."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = data[8 + n:]
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", t
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(body[b:e], dtype="<f4").reshape(t["shape"])
    return out, meta


def training_state_path(path):
    """The training state file beside a checkpoint's weights file."""
    stem = path[:-len(".safetensors")] if path.endswith(".safetensors") else path
    return stem + ".train_state.safetensors"


def read_checkpoint(path):
    """A trainc checkpoint whole: the weights file's tensors and those of
    the training state beside it (optimizer.<name>.exp_avg ...), and the
    weights file's metadata."""
    tensors, meta = read_safetensors(path)
    state = training_state_path(path)
    if os.path.exists(state):
        tensors.update(read_safetensors(state)[0])
    return tensors, meta


def children(pid):
    """The live child processes of `pid` (a local launcher's ranks)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.append(int(entry))
    return kids


def rank_of(pid):
    """The RANK a local launcher gave worker process `pid`."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    return int(env[b"RANK"])


def need_fashion_mnist(test):
    if not os.path.exists(FASHION):
        test.skipTest("Fashion-MNIST is not installed (dataset-fashion-mnist)")


def need_torch_reference(torch, fashion_mnist=True):
    """For a PyTorch reference test's setUpClass: skips the class, saying
    why, without `torch` (the module, None when its import failed) or,
    when asked, Fashion-MNIST; else pins PyTorch to one thread."""
    if fashion_mnist and not os.path.exists(FASHION):
        raise unittest.SkipTest("Fashion-MNIST is not installed (dataset-fashion-mnist)")
    if torch is None:
        raise unittest.SkipTest("PyTorch is not installed for this interpreter "
                                "(Debian: apt-get install python3-torch)")
    torch.set_num_threads(1)


def mlp_reference_loss(torch, F, params, images, labels, step, batch):
    """The example MLP's (MLP_LAYERS, ReLU between) mean cross-entropy over
    global batch `step` of `batch` examples in file order (shuffle =
    false), in float64, from `params` ({name: tensor})."""
    x = torch.tensor(images[step * batch:(step + 1) * batch].reshape(batch, -1),
                     dtype=torch.float64) / 255
    y = torch.tensor(labels[step * batch:(step + 1) * batch].astype(np.int64))
    h = x
    for i, (name, _, _) in enumerate(MLP_LAYERS):
        h = h @ params[name + ".weight"].t() + params[name + ".bias"]
        if i + 1 < len(MLP_LAYERS):
            h = torch.relu(h)
    return F.cross_entropy(h, y)


def set_up_reference(cls, examples, init):
    """For a PyTorch reference test's setUpClass: its own folder, the first
    `examples` Fashion-MNIST training images and labels (read by our own
    reader), and the initial weights `init`, written where --init-from
    reads them (cls.init_path)."""
    cls.dir = tmpdir()
    cls.images = read_idx(TRAIN_IMAGES, examples)
    cls.labels = read_idx(TRAIN_LABELS, examples)
    cls.init = init
    cls.init_path = os.path.join(cls.dir, "init.safetensors")
    write_safetensors(cls.init_path, init)


def read_idx(path, count):
    """The first `count` items of a gzipped IDX file of unsigned bytes, by a
    reader of our own (magic, dimensions, then the bytes)."""
    with gzip.open(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        assert magic >> 8 == 0x08, hex(magic)
        per_item = int(np.prod(dims[1:], dtype=np.int64))
        data = np.frombuffer(f.read(count * per_item), dtype=np.uint8)
    return data.reshape((count,) + tuple(dims[1:]))
