#!/usr/bin/env bash
# tools/mutate.sh: would the tests notice a small, realistic bug?
#
# Applies each mutation of a list, one at a time, to a scratch copy of this
# working tree (never the tree itself), runs the tests that cover the
# mutated file there, and prints whether they failed (CAUGHT) or passed
# (MISSED), then a summary line. Add a mutation here whenever a bug slipped
# past the tests, and run it on what you change.
#
#   tools/mutate.sh                 # every mutation below
#   tools/mutate.sh -m 'sampler|idx' # those whose name matches
#   tools/mutate.sh -n              # list them
#   tools/mutate.sh -l my.list      # mutations from a file (same format)
#
# The scratch copy lives in $MUTATE_SCRATCH (default /tmp/trainc-mutate):
# the working tree's tracked and untracked (not ignored) files, copied
# afresh on every run. Bazel runs there, so it has its own output base and
# server (shut down at the end); its cache survives between runs, so only
# the first run builds everything. Before the mutations, the covering tests
# run twice on the unmutated copy: a test that fails both times is a setup
# error; one that fails once is flaky, and its failures never count as a
# catch (a flaky test would make every mutant look caught).
#
# List format: one mutation per line, four fields separated by " :: ":
#   name :: file :: sed expression (sed -E is not used) :: test targets
# Blank lines and lines starting with # are ignored.
#
# Results: CAUGHT (a test that passed both baseline runs failed or timed
# out), MISSED (all passed, or only flaky ones failed), NOBUILD
# (the mutant does not compile: not a test result, not counted), NOAPPLY
# (the sed expression changed nothing: the list is stale). Exit status 0
# when every counted mutation was caught, 1 when one was missed, 2 on a
# setup error (a stale mutation, or tests failing without any mutation).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SCRATCH="${MUTATE_SCRATCH:-/tmp/trainc-mutate}"
TREE="$SCRATCH/trainc"
LOGS="$SCRATCH/logs"
LIST=""
MATCH=""
LIST_ONLY=0
TEST_TIMEOUT="${MUTATE_TEST_TIMEOUT:-240}"

usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while getopts "l:m:nh" opt; do
  case "$opt" in
    l) LIST="$OPTARG" ;;
    m) MATCH="$OPTARG" ;;
    n) LIST_ONLY=1 ;;
    h) usage 0 ;;
    *) usage 2 ;;
  esac
done

