#!/usr/bin/env bash
# viz -o FILE.svg (through Graphviz dot) and the timeline SVG are
# well-formed XML. Skips, saying why, when dot or python3 is missing.
set -euo pipefail
here="tools/viz"
viz="$here/viz"
make="$here/make_synthetic"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
py=/usr/bin/python3
[[ -x "$py" ]] || py="$(command -v python3 || true)"
if [[ -z "$py" ]]; then echo "SKIP: no python3 for the XML check"; exit 0; fi

"$make" "$tmp/m.plan" "$tmp/m.trace.json"

# The timeline needs no Graphviz: check it first.
"$viz" "$tmp/m.plan" --trace "$tmp/m.trace.json" -o "$tmp/m.dot"
"$py" "$here/check_xml.py" "$tmp/m_timeline.svg" 50

if ! command -v dot >/dev/null; then
  echo "SKIP (graph part): Graphviz dot not on PATH"
  exit 0
fi
"$viz" "$tmp/m.plan" -o "$tmp/m.svg"
"$py" "$here/check_xml.py" "$tmp/m.svg" 50
grep -q "h1.0 = linear" "$tmp/m.svg"
"$viz" "$tmp/m.plan" -o "$tmp/m.png"
# PNG signature
[[ "$(head -c 8 "$tmp/m.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]]
echo PASS
