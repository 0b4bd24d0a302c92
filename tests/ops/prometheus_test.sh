#!/usr/bin/env bash
# Prometheus end to end, with Debian's prometheus and promtool:
#   - promtool check config / check rules / test rules on deploy/prometheus/;
#   - a kvserve on free loopback ports; promtool check metrics on its
#     /metrics (with traffic, so every family has samples);
#   - a Prometheus server on 127.0.0.1 (free port, temp storage, 1 s scrapes)
#     with a config generated from deploy/prometheus/prometheus.yml pointing at
#     that kvserve; 3 generations of known max_tokens (--ignore_eos, so the
#     counts are exact) with build/kvctl, then Prometheus' HTTP API must show
#     the TTFT histogram count, generated tokens, KV capacity and KV bytes in
#     use that the test caused, the target up and the alert rules loaded
#     and silent;
#   - tests/ops/dashboard_test.py: every Grafana panel query names metrics and
#     labels the live kvserve exports and returns data from this Prometheus.
#
#   tests/ops/prometheus_test.sh [BIN_DIR]   (default build/)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ops/lib.sh
BIN_DIR=$(realpath "${1:-build}")
KVCTL="$BIN_DIR/kvctl"
ops_init

for tool in prometheus promtool; do
  command -v "$tool" >/dev/null || ops_fail "$tool missing (make ops-test installs Debian's prometheus)"
done

# --- static checks of deploy/prometheus -------------------------------------
for config in deploy/prometheus/prometheus.yml deploy/prometheus/prometheus-kubernetes.yml; do
  promtool check config "$config" >"$OPS_TMP/check.log" 2>&1 ||
    { cat "$OPS_TMP/check.log" >&2; ops_fail "promtool check config $config"; }
done
promtool check rules deploy/prometheus/alerts.yml >"$OPS_TMP/check.log" 2>&1 ||
  { cat "$OPS_TMP/check.log" >&2; ops_fail "promtool check rules"; }
(cd deploy/prometheus && promtool test rules alerts_test.yml) >"$OPS_TMP/check.log" 2>&1 ||
  { cat "$OPS_TMP/check.log" >&2; ops_fail "promtool test rules (alert unit tests)"; }
ops_log "promtool: configs, rules and alert unit tests pass"

# --- kvserve ----------------------------------------------------------------
KV_CACHE_BYTES=40000000
ops_start_kvserve "$BIN_DIR" kvserve --kv_cache_bytes=$KV_CACHE_BYTES --threads=2
INFO=$("$KVCTL" --addr="$KV_GRPC" info)
CAPACITY=$(awk '/^kv_cache_capacity_bytes:/{print $2}' <<<"$INFO")
BYTES_PER_TOKEN=$(awk '/^kv_bytes_per_token:/{print $2}' <<<"$INFO")
BLOCK_TOKENS=$(awk '/^kv_block_tokens:/{print $2}' <<<"$INFO")
[[ -n "$CAPACITY" && "$CAPACITY" -le "$KV_CACHE_BYTES" && "$CAPACITY" -gt 0 ]] ||
  ops_fail "kvctl info capacity '$CAPACITY' for --kv_cache_bytes=$KV_CACHE_BYTES"

# --- Prometheus -------------------------------------------------------------
PROM_PORT=$(ops_free_port)
PROM="http://127.0.0.1:$PROM_PORT"
"$PY" - deploy/prometheus/prometheus.yml "$OPS_TMP/prometheus.yml" "$KV_METRICS" <<'PYEOF'
import os, sys, yaml
src, dst, target = sys.argv[1:]
config = yaml.safe_load(open(src))
config["global"]["scrape_interval"] = "1s"
config["global"]["evaluation_interval"] = "1s"
config["rule_files"] = [os.path.join(os.path.dirname(os.path.abspath(src)), f)
                        for f in config["rule_files"]]
jobs = [j for j in config["scrape_configs"] if j["job_name"] == "kvserve"]
assert len(jobs) == 1, "deploy's config has one kvserve job"
jobs[0]["static_configs"][0]["targets"] = [target]
yaml.safe_dump(config, open(dst, "w"))
PYEOF
promtool check config "$OPS_TMP/prometheus.yml" >/dev/null
prometheus --config.file="$OPS_TMP/prometheus.yml" \
  --storage.tsdb.path="$OPS_TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" \
  --web.console.templates=/dev/null --web.console.libraries=/dev/null \
  >"$OPS_TMP/prometheus.log" 2>&1 &
OPS_PIDS+=($!)
PROM_PID=$!
ops_wait 60 "Prometheus ready on $PROM" ops_http_get "$PROM/-/ready"
ops_log "prometheus: pid $PROM_PID on $PROM scraping $KV_METRICS"

