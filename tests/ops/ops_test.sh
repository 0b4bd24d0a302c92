#!/usr/bin/env bash
# make ops-test: every tests/ops check, each with its own temp dir, processes
# and ports; prints one PASS/FAIL line per test, then "N passed, N failed".
#
#   tests/ops/ops_test.sh [BIN_DIR]   (default build/: kvserve, kvctl)
set -uo pipefail
cd "$(dirname "$0")/../.."
BIN_DIR=${1:-build}
START=$SECONDS

TESTS=(
  "prometheus: promtool checks, live scrape, alert rules, dashboard|tests/ops/prometheus_test.sh $BIN_DIR"
  "k8s: manifests against the Kubernetes schemas|tests/ops/k8s_test.sh $BIN_DIR"
  "router: nginx session affinity over 3 replicas|tests/ops/router_test.py $BIN_DIR"
)
passed=0
failed=0
failures=()
for entry in "${TESTS[@]}"; do
  name=${entry%%|*}
  command=${entry#*|}
  t0=$SECONDS
  echo "=== $name"
  # Each test is bounded; its own traps stop what it started.
  if timeout -k 10 600 $command; then
    echo "--- PASS $name ($((SECONDS - t0))s)"
    passed=$((passed + 1))
  else
    echo "--- FAIL $name ($((SECONDS - t0))s)"
    failed=$((failed + 1))
    failures+=("$name")
  fi
done
echo "ops-test: $((SECONDS - START))s"
for f in "${failures[@]}"; do echo "failed: $f"; done
echo "$passed passed, $failed failed"
[[ $failed == 0 ]]
