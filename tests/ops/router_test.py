#!/usr/bin/python3
"""Session-affine replicas behind deploy/router/nginx.conf, on loopback.

  router_test.py BIN_DIR

Starts 3 kvserve replicas (free ports, one shared --session_dir) and Debian's
nginx with deploy/router/nginx.conf (upstream replaced by the replicas' ports,
listen addresses on 127.0.0.1, paths in a temp dir). Through nginx, with
build/kvctl:

1. 30 sessions are created, each continued 3 times (greedy). Which replica
   served each call is read from the replicas' own metrics
   (kvserve_request_duration_seconds_count{method}), one call at a time.
   Required: the 3 continuations of a session land on one replica; the
   sessions spread over the replicas; and each session is continued on the
   replica that created it (CreateSession carries the client-chosen id as
   x-session-id, so nginx places it on the owner).
2. Failover: kill -9 of the replica that owns the most sessions; each of its
   sessions continues through nginx on another replica, restored from the
   shared session dir, with exactly the greedy tokens a replica that never
   failed produces (a 4th, reference kvserve replays the same turns); 0
   sessions lost.
"""
import atexit
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

BIN = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "build")
ROOT = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
KVCTL = os.path.join(BIN, "kvctl")
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
TMP = tempfile.mkdtemp(prefix="kvserve-router.")
PROCS = []
SESSIONS = 30
TURNS = 3
TOKENS_PER_TURN = 4


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            p.terminate()
    deadline = time.time() + 5
    for p in PROCS:
        try:
            p.wait(max(0.1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    shutil.rmtree(TMP, ignore_errors=True)


atexit.register(cleanup)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
signal.signal(signal.SIGINT, lambda *_: sys.exit(130))


def die_with_parent():
    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, name, session_dir):
        self.name = name
        self.err_path = os.path.join(TMP, f"{name}.stderr")
        err = open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "kvserve"), "--listen=127.0.0.1:0",
             "--metrics_listen=127.0.0.1:0", "--threads=1",
             f"--session_dir={session_dir}"],
            stdout=subprocess.DEVNULL, stderr=err, preexec_fn=die_with_parent)
        PROCS.append(self.proc)
        deadline = time.time() + 60
        while True:
            text = open(self.err_path).read()
            m = re.search(r"^kvserve: listening grpc=(\S+) metrics=(\S+)", text, re.M)
            if m:
                self.grpc, self.metrics = m.group(1), m.group(2)
                break
            if self.proc.poll() is not None:
                sys.exit(f"{name} exited before it was ready:\n{text}")
            if time.time() > deadline:
                sys.exit(f"{name} not ready in 60 s")
            time.sleep(0.05)

    def calls(self):
        """{method: finished RPCs} from this replica's own /metrics."""
        with OPENER.open(f"http://{self.metrics}/metrics", timeout=10) as r:
            text = r.read().decode()
        counts = {}
        for m in re.finditer(
                r'^kvserve_request_duration_seconds_count\{([^}]*)\} (\S+)$', text, re.M):
            method = re.search(r'method="([^"]*)"', m.group(1)).group(1)
            counts[method] = counts.get(method, 0) + float(m.group(2))
        return counts


