#!/usr/bin/env bash
# The GPU check (tools/gpu_check/README.md): on a machine with one NVIDIA
# GPU, CUDA 13 and PyTorch but no Bazel, run from the repository root:
#
#   bash tools/gpu_check/run.sh
#
# It unpacks .device/gpu_check.tar.xz (pack.sh's) into /tmp/gpu_check/pack,
# runs each item below under its own time limit and a budget for all of
# them (GPU_CHECK_BUDGET_S, default 530 s), goes on after a failure, and
# prints one table: name, result (pass, FAIL or a figure), reference, time.
# The table and every log also go to $OUT when it is set (table.txt,
# logs.tar.gz; the GPT-2 trace, its report and the calibrated profile).
#
#   GPU_CHECK_ONLY="losses gpt2_bench" bash tools/gpu_check/run.sh   some items
#   GPU_CHECK_GPT_ITERS (default 10): timed steps per GPT row of gpu_bench
#   GPU_CHECK_ARCHIVE, GPU_CHECK_PACK: another archive, or an unpacked pack
#   bash tools/gpu_check/run.sh --list              the items
#   bash tools/gpu_check/run.sh --check-pack DIR    (no GPU) the items' files
#       are all in the collected pack DIR, and each program and file it
#       packs is used by an item
set -u -o pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=common.sh
. "$HERE/common.sh"

# name, time limit in seconds, and the pack's files the item uses.
# In this order: the tests, then the figures (GPT-2 first, the goal's).
ITEMS=(
  "preflight        45 runtime/cuda/libtrainc_cuda.so"
  "cuda_device_test 120 runtime/cuda/cuda_device_test"
  "nccl_test        60 runtime/comm/nccl/nccl_communicator_test"
  "conformance      90 runtime/conformance/op_conformance_test"
  "losses           120 tools/train dsl_examples/tiny_gpt.train dsl_examples/llama_tiny.train data/usr/share/games/fortunes"
  "gpt2_bench       270 tools/bench/gpu_bench tools/bench/torch_gpt2_bench.py dsl_examples/tiny_gpt.train dsl_examples/gpt2_small.train"
  "trace_calibrate  90 tools/train tools/simulate/simulate tools/viz/viz dsl_examples/gpt2_small.train data/usr/share/games/fortunes"
  "attention_bench  60 tools/bench/attention_bench tools/bench/torch_attention_bench.py"
  "attention_mma    45 tools/bench/attention_bench"
  "gpu_test         90 tests/e2e/gpu_test.py tests/e2e/e2e_lib.py tools/train dsl_examples/fashion_mlp.train data/usr/share/datasets/fashion-mnist"
)
BUDGET_S=${GPU_CHECK_BUDGET_S:-530}
RESERVE_S=15 # for the table and the logs' archive

# --- Items: each runs as `run.sh --item NAME` under `timeout`, in $PACK,
# with the environment main() exported, and writes its rows with row().

row() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$GC_ROWS"; }
rows() { "$PY" "$HERE/rows.py" "$@" >>"$GC_ROWS"; }
# Runs a command stopped 8 s before the item's limit, so that what it
# printed still makes rows (status 124 when stopped).
limited() {
  local left=$((GC_ITEM_END - $(date +%s) - 8))
  [ "$left" -gt 0 ] || left=1
  timeout -k 3 "$left" "$@"
}
# A packed program with the pack's libraries (and the device's CUDA ones),
# limited, its output line by line to $LOGDIR/LOG; returns its status.
tc_log() {
  local log=$1 program=$2
  shift 2
  echo "+ $program $*" >"$LOGDIR/$log"
  LD_LIBRARY_PATH=$TRAINC_LD limited $LINEBUF "$PACK/$program" "$@" >>"$LOGDIR/$log" 2>&1
}

