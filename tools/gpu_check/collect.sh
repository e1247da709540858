#!/usr/bin/env bash
# collect.sh BIN_ROOT SRC_ROOT OUT_DIR
#
# Gathers what tools/gpu_check/manifest.txt names into OUT_DIR (emptied
# first), laid out as the workspace is, so that the programs find their
# files relative to OUT_DIR as they do from the workspace root:
#   PATH                   each exe, gtest and plugin (from BIN_ROOT/PATH:
#                          bazel-bin, or a test's runfiles) and each file
#                          (from SRC_ROOT/PATH)
#   lib/                   every shared library they load (ldd), but
#                          glibc's and the CUDA toolkit's (common.sh)
#   lib/fallback/          libstdc++ and libgcc_s, for a machine whose own
#                          are older than this build's
#   data/DIR               each data folder (installed at DIR by run.sh)
#   MANIFEST, PACK_INFO    the manifest; the build's commit, whether CUDA
#                          was built in, the newest glibc and libstdc++
#                          symbol versions needed, the device's libraries
# Fails naming what is missing. GPU_CHECK_COMMIT, if set, is recorded.
set -euo pipefail

die() {
  echo "collect.sh: $*" >&2
  exit 1
}
[ $# -eq 3 ] || die "usage: collect.sh BIN_ROOT SRC_ROOT OUT_DIR"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"
manifest=$here/manifest.txt
bin_root=$1
src_root=$2
out=$3
[ -f "$manifest" ] || die "$manifest: missing"
rm -rf "$out"
mkdir -p "$out/lib/fallback"
cp "$manifest" "$out/MANIFEST"

# The programs, then every library they load.
elfs=()
while read -r kind label path; do
  src=$bin_root/$path
  [ -f "$src" ] || die "$label: $src is missing (built?)"
  mkdir -p "$out/$(dirname "$path")"
  cp -L "$src" "$out/$path"
  chmod u+w "$out/$path"
  elfs+=("$src")
done < <(gc_manifest "$manifest" exe gtest plugin)

device_libs=()
for elf in "${elfs[@]}"; do
  deps=$(gc_ldd "$elf") || die "$elf: ldd failed"
  while read -r name lib; do
    [ -n "$name" ] || continue
    if [[ "$name" =~ $GC_BASIC_LIBS ]]; then
      continue
    elif [[ "$name" =~ $GC_DEVICE_LIBS ]]; then
      device_libs+=("$name")
    elif [ "$lib" = "-" ]; then
      die "$elf needs $name, which is not found here"
    elif [[ "$name" =~ $GC_FALLBACK_LIBS ]]; then
      [ -e "$out/lib/fallback/$name" ] || cp -L "$lib" "$out/lib/fallback/$name"
    else
      [ -e "$out/lib/$name" ] || cp -L "$lib" "$out/lib/$name"
    fi
  done <<<"$deps"
done
chmod -R u+w "$out/lib"

while read -r kind path; do
  [ -f "$src_root/$path" ] || die "$src_root/$path is missing"
  mkdir -p "$out/$(dirname "$path")"
  cp -L "$src_root/$path" "$out/$path"
done < <(gc_manifest "$manifest" file)

while read -r kind dir; do
  [ -d "$dir" ] || die "data folder $dir is missing (tools/setup.sh installs it)"
  mkdir -p "$out/data$(dirname "$dir")"
  cp -a "$dir" "$out/data$dir"
done < <(gc_manifest "$manifest" data)

# The newest symbol versions of glibc and of the C++ runtime that the
# packed programs and libraries ask for (the fallback libraries define,
# not need, theirs).
versions() {
  local prefix=$1
  local f
  for f in "${elfs[@]}" "$out"/lib/*; do
    objdump -T "$f" 2>/dev/null | grep -o "${prefix}_[0-9][0-9.]*" || true
  done | sed "s/^${prefix}_//" | sort -u -V | tail -1
}
plugin=$(gc_manifest "$manifest" plugin | awk '{print $3; exit}')
cuda=no
if gc_ldd "$out/$plugin" | grep -q '^libcudart\.so'; then cuda=yes; fi
{
  echo "commit ${GPU_CHECK_COMMIT:-unknown}"
  echo "cuda $cuda"
  echo "glibc $(versions GLIBC)"
  echo "glibcxx $(versions GLIBCXX)"
  echo "cxxabi $(versions CXXABI)"
  echo "device_libs $(printf '%s\n' "${device_libs[@]}" | sort -u | tr '\n' ' ')"
} >"$out/PACK_INFO"