# --- the mutations -----------------------------------------------------------
# The first eleven are the bugs of issue 16 (four once passed every test,
# the others were bugs the tests could not see); the rest are a fresh
# sample.
read -r -d '' DEFAULT_LIST <<'EOF' || true
# name :: file :: sed expression :: tests
sampler-ignores-seed :: runtime/data/sampler.cc :: s/SplitMix64 rng(static_cast<uint64_t>(seed_) + static_cast<uint64_t>(epoch));/SplitMix64 rng(static_cast<uint64_t>(epoch));/ :: //runtime/data:sampler_test
sampler-seed-times-epoch :: runtime/data/sampler.cc :: s/SplitMix64 rng(static_cast<uint64_t>(seed_) + static_cast<uint64_t>(epoch));/SplitMix64 rng(static_cast<uint64_t>(seed_) * static_cast<uint64_t>(epoch));/ :: //runtime/data:sampler_test
idx-no-dimension-bound :: runtime/data/idx.cc :: s/if (d > kMaxDim) {/if (false \&\& d > kMaxDim) {/ :: //runtime/data:idx_test
checkpoint-written-in-place :: runtime/checkpoint/safetensors.cc :: s/std::string tmp = path + ".tmp.XXXXXX";/std::string tmp = path;/; s/int fd = ::mkstemp(tmp.data());/int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);/ :: //runtime/checkpoint:checkpoint_test //runtime/checkpoint:safetensors_test
checkpoint-temp-file-left-behind :: runtime/checkpoint/safetensors.cc :: s/::rename(tmp.c_str(), path.c_str())/::link(tmp.c_str(), path.c_str())/ :: //runtime/checkpoint:safetensors_test
gloo-first-piece-reduced-repeatedly :: runtime/comm/gloo/gloo_communicator.cc :: s/it->second->set_data(data + begin);/it->second->set_data(data);/ :: //runtime/comm/gloo:gloo_communicator_test
loss-scale-per-micro-batch :: compiler/planner/planner.cc :: s/1.0 \/ (static_cast<double>(spec.train.global_batch) \*/1.0 \/ (static_cast<double>(spec.train.micro_batch) */ :: //tests/e2e:equivalence_test
launcher-watchdog-off :: runtime/launch/launcher.cc :: s/if (options_.heartbeat_timeout <= absl::ZeroDuration() || stopping_) return;/if (true || stopping_) return;/ :: //runtime/launch:launcher_test
executor-comm-stream-skips-waits :: runtime/exec/executor.cc :: s/^    RETURN_IF_ERROR(device_->WaitEvent(instr.stream, e));/    if (instr.stream != Stream::kComm) RETURN_IF_ERROR(device_->WaitEvent(instr.stream, e));/ :: //runtime/exec:executor_test
executor-no-overlap-hold-skipped :: runtime/exec/executor.cc :: s/^    return device_->WaitEvent(Stream::kComm, hold_event_);/    return absl::OkStatus();/ :: //runtime/exec:executor_test
executor-all-reduce-done-recorded-on-compute :: runtime/exec/executor.cc :: s/^    RETURN_IF_ERROR(device_->RecordEvent(instr.stream, e));/    RETURN_IF_ERROR(device_->RecordEvent(Stream::kCompute, e));/ :: //runtime/exec:executor_test
# --- a fresh sample ---
executor-compute-stream-skips-waits :: runtime/exec/executor.cc :: s/^    RETURN_IF_ERROR(device_->WaitEvent(instr.stream, e));/    if (instr.stream != Stream::kCompute) RETURN_IF_ERROR(device_->WaitEvent(instr.stream, e));/ :: //runtime/exec:executor_test
executor-loss-of-one-micro-step :: runtime/exec/executor.cc :: s/losses_ + r.micro, sizeof(float)/losses_, sizeof(float)/ :: //runtime/exec:executor_test
sampler-micro-batch-order :: runtime/data/sampler.cc :: s/const int64_t m = int64_t{rank} \* config_.accumulate + micro;/const int64_t m = int64_t{micro} * config_.world_size + rank;/ :: //runtime/data:sampler_test
sampler-keeps-partial-batch :: runtime/data/sampler.cc :: s/steps_per_epoch_(num_examples \/ global_batch())/steps_per_epoch_((num_examples + global_batch() - 1) \/ global_batch())/ :: //runtime/data:sampler_test
gloo-skips-an-element-per-piece :: runtime/comm/gloo/gloo_communicator.cc :: s/begin < count; begin += kMaxRingFloats)/begin < count; begin += kMaxRingFloats + 1)/ :: //runtime/comm/gloo:gloo_communicator_test
idx-short-labels-accepted :: runtime/data/idx.cc :: s/if (got != dims\[0\]) {/if (got > dims[0]) {/ :: //runtime/data:idx_test
dataset-scale-in-float :: runtime/data/dataset.cc :: s/features\[i\] = static_cast<float>(images.pixels\[i\] \* scale);/features[i] = images.pixels[i] * static_cast<float>(scale);/ :: //runtime/data:idx_test
checkpoint-step-saved-as-epoch :: runtime/checkpoint/checkpoint.cc :: s/{"step", absl::StrCat(state.step)}/{"step", absl::StrCat(state.epoch)}/ :: //runtime/checkpoint:checkpoint_test
launcher-never-escalates-to-sigkill :: runtime/launch/launcher.cc :: s/^        Signal(SIGKILL);$/        Signal(SIGTERM);/ :: //runtime/launch:launcher_test
adamw-no-bias-correction-of-v :: runtime/cpu/kernels.cc :: s/const double bc2 = 1.0 - std::pow(h.beta2, static_cast<double>(h.step));/const double bc2 = 1.0;/ :: //runtime/exec:executor_test
EOF

declare -a NAMES FILES EXPRS TARGETS
load_list() {
  local text line name file expr targets
  if [[ -n "$LIST" ]]; then text="$(cat "$LIST")"; else text="$DEFAULT_LIST"; fi
  while IFS= read -r line; do
    [[ -z "${line// }" || "$line" =~ ^[[:space:]]*# ]] && continue
    name="${line%% :: *}"; line="${line#* :: }"
    file="${line%% :: *}"; line="${line#* :: }"
    expr="${line%% :: *}"; targets="${line#* :: }"
    if [[ -z "$name" || -z "$file" || -z "$expr" || -z "$targets" || "$targets" == "$expr" ]]; then
      echo "mutate.sh: bad list line: $name" >&2; exit 2
    fi
    if [[ -n "$MATCH" && ! "$name" =~ $MATCH ]]; then continue; fi
    NAMES+=("$name"); FILES+=("$file"); EXPRS+=("$expr"); TARGETS+=("$targets")
  done <<< "$text"
}
load_list

if [[ ${#NAMES[@]} -eq 0 ]]; then echo "mutate.sh: no mutation matches" >&2; exit 2; fi
if [[ $LIST_ONLY -eq 1 ]]; then
  for i in "${!NAMES[@]}"; do
    printf '%-44s %-42s %s\n' "${NAMES[$i]}" "${FILES[$i]}" "${TARGETS[$i]}"
  done
  exit 0
fi

# --- the scratch copy --------------------------------------------------------
mkdir -p "$SCRATCH" "$LOGS"
rm -f "$LOGS"/*.log
case "$TREE" in /tmp/*|"$SCRATCH"/*) ;; *) echo "refusing to clean $TREE" >&2; exit 2 ;; esac
if [[ "$(cd "$ROOT" && pwd -P)" == "$(mkdir -p "$TREE" && cd "$TREE" && pwd -P)" ]]; then
  echo "mutate.sh: the scratch copy would be the working tree itself" >&2; exit 2
fi
echo "mutate.sh: copying $ROOT to $TREE"
# Same path every run: Bazel's cache (keyed by the workspace path) is kept.
find "$TREE" -mindepth 1 -maxdepth 1 ! -name 'bazel-*' -exec rm -rf {} +
(cd "$ROOT" && git ls-files -z -c -o --exclude-standard |
   tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | (cd "$TREE" && tar -xf -)

BAZEL=(bazel)
cleanup() {
  # Put back any file left mutated by an interruption, and stop the
  # scratch copy's Bazel server (the working tree's is not touched).
  if [[ -n "${CURRENT:-}" && -f "$SCRATCH/pristine" ]]; then
    cp "$SCRATCH/pristine" "$TREE/$CURRENT"
  fi
  (cd "$TREE" && "${BAZEL[@]}" shutdown >/dev/null 2>&1) || true
}
trap cleanup EXIT

run_tests() {  # log, targets...  -> bazel's exit code
  local log="$1"; shift
  (cd "$TREE" && timeout 1500 "${BAZEL[@]}" test --nocache_test_results \
     --test_output=errors --test_timeout="$TEST_TIMEOUT" --noshow_progress \
     "$@") >"$log" 2>&1
}

failing_targets() {  # log -> the targets that failed or timed out, one per line
  grep -oE '^//[^ ]+ +(FAILED|TIMEOUT)' "$1" | awk '{print $1}' | sort -u || true
}

# --- baseline: the covering tests, twice, without any mutation ---------------
ALL_TARGETS="$(printf '%s\n' "${TARGETS[@]}" | tr ' ' '\n' | sed '/^$/d' | sort -u | tr '\n' ' ')"
echo "mutate.sh: baseline (no mutation, twice): $ALL_TARGETS"
start=$(date +%s)
for run in 1 2; do
  set +e
  run_tests "$LOGS/baseline$run.log" $ALL_TARGETS
  rc=$?
  set -e
  if [[ $rc -ne 0 && $rc -ne 3 ]]; then
    echo "mutate.sh: the baseline does not build or run; see $LOGS/baseline$run.log" >&2
    exit 2
  fi
done
BROKEN="$(comm -12 <(failing_targets "$LOGS/baseline1.log") <(failing_targets "$LOGS/baseline2.log"))"
FLAKY="$(comm -3 <(failing_targets "$LOGS/baseline1.log") <(failing_targets "$LOGS/baseline2.log") |
         tr -d '\t')"
if [[ -n "$BROKEN" ]]; then
  echo "mutate.sh: these fail without any mutation (see $LOGS/baseline*.log):" >&2
  echo "$BROKEN" >&2
  exit 2
fi
if [[ -n "$FLAKY" ]]; then
  echo "mutate.sh: flaky (failed one of two unmutated runs), not counted as catching:" \
       $FLAKY
fi
echo "mutate.sh: baseline passed in $(( $(date +%s) - start )) s"

# --- the mutations -----------------------------------------------------------
caught=0; missed=0; other=0; missed_names=(); stale=0
printf '\n%-3s %-8s %5s  %-44s %s\n' "#" "result" "secs" "mutation" "failing targets"
for i in "${!NAMES[@]}"; do
  name="${NAMES[$i]}"; file="${FILES[$i]}"; expr="${EXPRS[$i]}"
  read -r -a targets <<< "${TARGETS[$i]}"
  log="$LOGS/$(printf '%02d' $((i + 1)))-$name.log"
  if [[ ! -f "$TREE/$file" ]]; then
    printf '%-3s %-8s %5s  %-44s %s\n' $((i + 1)) NOAPPLY - "$name" "($file is missing)"
    other=$((other + 1)); stale=1; continue
  fi
  cp "$TREE/$file" "$SCRATCH/pristine"
  CURRENT="$file"
  sed -i -e "$expr" "$TREE/$file"
  if cmp -s "$SCRATCH/pristine" "$TREE/$file"; then
    printf '%-3s %-8s %5s  %-44s %s\n' $((i + 1)) NOAPPLY - "$name" "(the sed expression matches nothing in $file)"
    other=$((other + 1)); stale=1; CURRENT=""; continue
  fi
  diff -u "$SCRATCH/pristine" "$TREE/$file" > "$log" || true
  t0=$(date +%s)
  set +e
  run_tests "$log.bazel" "${targets[@]}"
  rc=$?
  set -e
  cat "$log.bazel" >> "$log"; rm -f "$log.bazel"
  cp "$SCRATCH/pristine" "$TREE/$file"
  CURRENT=""
  secs=$(( $(date +%s) - t0 ))
  failing="$(grep -oE '^//[^ ]+ +(FAILED|TIMEOUT)' "$log" | awk '{print $1 "(" $2 ")"}' | tr '\n' ' ' || true)"
  if [[ $rc -eq 3 && -n "$FLAKY" ]] &&
     [[ -z "$(comm -23 <(failing_targets "$log") <(echo "$FLAKY" | tr ' ' '\n' | sort -u))" ]]; then
    rc=0  # only flaky tests failed: the reliable ones did not see it
    failing="(only flaky: $failing)"
  fi
  case $rc in
    0) result=MISSED; missed=$((missed + 1)); missed_names+=("$name") ;;
    3) result=CAUGHT; caught=$((caught + 1)) ;;
    1) result=NOBUILD; other=$((other + 1)); failing="(does not compile)" ;;
    *) result="ERROR$rc"; other=$((other + 1)); failing="(see $log)" ;;
  esac
  printf '%-3s %-8s %5s  %-44s %s\n' $((i + 1)) "$result" "$secs" "$name" "$failing"
done

counted=$((caught + missed))
pct=0; [[ $counted -gt 0 ]] && pct=$(( 100 * caught / counted ))
echo
echo "mutate.sh: $caught of $counted mutations caught ($pct%), $missed missed${missed_names:+: ${missed_names[*]}}, $other not counted; logs in $LOGS"
[[ $stale -ne 0 ]] && exit 2
[[ $missed -ne 0 ]] && exit 1
exit 0
