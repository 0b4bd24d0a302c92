#!/usr/bin/python3
"""Checks deploy/grafana's dashboard against the real server.

  dashboard_test.py DASHBOARD.json --metrics_url=http://HOST:PORT/metrics
                    [--prometheus_url=http://HOST:PORT]

- The JSON is a Grafana dashboard: unique panel ids, panels inside the 24
  column grid without overlaps, a Prometheus datasource on every panel.
- Every panel query names only metrics the live kvserve exports (scraped from
  --metrics_url; `up` is Prometheus' own), and only label names those metrics
  carry (plus job/instance, which Prometheus adds).
- With --prometheus_url (a Prometheus scraping that kvserve, after traffic):
  every query, with Grafana's variables filled in, is valid PromQL and returns
  data.
"""
import argparse
import json
import re
import sys
import time
import urllib.parse
import urllib.request

OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROMETHEUS_LABELS = {"job", "instance", "le"}
PROMETHEUS_METRICS = {"up": set()}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and",
    "or", "unless", "bool", "offset", "inf", "nan",
}


def fetch(url):
    with OPENER.open(url, timeout=10) as r:
        return r.read().decode()


def exported_series(text):
    """Sample name -> label names, from Prometheus text exposition."""
    series = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s", line)
        if not m:
            raise ValueError(f"unparsable sample line: {line!r}")
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', m.group(3) or ""))
        series.setdefault(m.group(1), set()).update(labels)
    return series


def fill_variables(expr):
    return (expr.replace("$__rate_interval", "1m")
            .replace("$__interval", "15s").replace("$instance", ".*"))


def names_in(expr):
    """(metric names, {metric: label names in its matchers}, grouping labels)."""
    expr = re.sub(r'"(\\.|[^"\\])*"', '""', expr)  # string literals
    grouping = set()
    for clause in re.findall(
            r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", expr):
        grouping.update(w.strip() for w in clause.split(",") if w.strip())
    matchers = {}
    for metric, body in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", expr):
        matchers.setdefault(metric, set()).update(
            re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", body))
    stripped = re.sub(r"\{[^}]*\}", "", expr)
    stripped = re.sub(r"\[[^\]]*\]", "", stripped)
    stripped = re.sub(
        r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", stripped)
    metrics = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", stripped):
        word = m.group(0)
        following = stripped[m.end():].lstrip()
        if following.startswith("(") or word.lower() in PROMQL_WORDS:
            continue  # a function, an aggregation or a keyword
        if re.fullmatch(r"\d.*", word):
            continue
        metrics.add(word)
    return metrics, matchers, grouping


def check_layout(dashboard, problems):
    panels = dashboard.get("panels", [])
    if not panels:
        problems.append("no panels")
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        problems.append(f"duplicate panel ids {ids}")
    cells = {}
    for p in panels:
        g = p.get("gridPos", {})
        x, y, w, h = (g.get(k) for k in ("x", "y", "w", "h"))
        if None in (x, y, w, h) or x < 0 or w <= 0 or h <= 0 or x + w > 24:
            problems.append(f"panel {p.get('title')!r}: bad gridPos {g}")
            continue
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                if (cx, cy) in cells:
                    problems.append(
                        f"panels {cells[(cx, cy)]!r} and {p['title']!r} overlap")
                    break
                cells[(cx, cy)] = p["title"]
            else:
                continue
            break
        if p.get("datasource", {}).get("type") != "prometheus":
            problems.append(f"panel {p.get('title')!r}: not a Prometheus datasource")
        if not p.get("targets"):
            problems.append(f"panel {p.get('title')!r}: no queries")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dashboard")
    parser.add_argument("--metrics_url", required=True)
    parser.add_argument("--prometheus_url")
    args = parser.parse_args()

    dashboard = json.load(open(args.dashboard))
    series = exported_series(fetch(args.metrics_url))
    series.update(PROMETHEUS_METRICS)
    problems = []
    check_layout(dashboard, problems)

    queries = [(p["title"], t["expr"]) for p in dashboard["panels"]
               for t in p.get("targets", [])]
    variables = dashboard.get("templating", {}).get("list", [])
    for v in variables:
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            inner = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_]+)\)", q)
            if not inner:
                problems.append(f"variable {v['name']}: unexpected query {q!r}")
            else:
                queries.append((f"variable {v['name']}", inner.group(1)))

    used = set()
    for title, expr in queries:
        metrics, matchers, grouping = names_in(expr)
        if not metrics:
            problems.append(f"{title!r}: names no metric: {expr}")
        labels_of_query = set()
        for metric in metrics:
            used.add(metric)
            if metric not in series:
                problems.append(f"{title!r}: {metric} is not exported by kvserve")
                continue
            labels_of_query |= series[metric]
            unknown = matchers.get(metric, set()) - series[metric] - PROMETHEUS_LABELS
            if unknown:
                problems.append(f"{title!r}: {metric} has no label(s) {sorted(unknown)}")
        unknown = grouping - labels_of_query - PROMETHEUS_LABELS
        if unknown:
            problems.append(f"{title!r}: groups by unknown label(s) {sorted(unknown)}")

    if args.prometheus_url and not problems:
        deadline = time.time() + 30
        pending = list(queries)
        while pending:
            still = []
            for title, expr in pending:
                url = (f"{args.prometheus_url}/api/v1/query?"
                       + urllib.parse.urlencode({"query": fill_variables(expr)}))
                try:
                    body = json.loads(fetch(url))
                except urllib.error.HTTPError as e:
                    body = json.loads(e.read().decode())
                if body.get("status") != "success":
                    problems.append(f"{title!r}: Prometheus rejects {expr}: {body.get('error')}")
                elif not body["data"]["result"]:
                    still.append((title, expr))
            pending = still
            if pending and time.time() > deadline:
                problems += [f"{t!r}: no data from Prometheus for {e}" for t, e in pending]
                break
            if pending:
                time.sleep(1)

    if problems:
        print("dashboard_test: FAIL\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    kvserve_families = {re.sub(r"_(bucket|count|sum)$", "", m) for m in series
                        if m.startswith("kvserve_")}
    used_families = {re.sub(r"_(bucket|count|sum)$", "", m) for m in used}
    unused = sorted(kvserve_families - used_families)
    print(f"dashboard_test: {len(dashboard['panels'])} panels, {len(queries)} queries, "
          f"{len(used)} metrics, all exported"
          + (", all return data from Prometheus" if args.prometheus_url else "")
          + (f"; not on the dashboard: {', '.join(unused)}" if unused else ""),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
