// Validates deploy/k8s/*.yaml against the Kubernetes API schemas with the
// models of the npm package kubernetes-models (each object validates itself),
// rejects fields the schemas do not know (typos the API server would drop or
// refuse), and cross-checks what the schemas cannot: selectors match pod
// labels, ports match the server's flags and the router's configuration,
// probes, security context and shutdown timing.
//
//   node validate.mjs --dir=deploy/k8s --nginx=deploy/router/nginx.conf \
//       [--flags=FILE]   (FILE: `kvserve --helpfull` output)
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const args = Object.fromEntries(
  process.argv.slice(2).map((a) => {
    const m = a.match(/^--([^=]+)=(.*)$/);
    if (!m) throw new Error(`bad argument ${a}`);
    return [m[1], m[2]];
  }),
);
const problems = [];
const fail = (msg) => problems.push(msg);

// --- load every document --------------------------------------------------
const files = fs.readdirSync(args.dir).filter((f) => f.endsWith(".yaml")).sort();
const objects = [];
for (const file of files) {
  if (file === "kustomization.yaml") continue;
  const docs = YAML.parseAllDocuments(fs.readFileSync(path.join(args.dir, file), "utf8"));
  for (const doc of docs) {
    if (doc.errors.length) fail(`${file}: YAML: ${doc.errors[0].message}`);
    const obj = doc.toJS();
    if (obj) objects.push({ file, obj });
  }
}
const kustomization = YAML.parse(fs.readFileSync(path.join(args.dir, "kustomization.yaml"), "utf8"));
const listed = new Set(kustomization.resources);
for (const f of files) {
  if (f !== "kustomization.yaml" && !listed.has(f)) fail(`kustomization.yaml does not list ${f}`);
}

// --- schema validation -------------------------------------------------------
const groupModule = (apiVersion) => {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  return group === "" ? `kubernetes-models/${version}` : `kubernetes-models/${group}/${version}`;
};

// Wraps an object so that reads of its properties are recorded; after the
// schema validator ran, a property it never read is unknown to the schema
// (the validator reads every property it knows, and enumerates the keys of
// free-form maps such as labels).
function track(value, where, seen) {
  if (value === null || typeof value !== "object") return value;
  const record = { where, read: new Set(), enumerated: false, value };
  seen.push(record);
  const children = new Map();
  return new Proxy(value, {
    get(target, key, receiver) {
      if (typeof key === "string") record.read.add(key);
      const v = Reflect.get(target, key, receiver);
      if (typeof key !== "string" || v === null || typeof v !== "object") return v;
      if (!children.has(key)) children.set(key, track(v, `${where}.${key}`, seen));
      return children.get(key);
    },
    ownKeys(target) {
      record.enumerated = true;
      return Reflect.ownKeys(target);
    },
    has(target, key) {
      if (typeof key === "string") record.read.add(key);
      return Reflect.has(target, key);
    },
  });
}

for (const { file, obj } of objects) {
  const name = `${file}: ${obj.kind}/${obj.metadata?.name}`;
  let Model;
  try {
    const mod = await import(groupModule(obj.apiVersion));
    Model = mod[obj.kind];
  } catch (e) {
    fail(`${name}: no model for ${obj.apiVersion} ${obj.kind}: ${e.message}`);
    continue;
  }
  if (!Model) {
    fail(`${name}: ${obj.apiVersion} has no kind ${obj.kind}`);
    continue;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    fail(`${name}: schema: ${e.message}`);
    continue;
  }
  // Unknown fields: run the model's validator over the tracked data.
  const seen = [];
  try {
    Model.prototype.validate.call(track(structuredClone(obj), obj.kind, seen));
  } catch (e) {
    fail(`${name}: schema (tracked): ${e.message}`);
  }
  for (const r of seen) {
    if (r.enumerated || Array.isArray(r.value)) continue;
    for (const key of Object.keys(r.value)) {
      if (!r.read.has(key)) fail(`${name}: unknown field ${r.where}.${key}`);
    }
  }
}

// --- cross-checks ------------------------------------------------------------
const byKind = (kind) => objects.map((o) => o.obj).filter((o) => o.kind === kind);
const workloads = [...byKind("StatefulSet"), ...byKind("Deployment")];
const matches = (selector, labels) =>
  Object.entries(selector || {}).every(([k, v]) => labels?.[k] === v);
const podLabels = (w) => w.spec.template.metadata.labels;
const containerPorts = (w) =>
  w.spec.template.spec.containers.flatMap((c) => c.ports || []);

