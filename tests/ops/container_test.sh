#!/usr/bin/env bash
# make container-test: builds the Dockerfile with podman (no Docker daemon, no
# container registry) and runs the image.
#
#   tests/ops/container_test.sh [BIN_DIR]      (BIN_DIR: where kvctl is; build/)
#
# 1. Base images: `debootstrap --variant=minbase bookworm` piped into
#    `podman import`, tagged as the Dockerfile's FROM lines: debian:bookworm,
#    and debian:bookworm-slim (the same rootfs without docs, manuals and
#    locales). Cached in podman's store while younger than
#    KVSERVE_BASE_MAX_AGE_DAYS (7); set it to 0 to rebuild.
# 2. podman build --runtime runc --pull=never (docker format, so HEALTHCHECK is
#    kept), with a compiler cache volume in /var/cache/kvserve-container-ccache.
# 3. Checks the image's metadata (non-root user, ports, healthcheck, entrypoint).
# 4. Runs it with ports published on 127.0.0.1 only, reaches it with kvctl
#    (health SERVING, one streamed generation), checks its metrics and its
#    HEALTHCHECK, stops it with SIGTERM (podman stop) and requires exit code 0.
# 5. Builds deploy/router's image and runs it as Kubernetes would (non-root,
#    read-only root filesystem) in front of the kvserve container: a session
#    call and a stream through nginx, then a clean SIGTERM stop.
# If podman cannot run containers on this machine the test says why and skips.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/ops/lib.sh

BIN_DIR=$(realpath "${1:-build}")
IMAGE=localhost/kvserve:container-test
BASE_LABEL=org.kvserve.base
MAX_AGE_DAYS=${KVSERVE_BASE_MAX_AGE_DAYS:-7}
CCACHE_DIR=/var/cache/kvserve-container-ccache
START=$SECONDS
ops_init

skip() {
  echo "container-test: SKIPPED: $*" >&2
  echo "0 passed, 0 failed, 1 skipped"
  exit 0
}
elapsed() { echo "$((SECONDS - START))s"; }

for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || ops_fail "$tool is not installed (make container-test installs it)"
done
[[ -x "$BIN_DIR/kvctl" ]] || ops_fail "no $BIN_DIR/kvctl (make build)"

# One run at a time per machine: the image store and the tags are shared.
exec 9>/var/lock/kvserve-container-test.lock
flock -w 900 9 || ops_fail "another container test held the lock for 15 minutes"

# --- 1. base images -------------------------------------------------------
# The mirror apt already uses here (no host name is written in this repo);
# debootstrap's own default when apt names none.
debian_mirror() {
  {
    grep -hE '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
      awk '{print $2}'
    grep -hE '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      2>/dev/null | awk '{print $2}'
  } | grep -E '/debian/?$' | head -n1
}

base_is_fresh() {
  local created
  created=$(podman image inspect --format "{{index .Labels \"$BASE_LABEL\"}}" \
    docker.io/library/debian:bookworm 2>/dev/null) || return 1
  [[ "$created" =~ ^[0-9]+$ ]] || return 1
  (($(date +%s) - created < MAX_AGE_DAYS * 86400))
}

if base_is_fresh && podman image exists docker.io/library/debian:bookworm-slim; then
  ops_log "base images: cached (debootstrap minbase, younger than $MAX_AGE_DAYS days)"