item_preflight() {
  local gpu
  if gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used \
    --format=csv,noheader 2>&1); then
    row "gpu" "$gpu" "nvidia-smi (name, driver, memory total, used)"
  else
    row "gpu" "FAIL nvidia-smi: $(tail -1 <<<"$gpu")" ""
  fi
  row "pack" "$(awk '$1=="commit"{c=$2} $1=="cuda"{u=$2} END{print "commit " c ", CUDA built in: " u}' "$PACK/PACK_INFO")" \
    "$PACK"
  # Every packed program, with every library it loads, resolves every
  # symbol (the libraries alone need symbols their programs bring).
  local elf missing="" n=0
  for elf in $(gc_programs "$PACK/MANIFEST"); do
    n=$((n + 1))
    local out
    out=$(LD_LIBRARY_PATH=$TRAINC_LD ldd -r "$PACK/$elf" 2>&1 | grep -E 'not found|undefined symbol' | head -3)
    [ -n "$out" ] && missing+="$elf: $(tr '\n\t' '  ' <<<"$out"); "
  done
  echo "missing: ${missing:-none}"
  if [ -n "$missing" ]; then
    row "libraries" "FAIL ${missing:0:300}" "ldd -r of $n packed programs"
  else
    row "libraries" "pass $n packed programs resolve every symbol" "ldd -r; $(cat "$WORK/libs.txt")"
  fi
  local torch
  torch=$("$PY" -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda, "sees", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU")' 2>&1)
  torch=$(tail -1 <<<"$torch")
  [[ "$torch" == torch* ]] || torch="FAIL $torch"
  row "pytorch" "$torch" "the reference scripts' $PY"
}

gtest_item() {
  local name=$1 program=$2
  tc_log "$name.out" "$program" --gtest_color=no
  rows gtest "$name" "$LOGDIR/$name.out" $?
}
item_cuda_device_test() { gtest_item cuda_device_test runtime/cuda/cuda_device_test; }
item_nccl_test() { gtest_item nccl_communicator_test runtime/comm/nccl/nccl_communicator_test; }
item_conformance() { gtest_item op_conformance_test runtime/conformance/op_conformance_test; }

# tests/e2e/gpu_test.py as in the workspace: its own python, and a
# tools/train beside it that adds the pack's libraries.
item_gpu_test() {
  local tree=$WORK/e2e
  mkdir -p "$tree/tests/e2e" "$tree/tools"
  cp "$PACK/tests/e2e/gpu_test.py" "$PACK/tests/e2e/e2e_lib.py" "$tree/tests/e2e/"
  ln -sfn "$PACK/dsl_examples" "$tree/dsl_examples"
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$TRAINC_LD" "$PACK/tools/train" >"$tree/tools/train"
  chmod +x "$tree/tools/train"
  (cd "$tree/tests/e2e" && TRAINC_CACHE_DIR=$WORK/cache limited "$PY" -u gpu_test.py -v) \
    >"$LOGDIR/gpu_test.out" 2>&1
  rows unittest "tests/e2e/gpu_test.py" "$LOGDIR/gpu_test.out" $?
}

# tiny_gpt and llama_tiny, 10 steps on one rank: CUDA against the CPU in
# fp32 and bf16, and CUDA's graph replay against launching kernel by kernel.
item_losses() {
  local model precision device extra tol dir=$LOGDIR/losses
  mkdir -p "$dir"
  for model in tiny_gpt llama_tiny; do
    for precision in fp32 bf16; do
      for device in cpu cuda cuda-nograph; do
        [ "$device" = cuda-nograph ] && [ "$precision" = bf16 ] && continue
        extra=()
        [ "$device" = cuda-nograph ] && extra=(--no-graph)
        tc_log "losses/$model.$precision.$device.out" tools/train "dsl_examples/$model.train" \
          --device "${device%-nograph}" --gpus 1 --steps 10 --seed 0 --deterministic true \
          --precision "$precision" --no-eval --log-every 1 "${extra[@]}" \
          --metrics "$dir/$model.$precision.$device.jsonl"
      done
      # fp32: float32 rounding in another order; bf16: bf16's rounding.
      tol=1e-4
      [ "$precision" = bf16 ] && tol=1e-2
      rows losses "$model $precision: CUDA vs CPU" \
        "$dir/$model.$precision.cpu.jsonl" "$dir/$model.$precision.cuda.jsonl" "$tol"
    done
    rows same "$model fp32: graph vs eager" \
      "$dir/$model.fp32.cuda.jsonl" "$dir/$model.fp32.cuda-nograph.jsonl"
  done
}

item_attention_bench() {
  tc_log attention_bench.out tools/bench/attention_bench --iters 20
  rows attention "$LOGDIR/attention_bench.out" $?
}

