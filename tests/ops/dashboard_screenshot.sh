#!/usr/bin/env bash
# Renders deploy/grafana/dashboard.png: a kvserve and a Prometheus on loopback,
# ~2 minutes of mixed traffic from kvctl, then deploy/grafana/preview.html
# (every panel of the Grafana dashboard, drawn from that live Prometheus)
# captured by Debian's headless Chromium. Not part of make test.
#
#   tests/ops/dashboard_screenshot.sh [BIN_DIR] [OUT.png] [TRAFFIC_SECONDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ops/lib.sh
BIN_DIR=$(realpath "${1:-build}")
OUT=$(realpath -m "${2:-deploy/grafana/dashboard.png}")
TRAFFIC_SECONDS=${3:-120}
KVCTL="$BIN_DIR/kvctl"
ops_init
command -v chromium >/dev/null || ops_fail "apt-get install chromium"

ops_start_kvserve "$BIN_DIR" kvserve --threads=2 --kv_cache_bytes=8000000 \
  --max_queued_requests=2 --max_running=2
PROM_PORT=$(ops_free_port)
"$PY" - deploy/prometheus/prometheus.yml "$OPS_TMP/prometheus.yml" "$KV_METRICS" <<'PYEOF'
import os, sys, yaml
src, dst, target = sys.argv[1:]
c = yaml.safe_load(open(src))
c["global"]["scrape_interval"] = c["global"]["evaluation_interval"] = "2s"
c["rule_files"] = [os.path.join(os.path.dirname(os.path.abspath(src)), f) for f in c["rule_files"]]
c["scrape_configs"][0]["static_configs"][0]["targets"] = [target]
yaml.safe_dump(c, open(dst, "w"))
PYEOF
prometheus --config.file="$OPS_TMP/prometheus.yml" --storage.tsdb.path="$OPS_TMP/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" >"$OPS_TMP/prometheus.log" 2>&1 &
OPS_PIDS+=($!)
ops_wait 60 Prometheus ops_http_get "http://127.0.0.1:$PROM_PORT/-/ready"

ops_log "traffic for ${TRAFFIC_SECONDS}s"
end=$((SECONDS + TRAFFIC_SECONDS))
worker() {
  local n=0 sid
  while ((SECONDS < end)); do
    n=$((n + 1))
    sid=$("$KVCTL" --addr="$KV_GRPC" session create "Worker $1 turn $n" 2>/dev/null | tail -n1) || true
    for _ in 1 2 3; do
      timeout 30 "$KVCTL" --addr="$KV_GRPC" generate --session="$sid" --ignore_eos \
        --max_tokens=$((8 + RANDOM % 40)) "" >/dev/null 2>&1 || true
    done
    timeout 30 "$KVCTL" --addr="$KV_GRPC" generate --max_tokens=16 "hello" >/dev/null 2>&1 || true
    ((n % 3)) || "$KVCTL" --addr="$KV_GRPC" session delete "$sid" >/dev/null 2>&1 || true
    ((n % 5)) || "$KVCTL" --addr="$KV_GRPC" session get nosuchsession >/dev/null 2>&1 || true
  done
}
for w in 1 2 3 4 5 6; do worker $w & OPS_PIDS+=($!); done
wait "${OPS_PIDS[@]: -6}" 2>/dev/null || true
sleep 4

HTTP_PORT=$(ops_free_port)
"$PY" -m http.server --bind 127.0.0.1 --directory deploy/grafana "$HTTP_PORT" \
  >"$OPS_TMP/http.log" 2>&1 &
OPS_PIDS+=($!)
ops_wait 20 "page server" ops_http_get "http://127.0.0.1:$HTTP_PORT/preview.html"
minutes=$(((TRAFFIC_SECONDS + 59) / 60 + 1))
timeout 120 chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars \
  --user-data-dir="$OPS_TMP/chromium" --window-size=1500,2330 \
  --virtual-time-budget=20000 --screenshot="$OUT" \
  "http://127.0.0.1:$HTTP_PORT/preview.html?prometheus=http://127.0.0.1:$PROM_PORT&minutes=$minutes" \
  >"$OPS_TMP/chromium.log" 2>&1 || { tail "$OPS_TMP/chromium.log" >&2; ops_fail chromium; }
ops_log "wrote $OUT"
