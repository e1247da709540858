#!/usr/bin/env bash
# viz -o FILE.svg (through Graphviz dot), the timeline SVG and the
# predicted scaling plot (alone and inside the HTML report) are well-formed
# XML. Skips, saying why, when dot or python3 is missing.
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

# The scaling plot needs no Graphviz either (the report says why the graph
# is missing when dot is not installed).
"$viz" "$tmp/m.plan" --scaling --gpus 1,2,8,64 --machine cpu_loopback -o "$tmp/s.html"
"$py" "$here/check_xml.py" "$tmp/s_scaling.svg" 50
"$py" -c 'import re, sys
html = open(sys.argv[1]).read()
sys.stdout.write(re.search(r"<div id=\"scaling\">(.*?)</div>", html, re.S).group(1))' \
  "$tmp/s.html" >"$tmp/s_inline.svg"
"$py" "$here/check_xml.py" "$tmp/s_inline.svg" 50

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
