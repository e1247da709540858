#!/usr/bin/env bash
# tools/gpu_check/pack.sh [ARCHIVE]
#
# On the build machine (Bazel, the CUDA 13 toolkit with cuDNN and NCCL):
# builds what manifest.txt lists, collects it with the shared libraries it
# needs (collect.sh), checks the result (check_pack.sh) and packs it into
# ARCHIVE (default .device/gpu_check.tar.xz, an ignored folder that the
# device tool's `carry` takes). Fails, saying why, when the build has no
# CUDA, when the pack is incomplete, or when the archive with the working
# tree and the rest of .device would pass the 64 MiB a device call carries
# (GPU_CHECK_LIMIT_MIB to change it). Then, on the GPU machine:
#   bash tools/gpu_check/run.sh
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=common.sh
. "$here/common.sh"
die() {
  echo "pack.sh: $*" >&2
  exit 1
}
cd "$root"
archive=${1:-.device/gpu_check.tar.xz}
limit=$((${GPU_CHECK_LIMIT_MIB:-64} * 1024 * 1024))

mapfile -t labels < <(gc_manifest "$here/manifest.txt" exe gtest plugin | awk '{print $2}')
echo "pack.sh: bazel build ${labels[*]}"
bazel build "${labels[@]}"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit+="+changes"
GPU_CHECK_COMMIT=$commit "$here/collect.sh" bazel-bin . "$stage/pack"
grep -q '^cuda yes$' "$stage/pack/PACK_INFO" ||
  die "the CUDA plugin was built without CUDA (no toolkit found at build time:" \
    "third_party/cuda/cuda_configure.bzl); a GPU machine could run nothing of this pack"
"$here/check_pack.sh" "$stage/pack"

mkdir -p "$(dirname "$archive")"
echo "pack.sh: compressing $(du -sh "$stage/pack" | cut -f1) into $archive (xz, a few minutes)"
tar -C "$stage/pack" -cf - . | xz -T0 -6 >"$archive.tmp"
mv "$archive.tmp" "$archive"

# What a device call carries: the working tree (tracked files and
# untracked ones that are not ignored) and .device.
size=$(stat -c %s "$archive")
tree=$(git ls-files -z -co --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
carried=$(du -sb .device 2>/dev/null | cut -f1)
if [[ "$(realpath "$archive")" != "$root/.device/"* ]]; then carried=$((carried + size)); fi
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
echo "pack.sh: $archive is $(mib "$size"); with the working tree ($(mib "$tree")) and" \
  "the rest of .device a device call carries $(mib $((tree + carried)))"
[ $((tree + carried)) -le "$limit" ] ||
  die "over the $(mib "$limit") a device call carries: leave out data (manifest.txt) or empty .device"
cat <<EOF
pack.sh: done. On the GPU machine, with the device tool:
  run(command="bash tools/gpu_check/run.sh", carry=[".device"], timeout_s=560)
EOF