# The same on the tensor-core kernels (attention_mma.cu; unverified until
# this runs), their correctness being cuda_device_test's CudaAttentionMmaTest.
item_attention_mma() {
  export TRAINC_CUDA_ATTENTION=mma
  tc_log attention_mma.out tools/bench/attention_bench --iters 20 --no-torch
  rows attention "$LOGDIR/attention_mma.out" $? "attention mma"
}

item_gpt2_bench() {
  tc_log gpu_bench_gpt.out tools/bench/gpu_bench --only gpt \
    --gpt_iters "${GPU_CHECK_GPT_ITERS:-10}"
  rows gpt "$LOGDIR/gpu_bench_gpt.out" $?
}

# A 4-step trace of GPT-2 small (bf16, micro-batch 16, kernel by kernel),
# the simulator's prediction on its bundled profile, and its calibration.
item_trace_calibrate() {
  local run=(dsl_examples/gpt2_small.train --gpus 1 --micro_batch 16 --accumulate 1
    --global_batch 16 --precision bf16)
  local trace=$WORK/out/gpt2_small_trace.json
  if ! tc_log trace_train.out tools/train "${run[@]}" --device cuda --steps 5 --trace-steps 4 \
    --trace "$trace" --no-eval --log-every 1; then
    row "gpt2_small: train --trace, 4 steps" "FAIL $(tail -1 "$LOGDIR/trace_train.out")" \
      "logs/trace_train.out"
  fi
  tc_log simulate.out tools/simulate/simulate "${run[@]}"
  tc_log simulate_calibrate.out tools/simulate/simulate "${run[@]}" --calibrate "$trace" \
    --write-profile "$WORK/out/gpt2_small_calibrated.profile"
  rows simulate "$LOGDIR/simulate.out" "$LOGDIR/simulate_calibrate.out"
  # viz takes the run's overrides from the trace.
  tc_log viz_trace.out tools/viz/viz "${run[0]}" --trace "$trace" \
    -o "$WORK/out/gpt2_small_trace.html"
  [ -f "$trace" ] && gzip -f "$trace"
}

# --- Setup: unpack, the device's libraries, the data, the environment.

