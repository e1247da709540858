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
  libopenblas-dev          # CPU matrix products
  zlib1g-dev               # gzip datasets
  dataset-fashion-mnist    # the default example's data
  graphviz                 # tools/viz renders .svg/.png through dot
  chromium                 # browser test of the viz HTML report
  python3-torch            # PyTorch reference in benchmarks and tests
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
