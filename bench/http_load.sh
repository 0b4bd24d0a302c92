#!/bin/bash
# http_load.sh [KVSERVE] [SECONDS]: HTTP throughput of a kvserve binary
# (default build/kvserve) under wrk (Debian's `wrk`): 64 keep-alive
# connections on 2 threads, on GET /health and on a 16-token chat
# completion (greedy, ignore_eos) of the built-in model, SECONDS each
# (default 10). Prints one table row per route: requests/s and latency
# percentiles. Run it on two binaries for a before/after comparison; the
# server and wrk share the machine's cores, as they did for both.
set -eu
bin=${1:-build/kvserve}
seconds=${2:-10}
command -v wrk >/dev/null || { echo "http_load.sh: needs wrk (apt-get install wrk)" >&2; exit 1; }
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
OMP_WAIT_POLICY=passive "$bin" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --http_listen=127.0.0.1:0 2>"$dir/err" &
pid=$!
for _ in $(seq 100); do
  port=$(grep -o 'HTTP listening on 127.0.0.1:[0-9]*' "$dir/err" | cut -d: -f2 || true)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { cat "$dir/err" >&2; exit 1; }
cat >"$dir/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"max_tokens":16,"temperature":0,"ignore_eos":true,' ..
  '"messages":[{"role":"user","content":"Once upon a time"}]}'
LUA
printf '%-22s %10s %9s %9s %9s %7s\n' route "req/s" p50 p90 p99 errors
row() {
  local name=$1 out
  shift
  out=$(wrk -t2 -c64 -d"${seconds}s" --latency "$@")
  local rps p50 p90 p99 errors
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
  p90=$(awk '$1 == "90%" {print $2}' <<<"$out")
  p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
  errors=$(awk '/Non-2xx|Socket errors/ {
      for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) sum += $i + 0
    } END {print sum + 0}' <<<"$out")
  printf '%-22s %10s %9s %9s %9s %7s\n' "$name" "$rps" "$p50" "$p90" "$p99" "$errors"
}
row "GET /health" "http://127.0.0.1:$port/health"
row "chat, 16 tokens" -s "$dir/chat.lua" "http://127.0.0.1:$port/v1/chat/completions"