setup() {
  local archive=${GPU_CHECK_ARCHIVE:-$ROOT/.device/gpu_check.tar.xz}
  PACK=${GPU_CHECK_PACK:-/tmp/gpu_check/pack}
  if [ -f "$archive" ] && { [ ! -f "$PACK/.unpacked" ] || [ "$archive" -nt "$PACK/.unpacked" ]; }; then
    # tar -J needs xz; Python's tarfile is the fallback.
    rm -rf "$PACK" && mkdir -p "$PACK" && { tar -xJf "$archive" -C "$PACK" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
        "$archive" "$PACK"; } && touch "$PACK/.unpacked" || {
      echo "run.sh: cannot unpack $archive into $PACK" >&2
      exit 1
    }
  fi
  if [ ! -f "$PACK/PACK_INFO" ]; then
    echo "run.sh: no pack: neither $archive nor $PACK/PACK_INFO. On the build machine run" \
      "tools/gpu_check/pack.sh, then carry .device (tools/gpu_check/README.md)." >&2
    exit 1
  fi
  WORK=/tmp/gpu_check/run.$(date +%Y%m%d-%H%M%S)
  LOGDIR=$WORK/logs
  mkdir -p "$LOGDIR" "$WORK/rows" "$WORK/out" "$WORK/shim"
  PY=$(command -v python3 || echo /usr/bin/python3)
  local notes=()
  info() { awk -v k="$1" '$1==k {$1=""; sub(/^ /, ""); print}' "$PACK/PACK_INFO"; }

  # glibc: the pack cannot bring its own.
  local have need
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  need=$(info glibc)
  if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    notes+=("FAIL: glibc $have here, the pack needs $need")
  else
    notes+=("glibc $have (needs $need)")
  fi
  # libstdc++: the machine's own when it is new enough, else the pack's.
  local ld=$PACK/lib sys_cxx abi
  need=$(info glibcxx)
  abi=$(info cxxabi)
  sys_cxx=$(ldconfig -p 2>/dev/null | awk '$1=="libstdc++.so.6" && /x86-64/ {print $NF; exit}')
  if [ -n "$sys_cxx" ] && grep -qa "GLIBCXX_$need" "$sys_cxx" && grep -qa "CXXABI_$abi" "$sys_cxx"; then
    notes+=("libstdc++ $sys_cxx")
  else
    ld=$ld:$PACK/lib/fallback
    notes+=("libstdc++ the pack's (the machine's lacks GLIBCXX_$need or CXXABI_$abi)")
  fi
  # The CUDA libraries: the toolkit's, the loader's cache, PyTorch's wheels.
  local candidates=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib)
  local wheels
  wheels=$("$PY" -c 'import nvidia, os; print("\n".join(os.path.join(r, d) for p in nvidia.__path__ for r, ds, _ in os.walk(p) for d in ds if d == "lib"))' 2>/dev/null)
  [ -n "$wheels" ] && mapfile -t -O "${#candidates[@]}" candidates <<<"$wheels"
  local lib dir found libs_note=()
  for lib in $(info device_libs); do
    found=""
    for dir in "${candidates[@]}"; do
      [ -e "$dir/$lib" ] && found=$dir && break
    done
    if [ -z "$found" ]; then
      found=$(ldconfig -p 2>/dev/null | awk -v n="$lib" '$1==n {print $NF; exit}')
      found=${found%/*}
    fi
    if [ -z "$found" ]; then
      libs_note+=("$lib MISSING")
    else
      libs_note+=("$lib ${found}")
      [[ ":$ld:" == *":$found:"* ]] || ld=$ld:$found
    fi
  done
  TRAINC_LD=$ld
  # "DIR: lib lib; DIR: lib" for the table.
  printf '%s\n' "${libs_note[@]}" | awk '{d[$2] = d[$2] " " $1; if (!($2 in o)) { o[$2] = ++n; k[n] = $2 } }
    END { for (i = 1; i <= n; i++) printf "%s%s:%s", (i > 1 ? "; " : ""), k[i], d[k[i]]; print "" }' >"$WORK/libs.txt"
  # The data the examples read, where their .train files say.
  local kind d
  while read -r kind d; do
    if [ ! -e "$d" ]; then
      mkdir -p "$(dirname "$d")" && cp -a "$PACK/data$d" "$d" || notes+=("FAIL: cannot install $d")
    fi
  done < <(gc_manifest "$PACK/MANIFEST" data)
  local IFS=';'
  echo "${notes[*]}" >"$WORK/setup.txt"
  unset IFS
  # PyTorch (started by the benches) sees the machine's libraries, not ours.
  printf '#!/bin/sh\nif [ -n "$GPU_CHECK_LD_LIBRARY_PATH" ]; then export LD_LIBRARY_PATH="$GPU_CHECK_LD_LIBRARY_PATH"; else unset LD_LIBRARY_PATH; fi\nexec "%s" "$@"\n' "$PY" >"$WORK/shim/python3"
  chmod +x "$WORK/shim/python3"
  export GPU_CHECK_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
  export PATH=$WORK/shim:$PATH
  # Line-buffered output: a program stopped at its limit leaves its lines.
  LINEBUF=""
  command -v stdbuf >/dev/null && LINEBUF="stdbuf -oL -eL"
  export PACK WORK LOGDIR PY TRAINC_LD LINEBUF
  export TRAINC_CUDA_PLUGIN=$PACK/runtime/cuda/libtrainc_cuda.so
  export PYTHONUNBUFFERED=1
}

# --- The harness.

run_item() {
  local name=$1 limit=$2 now left t start rc secs
  now=$(date +%s)
  left=$((DEADLINE - now - RESERVE_S))
  local rows_file=$WORK/rows/$name.tsv
  : >"$rows_file"
  if [ "$left" -lt 10 ]; then
    printf '%s\tFAIL not run: the %ss budget is spent\t\t-\n' "$name" "$BUDGET_S" >>"$TABLE"
    return
  fi
  t=$((limit < left ? limit : left))
  echo "[gpu_check] $name (limit ${t}s)"
  start=$(date +%s.%N)
  (cd "$PACK" && GC_ROWS=$rows_file GC_ITEM_END=$(($(date +%s) + t)) \
    timeout -k 10 "$t" bash "$HERE/run.sh" --item "$name") \
    >"$LOGDIR/$name.log" 2>&1
  rc=$?
  secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.0fs", b - a}')
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    printf '%s\tFAIL timed out after %ss\tlogs/%s.log\n' "$name" "$t" "$name" >>"$rows_file"
  elif [ ! -s "$rows_file" ]; then
    printf '%s\tFAIL exit %s, no result\tlogs/%s.log: %s\n' "$name" "$rc" "$name" \
      "$(tail -1 "$LOGDIR/$name.log" | tr '\t' ' ' | cut -c1-120)" >>"$rows_file"
  fi
  # The item's time on its first row.
  awk -F'\t' -v OFS='\t' -v s="$secs" '{print $1, $2, $3, (NR == 1 ? s : "")}' "$rows_file" >>"$TABLE"
}

print_table() {
  awk -F'\t' '
    { for (i = 1; i <= 4; i++) { c[NR, i] = $i; if (length($i) > w[i]) w[i] = length($i) } }
    END {
      # Cells cut here (the device tool returns the last 12,000 characters);
      # table.tsv in the logs has them whole.
      if (w[1] < 4) w[1] = 4; if (w[2] > 110) w[2] = 110; if (w[3] > 100) w[3] = 100
      fmt = "%-" w[1] "s | %-" w[2] "s | %-" w[3] "s | %s\n"
      printf fmt, "item", "result", "reference", "time"
      for (r = 1; r <= NR; r++)
        printf fmt, c[r, 1], substr(c[r, 2], 1, 110), substr(c[r, 3], 1, 100), c[r, 4]
    }' "$TABLE"
}

check_pack() {
  local pack=$1 problems=() spec name limit needs path used=" "
  [ -f "$pack/MANIFEST" ] || {
    echo "run.sh --check-pack: $pack/MANIFEST is missing"
    return 1
  }
  for spec in "${ITEMS[@]}"; do
    read -r name limit needs <<<"$spec"
    declare -F "item_$name" >/dev/null || problems+=("item $name has no function item_$name")
    for path in $needs; do
      [ -e "$pack/$path" ] || problems+=("item $name needs $path, which the pack lacks")
      used+="$path "
    done
  done
  while read -r kind a b; do
    path=${b:-$a}
    [ "$kind" = data ] && path=data$a
    [[ "$used" == *" $path "* ]] || problems+=("the pack's $kind $path is used by no item")
  done < <(gc_manifest "$pack/MANIFEST" exe gtest plugin file data)
  if [ ${#problems[@]} -gt 0 ]; then
    printf 'run.sh --check-pack: %s\n' "${problems[@]}"
    return 1
  fi
}

main() {
  case "${1:-}" in
    --item)
      "item_$2"
      return
      ;;
    --list)
      printf '%s\n' "${ITEMS[@]}"
      return
      ;;
    --check-pack)
      check_pack "$2"
      return
      ;;
    "") ;;
    *)
      sed -n '2,/^set /p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
      return 2
      ;;
  esac
  local begin
  begin=$(date +%s)
  DEADLINE=$((begin + BUDGET_S))
  setup
  TABLE=$WORK/table.tsv
  local notes result=pass
  notes=$(sed 's/;/; /g' "$WORK/setup.txt")
  [[ "$notes" == *FAIL* ]] && result="FAIL ${notes#*FAIL: }"
  printf 'setup\t%s\t%s\t%ss\n' "$result" "$notes" "$(($(date +%s) - begin))" >"$TABLE"
  local spec name limit needs
  for spec in "${ITEMS[@]}"; do
    read -r name limit needs <<<"$spec"
    if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $name "* ]]; then
      continue
    fi
    run_item "$name" "$limit"
  done
  print_table | tee "$WORK/table.txt"
  local failed
  failed=$(awk -F'\t' '$2 ~ /^FAIL/' "$TABLE" | wc -l)
  echo "[gpu_check] $failed failing row(s); $(($(date +%s) - begin))s in all; logs in $WORK"
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
    cp "$WORK/table.txt" "$OUT/"
    tar -czf "$OUT/logs.tar.gz" -C "$WORK" logs table.tsv
    cp "$WORK"/out/* "$OUT/" 2>/dev/null
  fi
  [ "$failed" -eq 0 ]
}

main "$@"