def kvctl(addr, *args, timeout=60):
    r = subprocess.run([KVCTL, f"--addr={addr}", *args], capture_output=True,
                       text=True, timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def generate(addr, session, prompt=""):
    code, out, err = kvctl(addr, "generate", f"--session={session}", "--json",
                           "--ignore_eos", f"--max_tokens={TOKENS_PER_TURN}", prompt)
    if code != 0:
        return code, err.strip()
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    return 0, [l["token_id"] for l in lines if "token_id" in l]


def served_by(replicas, method, before):
    """The replicas whose `method` count rose since `before` (a server records
    an RPC when it is done, which may be just after the client saw its end:
    wait up to 5 s for one to move)."""
    deadline = time.time() + 5
    while True:
        after = [r.calls() for r in replicas]
        moved = [i for i, (b, a) in enumerate(zip(before, after))
                 if a.get(method, 0) > b.get(method, 0)]
        if moved or time.time() > deadline:
            return moved, after
        time.sleep(0.02)


def start_nginx(replicas):
    conf = open(os.path.join(ROOT, "deploy/router/nginx.conf")).read()
    port, health = free_port(), free_port()
    ups = "".join(f"    server {r.grpc} max_fails=1 fail_timeout=10s;\n" for r in replicas)
    conf, n = re.subn(r"(# replicas:begin\n)[\s\S]*?(\s*# replicas:end)",
                      lambda m: m.group(1) + ups + m.group(2).lstrip("\n"), conf)
    assert n == 1, "nginx.conf has one replicas:begin/end block"
    conf, n = re.subn(r"listen 50051 http2;", f"listen 127.0.0.1:{port} http2;", conf)
    assert n == 1, "nginx.conf listens on 50051 with http2"
    conf, n = re.subn(r"listen 8081;", f"listen 127.0.0.1:{health};", conf)
    assert n == 1
    ndir = os.path.join(TMP, "nginx")
    os.makedirs(ndir)
    os.chmod(TMP, 0o755)
    os.chmod(ndir, 0o777)
    conf = conf.replace("/tmp/", ndir + "/").replace(
        "access_log /dev/stdout", f"access_log {ndir}/access.log")
    conf = re.sub(r"worker_processes \S+;", "worker_processes 1;", conf)
    path = os.path.join(ndir, "nginx.conf")
    open(path, "w").write(conf)
    err = open(os.path.join(ndir, "stderr"), "w")
    proc = subprocess.Popen(["nginx", "-e", "stderr", "-c", path, "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=err, preexec_fn=die_with_parent)
    PROCS.append(proc)
    addr = f"127.0.0.1:{port}"
    deadline = time.time() + 30
    while kvctl(addr, "health", timeout=5)[0] != 0:
        if proc.poll() is not None or time.time() > deadline:
            sys.exit("nginx did not come up:\n" + open(os.path.join(ndir, "stderr")).read())
        time.sleep(0.2)
    return addr, proc


def main():
    help_text = subprocess.run([os.path.join(BIN, "kvserve"), "--help"],
                               capture_output=True, text=True).stdout + \
        subprocess.run([os.path.join(BIN, "kvserve"), "--helpfull"],
                       capture_output=True, text=True).stdout
    sdir = os.path.join(TMP, "sessions")
    replicas = [Replica(f"replica{i}", sdir) for i in range(3)]
    router, nginx = start_nginx(replicas)
    log(f"nginx {router} -> " + ", ".join(f"{r.name}={r.grpc}" for r in replicas))

    creator, owner, history = {}, {}, {}
    problems, mismatched = [], []
    before = [r.calls() for r in replicas]
    for i in range(SESSIONS):
        code, out, err = kvctl(router, "session", "create", f"Session number {i} says")
        if code != 0:
            sys.exit(f"session create through nginx: {err}")
        sid = out.strip().splitlines()[-1]
        moved, before = served_by(replicas, "CreateSession", before)
        if len(moved) != 1:
            sys.exit(f"CreateSession of {sid} counted on replicas {moved}")
        creator[sid] = moved[0]
        history[sid] = []
        for turn in range(TURNS):
            code, tokens = generate(router, sid)
            moved, before = served_by(replicas, "Generate", before)
            if len(moved) != 1:
                problems.append(f"{sid} turn {turn}: Generate counted on replicas {moved}")
                continue
            if turn == 0:
                owner[sid] = moved[0]
            elif moved[0] != owner[sid]:
                problems.append(f"{sid} turn {turn}: served by replica{moved[0]}, "
                                f"earlier turns by replica{owner[sid]}")
            if code == 0:
                history[sid].append(tokens)
            elif owner[sid] != creator[sid] and code == 5:  # NOT_FOUND
                if sid not in mismatched:
                    mismatched.append(sid)
            else:
                problems.append(f"{sid} turn {turn}: kvctl exit {code}: {tokens}")
    spread = {i: sum(1 for s in owner.values() if s == i) for i in range(3)}
    log(f"{SESSIONS} sessions x {TURNS} continuations through nginx; owners per replica "
        f"{spread}; created elsewhere than their owner: "
        f"{sum(1 for s in owner if owner[s] != creator[s])}")
    if sum(1 for v in spread.values() if v) < 2:
        problems.append(f"the hash sends every session to one replica: {spread}")
    if problems:
        sys.exit("router_test: FAIL\n  " + "\n  ".join(problems[:20]))
    log("every session's continuations were served by one replica")

    created_elsewhere = [s for s in owner if owner[s] != creator[s]]
    if mismatched or created_elsewhere:
        sys.exit(f"router_test: FAIL: {len(created_elsewhere)}/{SESSIONS} sessions were "
                 f"created on another replica than the one their id hashes to "
                 f"({len(mismatched)} then NOT_FOUND); CreateSession must carry the "
                 f"client-chosen id as x-session-id")
    log("each session was created on the replica that owns it")

    victim = max(spread, key=spread.get)
    victim_sessions = [s for s in owner if owner[s] == victim and history[s]]
    ref = Replica("reference", os.path.join(TMP, "reference-sessions"))
    want = {}
    for sid in victim_sessions:
        i = list(creator).index(sid)
        code, out, _ = kvctl(ref.grpc, "session", "create", f"Session number {i} says")
        rid = out.strip().splitlines()[-1]
        for turn in history[sid]:
            code, tokens = generate(ref.grpc, rid)
            if tokens != turn:
                sys.exit(f"reference replica diverges from replica{victim} on {sid}")
        want[sid] = generate(ref.grpc, rid)[1]
    replicas[victim].proc.kill()
    replicas[victim].proc.wait()
    log(f"kill -9 replica{victim} ({len(victim_sessions)} sessions)")
    lost = []
    for sid in victim_sessions:
        code, tokens = generate(router, sid)
        if code != 0 or tokens != want[sid]:
            lost.append(f"{sid}: {code} {tokens} want {want[sid]}")
    if lost:
        sys.exit(f"failover: {len(lost)} of {len(victim_sessions)} sessions lost or "
                 f"diverged:\n  " + "\n  ".join(lost[:10]))
    log(f"failover: all {len(victim_sessions)} sessions continued elsewhere with the "
        f"same greedy tokens; 0 lost")

    log("router_test: PASS")

if __name__ == "__main__":
    main()
