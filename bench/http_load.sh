#!/bin/bash
# http_load.sh [KVSERVE] [BASELINE] [SECONDS]: HTTP throughput of a kvserve
# binary (default build/kvserve) under wrk (Debian's `wrk`): 64 keep-alive
# connections on 2 threads, on GET /health and on a 16-token chat
# completion (greedy, ignore_eos) of the built-in model, SECONDS each
# (default 10). With BASELINE (another kvserve build, e.g. the previous
# commit's) both are measured in the same run, one after the other, and
# each row prints the ratio KVSERVE / BASELINE of requests per second.
# Server and wrk share the machine's cores, alike for both.
set -eu
bin=${1:-build/kvserve}
baseline=${2:-}
seconds=${3:-10}
command -v wrk >/dev/null || { echo "http_load.sh: needs wrk (apt-get install wrk)" >&2; exit 1; }
dir=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
cat >"$dir/chat.lua" <<'LUA'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"max_tokens":16,"temperature":0,"ignore_eos":true,' ..
  '"messages":[{"role":"user","content":"Once upon a time"}]}'
LUA

# Starts $1 on ephemeral loopback ports; sets pid and port.
serve() {
  OMP_WAIT_POLICY=passive "$1" --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
    --http_listen=127.0.0.1:0 2>"$dir/err" &
  pid=$!
  port=
  for _ in $(seq 100); do
    port=$(grep -o 'HTTP listening on 127.0.0.1:[0-9]*' "$dir/err" | cut -d: -f2 || true)
    [ -n "$port" ] && return 0
    sleep 0.1
  done
  cat "$dir/err" >&2
  exit 1
}

# Prints "req/s p50 p99 errors" of one wrk run.
measure() {
  local out
  out=$(wrk -t2 -c64 -d"${seconds}s" --latency "$@")
  awk '/^Requests\/sec/ {rps = $2}
       $1 == "50%" {p50 = $2}
       $1 == "99%" {p99 = $2}
       /Non-2xx|Socket errors/ {
         for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) errors += $i + 0
       }
       END {printf "%s %s %s %d\n", rps, p50, p99, errors}' <<<"$out"
}

# Runs every route against $1; writes "route|req/s p50 p99 errors" lines to $2.
run() {
  serve "$1"
  {
    echo "GET /health|$(measure "http://127.0.0.1:$port/health")"
    echo "chat, 16 tokens|$(measure -s "$dir/chat.lua" "http://127.0.0.1:$port/v1/chat/completions")"
  } >"$2"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

run "$bin" "$dir/new"
[ -n "$baseline" ] && run "$baseline" "$dir/base"
printf '%-18s %10s %9s %9s %6s' route "req/s" p50 p99 errors
[ -n "$baseline" ] && printf ' %12s %8s' "base req/s" ratio
printf '\n'
while IFS='|' read -r route numbers; do
  read -r rps p50 p99 errors <<<"$numbers"
  printf '%-18s %10s %9s %9s %6s' "$route" "$rps" "$p50" "$p99" "$errors"
  if [ -n "$baseline" ]; then
    base=$(grep -F "$route|" "$dir/base" | cut -d'|' -f2 | cut -d' ' -f1)
    printf ' %12s %8s' "$base" "$(awk -v a="$rps" -v b="$base" 'BEGIN {printf "%.2fx", a / b}')"
  fi
  printf '\n'
done <"$dir/new"
