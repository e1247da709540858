#!/usr/bin/env bash
# Installs every Debian package the build, the tests and the examples need.
# Safe to run twice: apt-get skips what is already installed.
set -euo pipefail

PACKAGES=(
  bazel-bootstrap          # Bazel 4.2.3, works offline with third_party/ stand-ins
  antlr4                   # generates the .train parser at build time
  libantlr4-runtime-dev    # ANTLR4 C++ runtime
  libabsl-dev              # absl::Status, flags, strings
  libgtest-dev libgmock-dev
  libgloo-dev              # CPU collectives
  libhiredis-dev           # Gloo's RedisStore (--rendezvous redis://)
  libssl-dev               # HMAC-SHA256: the job store's token (MASTER_ADDR rendezvous)
  libopenmpi-dev openmpi-bin  # MPI collectives over shared memory (mpirun -np 2 train ...)
  redis-server             # the Redis rendezvous test
  libopenblas-dev          # CPU matrix products
  libdnnl-dev              # oneDNN: CPU convolution and pooling
  libsentencepiece-dev sentencepiece  # subword tokenizers for text data (spm_train makes models)
  zlib1g-dev               # gzip datasets
  nlohmann-json3-dev       # JSON: checkpoint and trace headers, metrics
  libisal-dev              # CRC-32C of TensorBoard event files (no libcrc32c-dev in Debian 12)
  dataset-fashion-mnist    # the default example's data
  fortunes                 # the tiny GPT's text (/usr/share/games/fortunes)
  graphviz                 # tools/viz renders .svg/.png through dot
  librsvg2-bin             # rsvg-convert: tools/viz's training curves as .png
  chromium                 # browser test of the viz HTML report
  python3-torch            # PyTorch reference in benchmarks and tests
  python3-venv             # TensorBoard's virtual environment (below)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#PACKAGES[@]} packages present"

# TensorBoard from PyPI (Debian has none), for //tests/e2e:metrics_test and
# for looking at --tensorboard folders:
#   ~/.cache/trainc/tensorboard-venv/bin/tensorboard --logdir DIR
# Without PyPI the test makes its own or skips, so this step only warns.
TB_VENV="$HOME/.cache/trainc/tensorboard-venv"
if ! "$TB_VENV/bin/python" -c "import tensorboard" 2>/dev/null; then
  if /usr/bin/python3 -m venv "$TB_VENV" &&
     "$TB_VENV/bin/pip" install -q --disable-pip-version-check "tensorboard>=2,<3"; then
    echo "setup: TensorBoard in $TB_VENV"
  else
    echo "setup: warning: could not install TensorBoard from PyPI into $TB_VENV" >&2
  fi
fi

# Hugging Face transformers from PyPI, over Debian's torch (the venv sees
# the system's packages), for //tests/e2e:hf_export_test, which loads
# tools/hf_export's folders into transformers itself. Without PyPI that
# test skips, saying so.
HF_VENV="$HOME/.cache/trainc/hf-venv"
if ! "$HF_VENV/bin/python" -c "import transformers, torch" 2>/dev/null; then
  if /usr/bin/python3 -m venv --system-site-packages "$HF_VENV" &&
     "$HF_VENV/bin/pip" install -q --disable-pip-version-check "transformers==4.36.2"; then
    echo "setup: transformers in $HF_VENV"
  else
    echo "setup: warning: could not install transformers from PyPI into $HF_VENV" >&2
  fi
fi
