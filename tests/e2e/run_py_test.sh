#!/usr/bin/env bash
# Runs one Python end-to-end test with Debian's python3 (numpy, no pip).
set -euo pipefail
dir="$(dirname "$0")"
cd "$dir"
# Data caches (the pixel cache of runtime/data) stay inside the test.
export TRAINC_CACHE_DIR="${TEST_TMPDIR:-/tmp}/trainc-cache"
exec /usr/bin/python3 -u "$(basename "$1")"
