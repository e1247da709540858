#!/usr/bin/env bash
# Runs one Python end-to-end test with Debian's python3 (numpy, no pip).
set -euo pipefail
dir="$(dirname "$0")"
cd "$dir"
exec /usr/bin/python3 -u "$(basename "$1")"
