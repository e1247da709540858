#!/usr/bin/env bash
# Opens the viz HTML report in headless Chromium and checks what it shows:
# the DOM has the graph, timeline and tables, and the screenshot has pixels
# drawn where the graph and the timeline were laid out (the page records
# those rectangles on <body>), and the predicted scaling plot is laid out. Then the same for the training curves of two
# real metrics logs: drawn, and in both runs' colours. Skips only when
# Chromium is absent.
set -euo pipefail
viz="tools/viz/viz"
make="tools/viz/make_synthetic"
regions="tests/viz/png_regions.py"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
chrome="$(command -v chromium || command -v chromium-browser || true)"
if [[ -z "$chrome" ]]; then
  echo "SKIP: chromium not installed (apt-get install chromium)"
  exit 0
fi
py=/usr/bin/python3
[[ -x "$py" ]] || py="$(command -v python3)"

# The default example, compiled in-process; its trace is synthetic (fixed
# op costs) since no runtime is involved here.
example="dsl_examples/fashion_mlp.train"
"$make" "$tmp/m.plan" "$tmp/m.trace.json" --from "$example" --steps 3
"$viz" "$example" --trace "$tmp/m.trace.json" --scaling --gpus 1,8,64 -o "$tmp/report.html"

# Chromium wants a writable HOME and profile; keep both in the test's tmp.
export HOME="$tmp/home"
mkdir -p "$HOME"
flags=(--headless --no-sandbox --disable-gpu --disable-dev-shm-usage
       --hide-scrollbars --force-device-scale-factor=1
       --user-data-dir="$tmp/profile" --window-size=1400,1800)
timeout 60 "$chrome" "${flags[@]}" --dump-dom "file://$tmp/report.html" \
  > "$tmp/dom.html" 2> "$tmp/chrome_dom.log" || {
  echo "chromium --dump-dom failed:"; tail -20 "$tmp/chrome_dom.log"; exit 1; }

fail() { echo "FAIL: $*"; exit 1; }
for needle in 'id="graph"' 'id="timeline"' 'id="overlap"' 'id="buckets"' \
              'id="memory"' 'id="batch"' 'class="node"' 'class="bar allreduce"' \
              'rank 1 comm' 'h1 = linear_relu' 'id="scaling-table"' \
              'class="point step"' 'class="point efficiency"'; do
  grep -q -- "$needle" "$tmp/dom.html" || fail "DOM lacks $needle"
done
grep -q 'id="graph-missing"' "$tmp/dom.html" && fail "graph was not rendered"
graph_rect="$(grep -o 'data-graph-rect="[0-9,.-]*"' "$tmp/dom.html" | head -1 | cut -d'"' -f2)"
timeline_rect="$(grep -o 'data-timeline-rect="[0-9,.-]*"' "$tmp/dom.html" | head -1 | cut -d'"' -f2)"
scaling_rect="$(grep -o 'data-scaling-rect="[0-9,.-]*"' "$tmp/dom.html" | head -1 | cut -d'"' -f2 || true)"
[[ -n "$graph_rect" && -n "$timeline_rect" ]] || fail "page script did not record the layout"
# The scaling plot is laid out (it may lie below the screenshot).
[[ "$(cut -d, -f3,4 <<<"$scaling_rect")" =~ ^[1-9][0-9]*,[1-9][0-9]*$ ]] \
  || fail "scaling plot not laid out: '$scaling_rect'"
echo "graph at $graph_rect, timeline at $timeline_rect"

timeout 60 "$chrome" "${flags[@]}" --screenshot="$tmp/shot.png" \
  "file://$tmp/report.html" > "$tmp/chrome_shot.log" 2>&1 || {
  echo "chromium --screenshot failed:"; tail -20 "$tmp/chrome_shot.log"; exit 1; }
[[ -s "$tmp/shot.png" ]] || fail "no screenshot"
cp "$tmp/shot.png" "${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp}/report.png" 2>/dev/null || true

"$py" "$regions" "$tmp/shot.png" "graph=$graph_rect" "timeline=$timeline_rect" \
  | tee "$tmp/regions.txt"
# An empty region would be ~0 (white); a drawn graph or timeline is well
# above 2% non-white pixels. The region must also be on screen (total > 0).
"$py" - "$tmp/regions.txt" <<'PY'
import sys
ok = True
for line in open(sys.argv[1]):
    name, frac, total = line.split()
    if int(total) == 0 or float(frac) < 0.02:
        print(f"FAIL: {name} region looks empty ({frac} drawn of {total} px)")
        ok = False
sys.exit(0 if ok else 1)
PY

# Training curves: the first 240 steps of the default example, split
# gpus=2 x accumulate=2 and gpus=1 x accumulate=4 (real runs' metrics logs).
m1="tools/viz/testdata/fashion_mlp_gpus2_acc2.metrics.jsonl"
m2="tools/viz/testdata/fashion_mlp_gpus1_acc4.metrics.jsonl"
"$viz" --metrics "$m1" --metrics "$m2" -o "$tmp/training.html"
tflags=("${flags[@]}")
tflags[-1]=--window-size=1200,1000
timeout 60 "$chrome" "${tflags[@]}" --dump-dom "file://$tmp/training.html" \
  > "$tmp/training_dom.html" 2> "$tmp/chrome_dom2.log" || {
  echo "chromium --dump-dom failed:"; tail -20 "$tmp/chrome_dom2.log"; exit 1; }
for needle in 'id="training"' 'id="runs"' 'class="curves"' 'id="curves-loss"' \
              'id="curves-eval-accuracy"' 'id="curves-lr"' 'id="curves-throughput"' \
              'class="series smooth"' 'class="eval-point"' \
              'fashion_mlp_gpus2_acc2' 'fashion_mlp_gpus1_acc4'; do
  grep -q -- "$needle" "$tmp/training_dom.html" || fail "training DOM lacks $needle"
done
[[ "$(grep -o 'class="legend-entry"' "$tmp/training_dom.html" | wc -l)" == 2 ]] \
  || fail "the legend does not have two runs"
training_rect="$(grep -o 'data-training-rect="[0-9,.-]*"' "$tmp/training_dom.html" | head -1 | cut -d'"' -f2)"
[[ -n "$training_rect" ]] || fail "page script did not record the training layout"
echo "training at $training_rect"
timeout 60 "$chrome" "${tflags[@]}" --screenshot="$tmp/training.png" \
  "file://$tmp/training.html" > "$tmp/chrome_shot2.log" 2>&1 || {
  echo "chromium --screenshot failed:"; tail -20 "$tmp/chrome_shot2.log"; exit 1; }
cp "$tmp/training.png" "${TEST_UNDECLARED_OUTPUTS_DIR:-$tmp}/training.png" 2>/dev/null || true
# The curves are drawn, and each run's colour (palette.cc RunColor) shows.
"$py" "$regions" "$tmp/training.png" "training=$training_rect" \
  "run0=$training_rect@1f77b4" "run1=$training_rect@d62728" | tee "$tmp/regions2.txt"
"$py" - "$tmp/regions2.txt" <<'PY'
import sys
need = {"training": 0.02, "run0": 0.002, "run1": 0.002}
ok = True
for line in open(sys.argv[1]):
    name, frac, total = line.split()
    if int(total) == 0 or float(frac) < need[name]:
        print(f"FAIL: {name}: {frac} of {total} px (need {need[name]})")
        ok = False
sys.exit(0 if ok else 1)
PY
echo PASS
