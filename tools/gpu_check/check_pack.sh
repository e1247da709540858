#!/usr/bin/env bash
# check_pack.sh PACK_DIR
#
# Whether a collected pack (collect.sh) is complete, without a GPU:
#   - every entry of its MANIFEST is there, with PACK_INFO;
#   - every packed program and library finds each library it needs inside
#     the pack, with only PACK_DIR/lib and lib/fallback on LD_LIBRARY_PATH,
#     but glibc's own and the CUDA toolkit's (common.sh), which the GPU
#     machine has: a library the pack forgot shows as found elsewhere;
#   - every exe prints its --help and every gtest lists its tests, run from
#     PACK_DIR with that library path and an empty environment;
#   - run.sh parses (bash -n) and its items use exactly the packed programs
#     and only packed files (run.sh --check-pack).
# Prints one line per failure and exits 1 if any.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$here/common.sh"
[ $# -eq 1 ] || {
  echo "usage: check_pack.sh PACK_DIR" >&2
  exit 2
}
pack=$(cd "$1" && pwd) || exit 2
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

for f in MANIFEST PACK_INFO; do
  [ -f "$pack/$f" ] || fail "$f is missing"
done
manifest=$pack/MANIFEST
[ -f "$manifest" ] || exit 1

while read -r kind label path; do
  [ -x "$pack/$path" ] || fail "$kind $label: $path is missing or not executable"
done < <(gc_manifest "$manifest" exe gtest plugin)
while read -r kind path; do
  [ -f "$pack/$path" ] || fail "file $path is missing"
done < <(gc_manifest "$manifest" file)
while read -r kind dir; do
  [ -d "$pack/data$dir" ] && [ -n "$(ls -A "$pack/data$dir")" ] || fail "data $dir: data$dir is missing or empty"
done < <(gc_manifest "$manifest" data)

# Each library resolved inside the pack.
ld_path=$pack/lib:$pack/lib/fallback
elfs=()
while read -r path; do
  [ -f "$pack/$path" ] && elfs+=("$pack/$path")
done < <(gc_programs "$manifest")
for lib in "$pack"/lib/*.so* "$pack"/lib/fallback/*.so*; do
  [ -f "$lib" ] && elfs+=("$lib")
done
for elf in "${elfs[@]}"; do
  deps=$(LD_LIBRARY_PATH=$ld_path gc_ldd "$elf") || {
    fail "${elf#"$pack"/}: ldd failed"
    continue
  }
  while read -r name lib; do
    [ -n "$name" ] || continue
    [[ "$name" =~ $GC_BASIC_LIBS || "$name" =~ $GC_DEVICE_LIBS ]] && continue
    if [ "$lib" = "-" ]; then
      fail "${elf#"$pack"/} needs $name: not in the pack"
    elif [[ "$lib" != "$pack/lib/"* ]]; then
      fail "${elf#"$pack"/} needs $name: not in the pack (found only at $lib)"
    fi
  done <<<"$deps"
done

# Each program starts.
run_packed() {
  (cd "$pack" && env -i PATH=/usr/bin:/bin HOME=/tmp LD_LIBRARY_PATH="$ld_path" "$@")
}
while read -r kind label path; do
  [ -x "$pack/$path" ] || continue
  if [ "$kind" = exe ]; then
    out=$(run_packed "./$path" --help 2>&1)
    rc=$?
    [ $rc -eq 0 ] && grep -qi '^usage' <<<"$out" ||
      fail "$path --help: exit $rc, no usage line: $(head -c 300 <<<"$out")"
  else
    out=$(run_packed "./$path" --gtest_list_tests 2>&1)
    rc=$?
    [ $rc -eq 0 ] && grep -q '^  [A-Za-z]' <<<"$out" ||
      fail "$path --gtest_list_tests: exit $rc, no tests listed: $(head -c 300 <<<"$out")"
  fi
done < <(gc_manifest "$manifest" exe gtest)

# The runner against this pack.
bash -n "$here/run.sh" || fail "run.sh does not parse (bash -n)"
out=$(bash "$here/run.sh" --check-pack "$pack" 2>&1) || fail "run.sh --check-pack: $out"

if [ $failures -gt 0 ]; then
  echo "check_pack.sh: $failures failure(s) in $pack"
  exit 1
fi
echo "check_pack.sh: $pack is complete ($(gc_programs "$manifest" | wc -l) programs, $(ls "$pack/lib" "$pack/lib/fallback" | grep -c '\.so') libraries)"