for (const w of workloads) {
  const id = `${w.kind}/${w.metadata.name}`;
  if (!matches(w.spec.selector.matchLabels, podLabels(w))) fail(`${id}: selector does not match its pod labels`);
  // Workload selectors must not overlap (the controllers would fight).
  for (const other of workloads) {
    if (other !== w && matches(w.spec.selector.matchLabels, podLabels(other)))
      fail(`${id}: selector also selects ${other.kind}/${other.metadata.name}'s pods`);
  }
  const spec = w.spec.template.spec;
  if (!spec.securityContext?.runAsNonRoot) fail(`${id}: pod not runAsNonRoot`);
  if (spec.securityContext?.seccompProfile?.type !== "RuntimeDefault") fail(`${id}: no RuntimeDefault seccomp`);
  for (const c of spec.containers) {
    const sc = c.securityContext || {};
    if (sc.allowPrivilegeEscalation !== false) fail(`${id}/${c.name}: allowPrivilegeEscalation not false`);
    if (sc.readOnlyRootFilesystem !== true) fail(`${id}/${c.name}: root filesystem not read-only`);
    if (!(sc.capabilities?.drop || []).includes("ALL")) fail(`${id}/${c.name}: capabilities not dropped`);
    if (!c.resources?.requests || !c.resources?.limits) fail(`${id}/${c.name}: no resource requests/limits`);
    if (!c.readinessProbe || !c.livenessProbe) fail(`${id}/${c.name}: missing probes`);
    const names = new Set((c.ports || []).map((p) => p.name));
    for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe].filter(Boolean)) {
      const port = probe.grpc?.port ?? probe.httpGet?.port ?? probe.tcpSocket?.port;
      const ok = typeof port === "number"
        ? (c.ports || []).some((p) => p.containerPort === port)
        : names.has(port);
      if (!ok) fail(`${id}/${c.name}: probe port ${port} is not a container port`);
    }
  }
}

for (const svc of byKind("Service")) {
  const id = `Service/${svc.metadata.name}`;
  const targets = workloads.filter((w) => matches(svc.spec.selector, podLabels(w)));
  if (targets.length !== 1) {
    fail(`${id}: selector matches ${targets.length} workloads (want 1)`);
    continue;
  }
  const ports = containerPorts(targets[0]);
  for (const p of svc.spec.ports) {
    const ok = typeof p.targetPort === "string"
      ? ports.some((cp) => cp.name === p.targetPort)
      : ports.some((cp) => cp.containerPort === (p.targetPort ?? p.port));
    if (!ok) fail(`${id}: port ${p.name} targets ${p.targetPort}, not a port of ${targets[0].metadata.name}`);
  }
}
for (const pdb of byKind("PodDisruptionBudget")) {
  const targets = workloads.filter((w) => matches(pdb.spec.selector.matchLabels, podLabels(w)));
  if (targets.length !== 1) fail(`PodDisruptionBudget/${pdb.metadata.name}: selects ${targets.length} workloads`);
  else if ((targets[0].spec.replicas ?? 1) < 2) fail(`PodDisruptionBudget/${pdb.metadata.name}: workload has < 2 replicas`);
}

