#!/bin/sh
# Runs nginx in the foreground and reloads it every RELOAD_SECONDS (30): open
# source nginx resolves upstream host names only when it (re)loads its
# configuration, and a rescheduled kvserve pod comes back with a new address.
# SIGTERM: nginx finishes the calls in flight (graceful quit), then exits.
set -eu
CONF=${NGINX_CONF:-/etc/nginx/kvserve/nginx.conf}
RELOAD_SECONDS=${RELOAD_SECONDS:-30}
# The replicas' names resolve once their pods have addresses.
until nginx -t -q -e stderr -c "$CONF"; do sleep 2; done
nginx -e stderr -c "$CONF" -g 'daemon off;' &
pid=$!
trap 'kill -QUIT "$pid" 2>/dev/null; wait "$pid"; exit 0' TERM INT
while kill -0 "$pid" 2>/dev/null; do
  sleep "$RELOAD_SECONDS" &
  wait $! || true
  nginx -t -q -e stderr -c "$CONF" && nginx -e stderr -c "$CONF" -s reload || true
done
wait "$pid"
