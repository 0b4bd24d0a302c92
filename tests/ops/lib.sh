# Shared helpers for the tests/ops/*.sh scripts (sourced, not run).
# Every wait is bounded; every process a test starts is recorded and stopped
# by ops_cleanup, which the scripts run from an EXIT trap.

OPS_PIDS=()
OPS_TMP=""
OPS_CLEANUPS=()
PY=/usr/bin/python3  # Debian's python3, with python3-yaml

ops_log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
ops_fail() { ops_log "FAIL: $*"; exit 1; }

ops_init() {
  OPS_TMP=$(mktemp -d "${TMPDIR:-/tmp}/kvserve-ops.XXXXXX")
  trap ops_cleanup EXIT
  trap 'exit 130' INT TERM
}

# Runs "$@" at exit (before processes are killed and the temp dir removed).
ops_on_exit() { OPS_CLEANUPS+=("$*"); }

ops_cleanup() {
  local rc=$?
  local c pid
  for c in "${OPS_CLEANUPS[@]}"; do eval "$c" >/dev/null 2>&1 || true; done
  for pid in "${OPS_PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${OPS_PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ -n "$OPS_TMP" && -d "$OPS_TMP" ]]; then rm -rf "$OPS_TMP"; fi
  return $rc
}

# A free TCP port on 127.0.0.1 (bound and released; the kernel will not hand
# it out again soon).
ops_free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# ops_wait SECONDS DESCRIPTION COMMAND...: until COMMAND succeeds.
ops_wait() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || ops_fail "timed out after ${seconds}s waiting for $what"
    sleep 0.2
  done
}

# ops_start_kvserve BIN_DIR NAME [FLAGS...]: starts kvserve on free loopback
# ports; sets KV_GRPC and KV_METRICS (host:port) and KV_PID.
ops_start_kvserve() {
  local bin=$1 name=$2
  shift 2
  local err="$OPS_TMP/$name.stderr"
  "$bin/kvserve" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 "$@" \
    2>"$err" &
  KV_PID=$!
  OPS_PIDS+=("$KV_PID")
  local deadline=$((SECONDS + 60))
  until grep -q '^kvserve: listening ' "$err"; do
    if ! kill -0 "$KV_PID" 2>/dev/null; then
      cat "$err" >&2
      ops_fail "kvserve $name exited before it was ready"
    fi
    ((SECONDS < deadline)) || ops_fail "kvserve $name not ready in 60s"
    sleep 0.1
  done
  local line
  line=$(grep -m1 '^kvserve: listening ' "$err")
  KV_GRPC=$(sed -E 's/.*grpc=([^ ]+).*/\1/' <<<"$line")
  KV_METRICS=$(sed -E 's/.*metrics=([^ ]+).*/\1/' <<<"$line")
  ops_log "kvserve $name: pid $KV_PID grpc=$KV_GRPC metrics=$KV_METRICS"
}

# ops_http_get URL: the body, or failure (10 s bound).
ops_http_get() {
  "$PY" - "$1" <<'PYEOF'
import sys, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
with opener.open(sys.argv[1], timeout=10) as r:
    sys.stdout.write(r.read().decode())
PYEOF
}