else
  mirror=$(debian_mirror || true)
  ops_log "base images: debootstrap --variant=minbase bookworm ${mirror:-(default mirror)}"
  rootfs="$OPS_TMP/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" ${mirror:+"$mirror"} \
    >"$OPS_TMP/debootstrap.log" 2>&1 ||
    { tail -n 30 "$OPS_TMP/debootstrap.log" >&2; ops_fail "debootstrap failed"; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar --numeric-owner -C "$rootfs" -c . |
    podman import --quiet --change "LABEL $BASE_LABEL=$(date +%s)" \
      --change 'CMD ["/bin/bash"]' - docker.io/library/debian:bookworm >/dev/null
  # bookworm-slim: the same rootfs without documentation, manuals and
  # locales, and with dpkg told to leave them out of later installs (what
  # Debian's official slim images do).
  rm -rf "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* \
    "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/info/*
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/locale/*
DPKG
  tar --numeric-owner -C "$rootfs" -c . |
    podman import --quiet --change "LABEL $BASE_LABEL=$(date +%s)" \
      --change 'CMD ["/bin/bash"]' - docker.io/library/debian:bookworm-slim >/dev/null
  rm -rf "$rootfs"
  ops_log "base images: imported ($(elapsed))"
fi

# --- can podman run a container here? With which ulimits? --------------------
# podman's default ulimits (nofile 1048576) exceed this machine's hard limits,
# and runc fails to set them ("error setting rlimit type 7: operation not
# permitted"); some sandboxes also refuse an nproc below the shell's hard
# limit. Take the largest pair that lets a container start.
PODMAN_LIMITS=()
hard_nofile=$(ulimit -Hn)
hard_nproc=$(ulimit -Hu)
for want in 65536 32768 16384 4096; do
  nofile=$want nproc=$want
  [[ "$hard_nofile" != unlimited && "$hard_nofile" -lt "$nofile" ]] && nofile=$hard_nofile
  [[ "$hard_nproc" != unlimited && "$hard_nproc" -lt "$nproc" ]] && nproc=$hard_nproc
  limits=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  if podman run --rm --runtime runc --pull=never --network=none "${limits[@]}" \
    docker.io/library/debian:bookworm true >"$OPS_TMP/probe.log" 2>&1; then
    PODMAN_LIMITS=("${limits[@]}")
    break
  fi
done
if ((${#PODMAN_LIMITS[@]} == 0)); then
  skip "podman cannot run a container on this machine: $(tail -n 3 "$OPS_TMP/probe.log")"
fi
ops_log "podman runs containers here with ${PODMAN_LIMITS[*]}"

# --- 2. build ---------------------------------------------------------------
mkdir -p "$CCACHE_DIR"
build_image() {
  podman build --runtime runc --pull=never --format docker "${PODMAN_LIMITS[@]}" \
    --volume "$CCACHE_DIR:/ccache" "$@" -t "$IMAGE" -f Dockerfile . \
    >"$OPS_TMP/build.log" 2>&1
}
ops_log "podman build (log: build.log; $(elapsed))"
if ! build_image; then
  if grep -qE 'Temporary failure resolving|Could not resolve|Failed to fetch|Network is unreachable' "$OPS_TMP/build.log"; then
    ops_log "the build network cannot reach Debian's registry; retrying with --network=host"
    build_image --network=host || { tail -n 40 "$OPS_TMP/build.log" >&2; ops_fail "podman build failed"; }
  else
    tail -n 40 "$OPS_TMP/build.log" >&2
    ops_fail "podman build failed"
  fi
fi
grep -m1 '^runtime packages:' "$OPS_TMP/build.log" >&2 || true
# Untagged images from our base images older than a week (earlier builds'
# layers): gone, so the store does not grow run after run. Younger ones stay:
# they are the layer cache (the build stage's apt layer above all).
podman image prune -f --filter "label=$BASE_LABEL" --filter until=168h >/dev/null 2>&1 || true
ops_log "built $IMAGE ($(elapsed))"

# --- 3. image metadata --------------------------------------------------------
podman image inspect "$IMAGE" >"$OPS_TMP/inspect.json"
"$PY" - "$OPS_TMP/inspect.json" <<'PYEOF'
import json, sys
img = json.load(open(sys.argv[1]))[0]
cfg = img["Config"]
problems = []
user = cfg.get("User", "")
if not user or user.split(":")[0] in ("0", "root"):
    problems.append(f"runs as root (User={user!r})")
if set(cfg.get("ExposedPorts", {})) != {"50051/tcp", "9464/tcp"}:
    problems.append(f"ExposedPorts {sorted(cfg.get('ExposedPorts', {}))}")
hc = cfg.get("Healthcheck") or img.get("Healthcheck") or {}
test = hc.get("Test") or []
if not any("kvctl" in t for t in test) or "health" not in test:
    problems.append(f"HEALTHCHECK {test}")
if cfg.get("Entrypoint") != ["kvserve"]:
    problems.append(f"Entrypoint {cfg.get('Entrypoint')}")
env = dict(e.split("=", 1) for e in cfg.get("Env", []))
if env.get("KVSERVE_LISTEN") != "0.0.0.0:50051" or env.get("KVSERVE_METRICS_LISTEN") != "0.0.0.0:9464":
    problems.append("does not listen on 0.0.0.0:50051 / 0.0.0.0:9464")
if problems:
    sys.exit("image metadata: " + "; ".join(problems))
print(f"image: user {user}, ports {sorted(cfg['ExposedPorts'])}, healthcheck {test}, "
      f"size {img['Size'] / 1e6:.1f} MB", file=sys.stderr)
PYEOF
SIZE_MB=$(podman image inspect --format '{{.Size}}' "$IMAGE" | awk '{printf "%.1f", $1/1e6}')
# Only runtime libraries: no compiler, no headers, no -dev package.
if podman run --rm --runtime runc --pull=never --network=none "${PODMAN_LIMITS[@]}" \
  --no-healthcheck --entrypoint sh "$IMAGE" -c 'command -v g++ || command -v cmake || dpkg -l | grep -E "^ii +[^ ]+-dev[: ]"'; then
  ops_fail "the runtime image contains build tools or -dev packages"
fi

# --- 4. run -------------------------------------------------------------------
NAME="kvserve-container-test-$$"
ops_on_exit "podman rm -f -t 2 $NAME"
# --health-interval=disable: no systemd timer (there may be no systemd); the
# test runs the image's HEALTHCHECK itself with `podman healthcheck run`.
podman run -d --name "$NAME" --runtime runc --pull=never "${PODMAN_LIMITS[@]}" \
  --health-interval=disable -p 127.0.0.1::50051 -p 127.0.0.1::9464 "$IMAGE" --threads=2 \
  >/dev/null 2>"$OPS_TMP/run.log" || { cat "$OPS_TMP/run.log" >&2; ops_fail "podman run failed"; }
GRPC=$(podman port "$NAME" 50051/tcp | head -n1)
METRICS=$(podman port "$NAME" 9464/tcp | head -n1)
[[ "$GRPC" == 127.0.0.1:* && "$METRICS" == 127.0.0.1:* ]] ||
  ops_fail "ports not published on 127.0.0.1 only: $GRPC $METRICS"
ops_log "container $NAME: grpc=$GRPC metrics=$METRICS"

ops_wait 60 "kvctl health SERVING through the published port" \
  "$BIN_DIR/kvctl" --addr="$GRPC" health
[[ "$("$BIN_DIR/kvctl" --addr="$GRPC" health)" == SERVING ]] || ops_fail "health is not SERVING"
[[ "$(podman exec "$NAME" id -u)" != 0 ]] || ops_fail "the server runs as root"

timeout 120 "$BIN_DIR/kvctl" --addr="$GRPC" generate --json --ignore_eos \
  --max_tokens=12 "Once upon a time" >"$OPS_TMP/generate.jsonl"
"$PY" - "$OPS_TMP/generate.jsonl" <<'PYEOF'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
tokens = [l for l in lines if "token_id" in l]
final = lines[-1]
assert len(tokens) == 12, f"{len(tokens)} streamed tokens, want 12"
assert final.get("finish_reason") == "length", final
assert final["usage"]["generated_tokens"] == 12, final
print("streamed 12 tokens:", repr("".join(t["text"] for t in tokens))[:80], file=sys.stderr)
PYEOF
ops_http_get "http://$METRICS/metrics" >"$OPS_TMP/metrics.txt"
grep -qE '^kvserve_generated_tokens_total(\{\})? 12$' "$OPS_TMP/metrics.txt" ||
  ops_fail "metrics through the published port do not count 12 generated tokens"
grep -q '^process_resident_memory_bytes ' "$OPS_TMP/metrics.txt" ||
  ops_fail "no process metrics"
podman healthcheck run "$NAME" >"$OPS_TMP/health.log" 2>&1 ||
  { cat "$OPS_TMP/health.log" >&2; ops_fail "the image's HEALTHCHECK fails"; }
ops_log "HEALTHCHECK: healthy"

# --- 5. the router image (deploy/router) in front of it, run as Kubernetes
# runs it: non-root, read-only root filesystem, all capabilities dropped; the
# replicas' cluster DNS names point at the kvserve container.
KV_IP=$(podman inspect --format '{{.NetworkSettings.IPAddress}}' "$NAME")
if [[ -z "$KV_IP" ]]; then
  ops_log "router image: skipped (the kvserve container has no bridge address)"
else
  podman build --runtime runc --pull=never --format docker "${PODMAN_LIMITS[@]}" \
    -t localhost/kvserve-router:container-test deploy/router >"$OPS_TMP/router-build.log" 2>&1 ||
    { tail -n 20 "$OPS_TMP/router-build.log" >&2; ops_fail "router image build failed"; }
  ROUTER="kvserve-router-container-test-$$"
  ops_on_exit "podman rm -f -t 2 $ROUTER"
  hosts=()
  for i in 0 1 2; do
    hosts+=(--add-host "kvserve-$i.kvserve-headless.kvserve.svc.cluster.local:$KV_IP")
  done
  podman run -d --name "$ROUTER" --runtime runc --pull=never "${PODMAN_LIMITS[@]}" \
    --read-only --tmpfs /tmp --user 33:33 --cap-drop ALL \
    --security-opt no-new-privileges "${hosts[@]}" \
    -p 127.0.0.1::50051 -p 127.0.0.1::8081 -e RELOAD_SECONDS=1 \
    localhost/kvserve-router:container-test >/dev/null
  RGRPC=$(podman port "$ROUTER" 50051/tcp | head -n1)
  RHEALTH=$(podman port "$ROUTER" 8081/tcp | head -n1)
  ops_wait 30 "router /healthz" ops_http_get "http://$RHEALTH/healthz"
  ops_wait 30 "kvctl health through the router" "$BIN_DIR/kvctl" --addr="$RGRPC" health
  # run-router.sh re-resolves the replicas by reloading nginx (every second
  # here): calls must go on working across reloads. Waited for, not slept
  # on: right after the image builds a fixed 2.5 s saw no reload yet.
  router_reloaded() { podman logs "$ROUTER" 2>&1 | grep -q 'signal process started'; }
  ops_wait 30 "the router to reload nginx" router_reloaded
  sid=$("$BIN_DIR/kvctl" --addr="$RGRPC" session create "Through the router" | tail -n1)
  timeout 60 "$BIN_DIR/kvctl" --addr="$RGRPC" generate --json --ignore_eos \
    --max_tokens=5 --session="$sid" "" >"$OPS_TMP/router-gen.jsonl"
  [[ $(grep -c '"token_id"' "$OPS_TMP/router-gen.jsonl") == 5 ]] ||
    ops_fail "generation through the router image did not stream 5 tokens"
  podman stop -t 30 "$ROUTER" >/dev/null
  RCODE=$(podman inspect --format '{{.State.ExitCode}}' "$ROUTER")
  [[ "$RCODE" == 0 ]] || { podman logs "$ROUTER" 2>&1 | tail -n 20 >&2; ops_fail "router exit code $RCODE after SIGTERM"; }
  ops_log "router image: non-root, read-only, session call and stream through nginx, clean stop"
fi

# SIGTERM (podman stop), a clean drain, exit code 0.
# (podman 4.3 logs harmless "unable to get systemd connection" errors here.)
podman stop -t 30 "$NAME" >/dev/null 2>"$OPS_TMP/stop.log" ||
  { cat "$OPS_TMP/stop.log" >&2; ops_fail "podman stop failed"; }
CODE=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
podman logs "$NAME" >"$OPS_TMP/container.log" 2>&1 || true
[[ "$CODE" == 0 ]] || { tail -n 20 "$OPS_TMP/container.log" >&2; ops_fail "exit code $CODE after SIGTERM"; }
grep -q 'kvserve: stopped' "$OPS_TMP/container.log" || ops_fail "no clean stop in the logs"
ops_log "stopped by SIGTERM, exit code 0"

echo "container-test: image $IMAGE ${SIZE_MB} MB; total $(elapsed)" >&2
echo "1 passed, 0 failed"