# --- traffic: 3 generations of known length -----------------------------------
MAX_TOKENS=(5 7 11)
SESSION=$("$KVCTL" --addr="$KV_GRPC" session create "Once upon a time" | tail -n1)
for i in 0 1 2; do
  args=(--addr="$KV_GRPC" generate --json --ignore_eos --max_tokens="${MAX_TOKENS[$i]}")
  # The last turn continues a session, so some KV stays in use afterwards.
  ((i == 2)) && args+=(--session="$SESSION")
  timeout 60 "$KVCTL" "${args[@]}" " and then" >"$OPS_TMP/gen$i.jsonl"
done
# One NOT_FOUND, so the dashboard's error panel has a series.
"$KVCTL" --addr="$KV_GRPC" session get 00000000000000000000000000000000 >/dev/null 2>&1 || true
SESSION_TOKENS=$("$PY" - "$OPS_TMP/gen2.jsonl" <<'PYEOF'
import json, sys
final = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][-1]
print(final["usage"]["prompt_tokens"] + final["usage"]["generated_tokens"])
PYEOF
)
GENERATED=$((5 + 7 + 11))
ops_log "traffic: 3 generations, $GENERATED tokens; session of $SESSION_TOKENS tokens"

# --- the exposition itself -------------------------------------------------------
ops_http_get "http://$KV_METRICS/metrics" >"$OPS_TMP/metrics.txt"
promtool check metrics <"$OPS_TMP/metrics.txt" >"$OPS_TMP/lint.log" 2>&1 ||
  { cat "$OPS_TMP/lint.log" >&2; ops_fail "promtool check metrics rejects kvserve's /metrics"; }
ops_log "promtool check metrics: kvserve's exposition is clean"

# --- what Prometheus saw -------------------------------------------------------
"$PY" - "$PROM" "$GENERATED" "$CAPACITY" "$SESSION_TOKENS" "$BLOCK_TOKENS" "$BYTES_PER_TOKEN" <<'PYEOF'
import json, math, sys, time, urllib.parse, urllib.request
prom, generated, capacity, session_tokens, block_tokens, bytes_per_token = sys.argv[1:]
generated, capacity, session_tokens = int(generated), int(capacity), int(session_tokens)
block_bytes = int(block_tokens) * int(bytes_per_token)
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

def api(path, **params):
    url = f"{prom}/api/v1/{path}?" + urllib.parse.urlencode(params)
    with opener.open(url, timeout=10) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]

def value(expr):
    result = api("query", query=expr)["result"]
    return None if not result else float(result[0]["value"][1])

# KV positions of the session: all its tokens, or all but the last sampled one
# (whose K/V is written when it is fed back): either fills the same blocks.
want_used = {math.ceil(n / int(block_tokens)) * block_bytes
             for n in (session_tokens - 1, session_tokens)}
checks = {
    'up{job="kvserve"}': lambda v: v == 1,
    "kvserve_time_to_first_token_seconds_count": lambda v: v == 3,
    "kvserve_inter_token_latency_seconds_count": lambda v: v == generated - 3,
    "kvserve_generated_tokens_total": lambda v: v == generated,
    "kvserve_kv_cache_capacity_bytes": lambda v: v == capacity,
    "kvserve_kv_cache_used_bytes": lambda v: v in want_used,
    'kvserve_sessions{tier="ram"}': lambda v: v == 1,
    'kvserve_request_duration_seconds_count{method="Generate",code="OK"}': lambda v: v == 3,
    "process_resident_memory_bytes": lambda v: v > 0,
}
deadline = time.time() + 30
while True:
    got = {expr: value(expr) for expr in checks}
    bad = {e: v for e, v in got.items() if v is None or not checks[e](v)}
    if not bad:
        break
    if time.time() > deadline:
        sys.exit(f"Prometheus disagrees with the traffic after 30 s: {bad} "
                 f"(want generated={generated}, capacity={capacity}, used in {want_used})")
    time.sleep(0.5)
for e, v in got.items():
    print(f"  prometheus: {e} = {v:g}", file=sys.stderr)

# The alert rules from deploy/ are loaded, and a healthy server fires none.
groups = api("rules")["groups"]
rules = {r["name"]: r for g in groups for r in g["rules"] if r["type"] == "alerting"}
want = {"KvserveReplicaDown", "KvserveKvCacheNearlyFull", "KvserveRequestsRejected",
        "KvserveTimeToFirstTokenP99High"}
assert want <= set(rules), f"alert rules loaded: {sorted(rules)}"
firing = [n for n, r in rules.items() if r["state"] != "inactive"]
assert not firing, f"alerts pending/firing on a healthy server: {firing}"
print(f"  prometheus: {len(rules)} alert rules loaded, none firing", file=sys.stderr)
PYEOF
ops_log "Prometheus: TTFT count, generated tokens, KV capacity and KV used match the traffic"

# --- the Grafana dashboard against the live server and this Prometheus ----------
"$PY" tests/ops/dashboard_test.py deploy/grafana/kvserve-dashboard.json \
  --metrics_url="http://$KV_METRICS/metrics" --prometheus_url="$PROM"
ops_log "prometheus_test: PASS"