// --- the kvserve StatefulSet against the server's flags ---------------------------
const sts = byKind("StatefulSet").find((s) => s.metadata.name === "kvserve");
if (!sts) fail("no StatefulSet kvserve");
else {
  const c = sts.spec.template.spec.containers.find((x) => x.name === "kvserve");
  const env = Object.fromEntries((c.env || []).filter((e) => "value" in e).map((e) => [e.name, e.value]));
  const portOf = (addr) => Number(String(addr).split(":").pop());
  const port = (name) => c.ports.find((p) => p.name === name)?.containerPort;
  if (portOf(env.KVSERVE_LISTEN) !== port("grpc")) fail(`KVSERVE_LISTEN ${env.KVSERVE_LISTEN} vs grpc port ${port("grpc")}`);
  if (portOf(env.KVSERVE_METRICS_LISTEN) !== port("metrics")) fail(`KVSERVE_METRICS_LISTEN vs metrics port`);
  for (const v of ["KVSERVE_LISTEN", "KVSERVE_METRICS_LISTEN"]) {
    if (!String(env[v]).startsWith("0.0.0.0:")) fail(`${v} must listen on all addresses in a pod`);
  }
  for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) {
    if (probe?.grpc?.port !== port("grpc")) fail("gRPC probes must use the server's gRPC port");
  }
  const ann = sts.spec.template.metadata.annotations || {};
  if (Number(ann["prometheus.io/port"]) !== port("metrics")) fail("prometheus.io/port is not the metrics port");
  if (ann["prometheus.io/scrape"] !== "true") fail("prometheus.io/scrape is not \"true\"");
  // Shutdown: preStop sleep + the server's drain must fit the grace period.
  const preStop = c.lifecycle?.preStop?.exec?.command;
  const sleep = preStop?.[0] === "sleep" ? Number(preStop[1]) : 0;
  const drain = Number(env.KVSERVE_SHUTDOWN_GRACE_SECONDS ?? 10);
  const grace = sts.spec.template.spec.terminationGracePeriodSeconds ?? 30;
  if (!(grace >= sleep + drain + 5)) fail(`terminationGracePeriodSeconds ${grace} < preStop ${sleep} + drain ${drain} + 5`);
  // Session dir on the per-replica claim.
  const mount = c.volumeMounts.find((m) => m.mountPath === env.KVSERVE_SESSION_DIR);
  const claims = (sts.spec.volumeClaimTemplates || []).map((t) => t.metadata.name);
  if (!mount || !claims.includes(mount.name)) fail("KVSERVE_SESSION_DIR is not on a volumeClaimTemplate");
  // Every KVSERVE_* variable names a real flag.
  if (args.flags) {
    const help = fs.readFileSync(args.flags, "utf8");
    const flags = new Set([...help.matchAll(/--([a-z0-9_]+)/g)].map((m) => m[1]));
    for (const e of c.env) {
      if (!e.name.startsWith("KVSERVE_")) continue;
      const flag = e.name.slice("KVSERVE_".length).toLowerCase();
      if (!flags.has(flag)) fail(`${e.name}: kvserve has no flag --${flag}`);
    }
  }
  // The headless Service is the StatefulSet's governing service.
  const headless = byKind("Service").find((s) => s.metadata.name === sts.spec.serviceName);
  if (!headless || headless.spec.clusterIP !== "None") fail(`serviceName ${sts.spec.serviceName} is not a headless Service`);

  // --- the router: its ConfigMap is deploy/router/nginx.conf, and the
  // upstream names every replica of the StatefulSet on its gRPC port.
  const nginx = fs.readFileSync(args.nginx, "utf8");
  const cm = byKind("ConfigMap").find((m) => m.metadata.name === "kvserve-router");
  if (cm?.data?.["nginx.conf"] !== nginx) fail("ConfigMap kvserve-router nginx.conf differs from deploy/router/nginx.conf");
  const script = fs.readFileSync(path.join(path.dirname(args.nginx), "run-router.sh"), "utf8");
  if (cm?.data?.["run-router.sh"] !== script) fail("ConfigMap kvserve-router run-router.sh differs from deploy/router/run-router.sh");
  const ns = sts.metadata.namespace;
  const upstream = nginx.match(/# replicas:begin\n([\s\S]*?)# replicas:end/)?.[1] ?? "";
  const servers = [...upstream.matchAll(/^\s*server\s+([^\s;]+)/gm)].map((m) => m[1]);
  const want = [...Array(sts.spec.replicas).keys()].map(
    (i) => `${sts.metadata.name}-${i}.${sts.spec.serviceName}.${ns}.svc.cluster.local:${port("grpc")}`);
  if (JSON.stringify(servers) !== JSON.stringify(want)) fail(`nginx upstream ${servers} != replicas ${want}`);
  if (!/hash\s+\$http_x_session_id\s+consistent;/.test(nginx)) fail("nginx upstream does not hash x-session-id consistently");
  const router = byKind("Deployment").find((d) => d.metadata.name === "kvserve-router");
  const rc = router?.spec.template.spec.containers[0];
  const listen = [...nginx.matchAll(/^\s*listen\s+(\d+)([^;]*);/gm)].map((m) => [Number(m[1]), m[2]]);
  const grpcListen = listen.find(([, opts]) => opts.includes("http2"))?.[0];
  if (grpcListen !== rc?.ports.find((p) => p.name === "grpc")?.containerPort) fail("router grpc port != nginx http2 listen port");
  const healthListen = listen.find(([, opts]) => !opts.includes("http2"))?.[0];
  if (healthListen !== rc?.ports.find((p) => p.name === "health")?.containerPort) fail("router health port != nginx plain listen port");
  const mountPath = rc?.volumeMounts.find((m) => m.name === "config")?.mountPath;
  const confEnv = rc?.env?.find((e) => e.name === "NGINX_CONF")?.value;
  if (confEnv !== `${mountPath}/nginx.conf`) fail("router NGINX_CONF is not the mounted nginx.conf");
  if ((router?.spec.template.spec.terminationGracePeriodSeconds ?? 30) < grace) fail("router grace shorter than the replicas'");
}

if (problems.length) {
  console.error(`k8s manifests: ${problems.length} problem(s)\n  ` + problems.join("\n  "));
  process.exit(1);
}
console.error(`k8s manifests: ${objects.length} objects in ${files.length} files valid against the ` +
  `Kubernetes schemas; selectors, ports, flags, probes, security and shutdown timing consistent`);
