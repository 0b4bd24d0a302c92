#!/usr/bin/env bash
# Kubernetes manifests (deploy/k8s/) validated against the Kubernetes API
# schemas by the npm package kubernetes-models under Node.js, plus the
# cross-checks of tests/ops/k8s/validate.mjs (selectors, ports vs the server's
# flags and the router's nginx.conf, probes, security, shutdown timing), and
# `nginx -t` (Debian's nginx) on deploy/router/nginx.conf.
#
#   tests/ops/k8s_test.sh [BIN_DIR]   (default build/: kvserve --helpfull)
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ops/lib.sh
BIN_DIR=$(realpath "${1:-build}")
ops_init

# The validator's packages, installed from the committed lock file; again only
# when the lock file changed.
K8S=tests/ops/k8s
if [[ ! -f $K8S/node_modules/.package-lock.json ||
  $K8S/package-lock.json -nt $K8S/node_modules/.package-lock.json ]]; then
  ops_log "npm ci in $K8S"
  (cd $K8S && timeout 300 npm ci --no-audit --no-fund --loglevel=error) >&2
fi

"$BIN_DIR/kvserve" --helpfull >"$OPS_TMP/flags.txt" 2>&1 || true
grep -q -- '--listen' "$OPS_TMP/flags.txt" || ops_fail "kvserve --helpfull lists no flags"
node $K8S/validate.mjs --dir=deploy/k8s --nginx=deploy/router/nginx.conf \
  --flags="$OPS_TMP/flags.txt"

# nginx -t on the router's configuration: the cluster DNS names replaced by a
# loopback address (nginx resolves upstream names when it loads).
sed -E 's/kvserve-[0-9]+\.kvserve-headless\.kvserve\.svc\.cluster\.local/127.0.0.1/' \
  deploy/router/nginx.conf >"$OPS_TMP/nginx.conf"
sed -i "s|/tmp/|$OPS_TMP/|g" "$OPS_TMP/nginx.conf"
nginx -t -q -e stderr -c "$OPS_TMP/nginx.conf" ||
  ops_fail "nginx -t rejects deploy/router/nginx.conf"
sh -n deploy/router/run-router.sh || ops_fail "deploy/router/run-router.sh: syntax"
ops_log "nginx -t accepts deploy/router/nginx.conf"
