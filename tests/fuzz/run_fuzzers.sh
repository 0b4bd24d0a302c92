#!/bin/bash
# run_fuzzers.sh BUILD_DIR SECONDS FUZZER...: runs each BUILD_DIR/fuzz/<name>_fuzzer
# for SECONDS on its working corpus BUILD_DIR/fuzz/corpus/<name> (kept
# between runs, so coverage accumulates; seeded from tests/fuzz/corpus/<name>
# and fuzz_seeds' generated inputs), then prints per fuzzer the executions,
# exec/s and whether it crashed, and the totals. Crash inputs are saved as
# BUILD_DIR/fuzz/artifacts/<name>-crash-<sha1> (reproduce: run the fuzzer on
# that file). Exits 1 when any fuzzer crashed.
set -u
build=$1
seconds=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
shared=${KVSERVE_SHARED_DIR:-$src/../../../shared}
bin=$build/fuzz
mkdir -p "$bin/artifacts" "$bin/logs" "$bin/seeds"
"$bin/fuzz_seeds" "$bin/seeds" "$shared" >/dev/null || exit 1

# Longest input each fuzzer is given (its seeds are smaller).
max_len() {
  case $1 in
    gguf) echo 65536 ;;
    llama2c | jinja) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

export OMP_WAIT_POLICY=passive OMP_NUM_THREADS=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
total_execs=0
crashed=0
summary=""
for name in "$@"; do
  corpus=$bin/corpus/$name
  mkdir -p "$corpus"
  for seeds in "$src/corpus/$name" "$bin/seeds/$name"; do
    [ -d "$seeds" ] && cp -n "$seeds"/* "$corpus"/ 2>/dev/null
  done
  log=$bin/logs/$name.log
  "$bin/${name}_fuzzer" -max_total_time="$seconds" -print_final_stats=1 \
    -max_len="$(max_len "$name")" -timeout=30 -rss_limit_mb=2560 \
    -artifact_prefix="$bin/artifacts/$name-" "$corpus" >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  if [ -z "$execs" ]; then  # a crash ends the run before the final stats
    execs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
  fi
  execs=${execs:-0}
  rate=${rate:-0}
  total_execs=$((total_execs + execs))
  if [ $rc -eq 0 ]; then
    result=ok
  else
    result="CRASHED (rc $rc; $(ls -t "$bin/artifacts/$name-"* 2>/dev/null | head -1); log $log)"
    crashed=$((crashed + 1))
  fi
  line=$(printf '%-18s %12s execs %8s exec/s  %s' "$name" "$execs" "$rate" "$result")
  echo "fuzz: $line"
  summary+="$line"$'\n'
done
echo "---"
printf '%s' "$summary"
printf '%-18s %12s execs in %s s per fuzzer; %d crashed\n' total "$total_execs" \
  "$seconds" "$crashed"
[ "$crashed" -eq 0 ]
