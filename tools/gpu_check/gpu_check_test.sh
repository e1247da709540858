#!/usr/bin/env bash
# The GPU check's pack is complete, without a GPU: collect.sh gathers what
# manifest.txt names from this test's runfiles (the same files pack.sh
# takes from bazel-bin), and check_pack.sh checks it: every library found
# inside the pack, every program starts (--help, --gtest_list_tests), and
# run.sh's items use exactly what is packed. The compressed archive is not
# made here (xz takes minutes); the folder it would hold is.
set -euo pipefail

ws=${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:-trainc}
tools=$ws/tools/gpu_check
pack=${TEST_TMPDIR:-/tmp}/pack
"$tools/collect.sh" "$ws" "$ws" "$pack"
"$tools/check_pack.sh" "$pack"
