// attnd's own rules for its Kubernetes manifests and compose file, beyond
// what the schemas can say (validate.mjs checks those):
//   node policy.mjs --keys host,port,... [--compose compose.yaml] FILE.yaml...
// --keys: attnd's configuration keys (from `attnd --print-config`): attnd
// ignores ATTND_ variables it does not know, so a misspelt key would be
// dropped without a word. Prints each rule checked; exits 1 if any failed.
import { readFileSync } from "node:fs";
import { relative } from "node:path";
import { parseAllDocuments, parse } from "yaml";

const args = process.argv.slice(2);
let keys = null, compose = null;
const files = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--keys") keys = new Set(args[++i].split(","));
  else if (args[i] === "--compose") compose = args[++i];
  else files.push(args[i]);
}

const objs = files.flatMap((f) =>
  parseAllDocuments(readFileSync(f, "utf8")).map((d) => ({ file: f, obj: d.toJS() })),
);
const find = (kind, name) =>
  objs.filter((o) => o.obj?.kind === kind && (!name || o.obj.metadata?.name === name));

let failed = 0;
function rule(ok, what) {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failed++;
}
const matches = (selector, labels) =>
  Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
const seconds = (v) => Number(v);
// ATTND_LAYERS' paths (comma-separated); whether a path is a directory or
// under it.
const layerPaths = (v) =>
  String(v ?? "")
    .split(",")
    .map((p) => p.trim())
    .filter(Boolean);
const under = (path, dir) => path === dir || path.startsWith(dir.replace(/\/+$/, "") + "/");

// The Deployment and what it reads. Variants of it (gpu/deployment.yaml)
// replace it by name: each is checked on its own, and the objects that
// point at the pods must hold for every one.
const deps = find("Deployment");
const depNames = [...new Set(deps.map((d) => d.obj?.metadata?.name))];
rule(
  deps.length > 0 && depNames.length === 1,
  `one Deployment, its variants replacing it by name (found ${deps.length}: ${depNames})`,
);
const GPU = "nvidia.com/gpu";

// The rules of one variant, each line prefixed with its file; returns what
// the rules after it need.
function checkDeployment({ file, obj: dep }) {
  const at = (what) => `${relative(process.cwd(), file)}: ${what}`;
  const pod = dep?.spec?.template?.spec ?? {};
  const podLabels = dep?.spec?.template?.metadata?.labels ?? {};
  const c = pod.containers?.[0] ?? {};
  const sc = { ...(pod.securityContext ?? {}), ...(c.securityContext ?? {}) };

  rule(
    pod.enableServiceLinks === false,
    at("enableServiceLinks: false (a Service named attnd would set ATTND_PORT=tcp://...)"),
  );
  rule(c.livenessProbe?.httpGet?.path === "/healthz", at("liveness probe on /healthz"));
  rule(c.readinessProbe?.httpGet?.path === "/readyz", at("readiness probe on /readyz"));
  // attnd listens only once its layers are loaded (serve.c), and every probe
  // until then is refused: without a startup probe the liveness probe (no
  // initial delay) restarts a pod still loading after its third failure,
  // about 20 s, and the next one too. Two minutes at least for the load.
  const window = (p) => (p?.initialDelaySeconds ?? 0) + (p?.periodSeconds ?? 10) * (p?.failureThreshold ?? 3);
  rule(
    c.startupProbe?.httpGet?.path === "/healthz" && window(c.startupProbe) >= 120,
    at(`startup probe on /healthz, ${c.startupProbe ? window(c.startupProbe) : 0} s >= 120 s for the layers to load before liveness applies`),
  );
  for (const kind of ["requests", "limits"])
    rule(
      c.resources?.[kind]?.cpu !== undefined && c.resources?.[kind]?.memory !== undefined,
      at(`resources.${kind}: cpu and memory`),
    );
  rule(sc.runAsNonRoot === true, at("runAsNonRoot: true"));
  rule(sc.readOnlyRootFilesystem === true, at("readOnlyRootFilesystem: true"));
  rule(sc.allowPrivilegeEscalation === false, at("allowPrivilegeEscalation: false"));
  rule((sc.capabilities?.drop ?? []).includes("ALL"), at("capabilities: drop ALL"));
  rule(matches(dep?.spec?.selector?.matchLabels, podLabels), at("the Deployment's selector matches its pods"));

  // The ConfigMap it reads, and the container's own env over it, checked
  // against attnd's own keys.
  const cmName = c.envFrom?.find((e) => e.configMapRef)?.configMapRef?.name;
  const cm = find("ConfigMap", cmName)[0]?.obj;
  rule(!!cm, at(`envFrom reads ConfigMap ${cmName}, which is defined`));
  const own = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]));
  const env = { ...(cm?.data ?? {}), ...own };
  if (keys) {
    const unknown = Object.keys(env).filter(
      (k) => !k.startsWith("ATTND_") || !keys.has(k.slice(6).toLowerCase()),
    );
    rule(unknown.length === 0, at(`every ConfigMap and env key is an attnd key${unknown.length ? `: not ${unknown}` : ""}`));
  }
  const port = c.ports?.find((p) => p.name === "http")?.containerPort;
  rule(String(env.ATTND_PORT ?? 8080) === String(port), at(`ATTND_PORT (${env.ATTND_PORT}) = containerPort (${port})`));

  // The layers: on a PersistentVolumeClaim, mounted read-only. attnd maps the
  // files and never writes them; a writable mount would let a pod change what
  // every other pod serves.
  const layers = layerPaths(env.ATTND_LAYERS);
  rule(layers.length > 0, at(`the ConfigMap sets ATTND_LAYERS (${env.ATTND_LAYERS ?? "unset"})`));
  for (const path of layers) {
    const m = (c.volumeMounts ?? []).find((v) => under(path, v.mountPath));
    const claim = pod.volumes?.find((v) => v.name === m?.name)?.persistentVolumeClaim;
    const pvc = claim && find("PersistentVolumeClaim", claim.claimName)[0]?.obj;
    rule(
      m?.readOnly === true && claim?.readOnly === true,
      at(`layers ${path}: volume ${m?.name ?? "(none)"} mounted at ${m?.mountPath ?? "(nowhere)"}, readOnly: true, from a PersistentVolumeClaim with readOnly: true`),
    );
    rule(
      (pvc?.spec?.accessModes ?? []).includes("ReadOnlyMany"),
      at(`layers ${path}: PersistentVolumeClaim ${claim?.claimName} is defined, ReadOnlyMany`),
    );
  }

  // Termination: longer than the longest request and than preStop + drain.
  const grace = pod.terminationGracePeriodSeconds ?? 30;
  const longest = Number(env.ATTND_MAX_TIMEOUT_MS ?? 600000) / 1000;
  const drain = Number(env.ATTND_DRAIN_TIMEOUT_S ?? 60);
  const pre = c.lifecycle?.preStop?.exec?.command;
  const preStop = pre?.[0] === "sleep" ? seconds(pre[1]) : 0;
  rule(grace > longest, at(`terminationGracePeriodSeconds ${grace} > longest request ${longest} s`));
  rule(drain >= longest, at(`drain_timeout_s ${drain} >= longest request ${longest} s`));
  rule(grace > preStop + drain, at(`terminationGracePeriodSeconds ${grace} > preStop ${preStop} + drain ${drain} s`));

  // GPUs: a variant that asks for nvidia.com/gpu runs the CUDA image
  // (docker/Dockerfile, --build-arg CUDA=1) with a backend that uses it;
  // the others ask for none (the CPU image would hold a GPU idle).
  const gpus = c.resources?.limits?.[GPU];
  if (gpus === undefined) {
    rule(c.resources?.requests?.[GPU] === undefined && !/^attnd-cuda:/.test(c.image ?? ""),
      at(`no ${GPU}, and the CPU image (${c.image})`));
  } else {
    const req = c.resources?.requests?.[GPU];
    rule(Number.isInteger(Number(gpus)) && Number(gpus) >= 1 && (req === undefined || String(req) === String(gpus)),
      at(`limits ${GPU}: ${gpus}, a whole number of GPUs (requests ${req ?? "unset"}: equal or unset)`));
    rule(/^attnd-cuda:/.test(c.image ?? ""), at(`the CUDA image attnd-cuda (${c.image})`));
    rule(["auto", "cuda"].includes(env.ATTND_BACKEND),
      at(`ATTND_BACKEND auto or cuda (${env.ATTND_BACKEND ?? "unset: cpu"}), so that the GPU is used`));
  }
  return { dep, podLabels, c, env, longest };
}

const variants = deps.map(checkDeployment);
// The rules below read the first variant's: the others must agree with it
// on what those rules depend on.
const { dep, podLabels, c, env, longest } = variants[0] ?? { podLabels: {}, c: {}, env: {}, longest: 0 };
for (const v of variants.slice(1))
  rule(
    JSON.stringify(v.podLabels) === JSON.stringify(podLabels) &&
      JSON.stringify(v.c.ports) === JSON.stringify(c.ports) &&
      v.env.ATTND_MAX_BODY_BYTES === env.ATTND_MAX_BODY_BYTES && v.longest === longest,
    `${relative(process.cwd(), deps[variants.indexOf(v)].file)}: the same pod labels, ports and limits as ${relative(process.cwd(), deps[0].file)}`,
  );

// What points at the Deployment's pods.
for (const { obj } of find("Service"))
  rule(
    matches(obj.spec?.selector, podLabels) &&
      obj.spec.ports.every((p) => c.ports?.some((cp) => cp.name === p.targetPort || cp.containerPort === p.targetPort)),
    `Service ${obj.metadata.name} selects the pods, on a port they open`,
  );
for (const { obj } of find("PodDisruptionBudget"))
  rule(matches(obj.spec?.selector?.matchLabels, podLabels), `PodDisruptionBudget ${obj.metadata.name} selects the pods`);
const hpas = find("HorizontalPodAutoscaler");
rule(hpas.length > 0, `a HorizontalPodAutoscaler (found ${hpas.length})`);
for (const { file, obj } of hpas)
  rule(
    obj.spec?.scaleTargetRef?.kind === "Deployment" && obj.spec.scaleTargetRef.name === dep?.metadata?.name,
    `HorizontalPodAutoscaler in ${file} scales Deployment ${dep?.metadata?.name}`,
  );

// Ingresses (ingress-nginx): every backend a Service of the pods; the
// session paths hashed by the id's first 16 hex digits, on a Service that
// no round-robin path shares (ingress-nginx balances per Service), and a
// step never sent again once sent; limits at least the ConfigMap's.
const ann = (o, k) => o.metadata?.annotations?.[`nginx.ingress.kubernetes.io/${k}`];
const paths = (o) => (o.spec?.rules ?? []).flatMap((r) => r.http?.paths ?? []);
const bytes = (v) => {
  const m = /^(\d+)([kKmMgG]?)$/.exec(String(v ?? ""));
  return m ? Number(m[1]) * { "": 1, k: 1 << 10, m: 1 << 20, g: 1 << 30 }[m[2].toLowerCase()] : NaN;
};
const ingresses = find("Ingress");
for (const { obj } of ingresses) {
  const name = obj.metadata?.name;
  for (const p of paths(obj)) {
    const svc = find("Service", p.backend?.service?.name)[0]?.obj;
    rule(
      !!svc && matches(svc.spec?.selector, podLabels) && svc.spec.ports.some((sp) => sp.name === p.backend.service.port?.name),
      `Ingress ${name} ${p.path}: Service ${p.backend?.service?.name} is defined, selects the pods, port ${p.backend?.service?.port?.name}`,
    );
  }
  const body = bytes(ann(obj, "proxy-body-size")), max = bytes(env.ATTND_MAX_BODY_BYTES ?? "64M");
  rule(body >= max, `Ingress ${name}: proxy-body-size ${ann(obj, "proxy-body-size")} >= ATTND_MAX_BODY_BYTES ${env.ATTND_MAX_BODY_BYTES}`);
  rule(
    Number(ann(obj, "proxy-read-timeout")) > longest,
    `Ingress ${name}: proxy-read-timeout ${ann(obj, "proxy-read-timeout")} s > longest request ${longest} s`,
  );
}
if (ingresses.length) {
  const hashed = ingresses.filter(({ obj }) => ann(obj, "upstream-hash-by"));
  rule(hashed.length === 1, `one Ingress hashes the session paths (found ${hashed.length})`);
  const s = hashed[0]?.obj;
  const sp = s ? paths(s) : [];
  const by = ann(s, "upstream-hash-by");
  const cap = /^\$(\d+)$/.exec(by ?? "");
  rule(ann(s, "use-regex") === "true" && !!cap, `Ingress ${s?.metadata?.name}: use-regex, upstream-hash-by a capture of its path (${by})`);
  // The path as ingress-nginx writes it, `location ~* "^PATH"`, and the key
  // it gives: every request of a session, its fork's too, one key, its
  // first 16 hex digits; nothing else of the API a session path.
  const id = "0123456789abcdef" + "fedcba9876543210", fork = "0123456789abcdef" + "00112233aabbccdd";
  const key = (uri) => {
    for (const p of sp) {
      const m = new RegExp("^" + p.path, "i").exec(uri);
      if (m) return cap ? (m[Number(cap[1])] ?? "") : "";
    }
    return null;
  };
  const mine = [`/v1/sessions/${id}/attention`, `/v1/sessions/${id}`, `/v1/sessions/${id}/fork`, `/v1/sessions/${id}/truncate`, `/v1/sessions/${fork}/attention`];
  const keys = new Set(mine.map(key));
  rule(keys.size === 1 && keys.has(id.slice(0, 16)), `Ingress ${s?.metadata?.name}: a session's requests and its fork's all keyed ${[...keys].join(", ")}`);
  const others = ["/v1/sessions", "/v1/attention", "/v1/sessions/abc/attention", "/healthz", "/v2/models/attention/infer"];
  rule(others.every((u) => key(u) === null), `Ingress ${s?.metadata?.name}: no other path of the API matches (${others.join(" ")})`);
  const next = String(ann(s, "proxy-next-upstream") ?? "error timeout").split(/\s+/);
  rule(!next.includes("non_idempotent") && !next.includes("http_503"), `Ingress ${s?.metadata?.name}: a step is not sent again once sent (proxy-next-upstream ${next.join(" ")})`);
  const hashedSvcs = new Set(sp.map((p) => p.backend?.service?.name));
  const shared = ingresses.filter(({ obj }) => !ann(obj, "upstream-hash-by")).flatMap(({ obj }) => paths(obj)).filter((p) => hashedSvcs.has(p.backend?.service?.name));
  rule(shared.length === 0, `the hashed Service(s) ${[...hashedSvcs]} serve no round-robin path${shared.length ? `: ${shared.map((p) => p.path)}` : ""}`);
}

// compose.yaml: the replicas' variables are attnd keys, a stop waits out the
// drain, and the layers are on a read-only volume.
if (compose) {
  const y = parse(readFileSync(compose, "utf8"), { merge: true });
  const replicas = Object.entries(y.services).filter(([, s]) => s.image?.startsWith("attnd:"));
  rule(replicas.length === 3, `compose: three attnd replicas (found ${replicas.length})`);
  for (const [name, s] of replicas) {
    const e = s.environment ?? {};
    const bad = keys ? Object.keys(e).filter((k) => !k.startsWith("ATTND_") || !keys.has(k.slice(6).toLowerCase())) : [];
    const grace = Number(String(s.stop_grace_period ?? "10s").replace(/s$/, ""));
    const d = Number(e.ATTND_DRAIN_TIMEOUT_S ?? 60);
    rule(bad.length === 0 && grace > d, `compose: ${name}: attnd keys only, stop_grace_period ${grace} s > drain ${d} s`);
    // max_memory_bytes = auto is 3/4 of the container's limit: without one,
    // of the host's memory, for each replica.
    const mem = s.deploy?.resources?.limits?.memory ?? s.mem_limit;
    rule(
      mem !== undefined || e.ATTND_MAX_MEMORY_BYTES !== undefined,
      `compose: ${name}: a memory limit (${mem ?? "none"}) that max_memory_bytes = auto is sized from, or max_memory_bytes set`,
    );
    // Short ("SRC:DST[:OPTS]", SRC maybe "${VAR:-default}") or long syntax.
    const mounts = (s.volumes ?? []).map((v) => {
      if (typeof v !== "string") return { target: v.target, ro: v.read_only === true };
      const [, target, opts = ""] = v.replace(/\$\{[^}]*\}/g, "VAR").split(":");
      return { target, ro: opts.split(",").includes("ro") };
    });
    const paths = layerPaths(e.ATTND_LAYERS);
    const bare = paths.filter((p) => !mounts.some((m) => m.ro && m.target && under(p, m.target)));
    rule(
      paths.length > 0 && bare.length === 0,
      `compose: ${name}: ATTND_LAYERS (${e.ATTND_LAYERS ?? "unset"}) on a read-only volume${bare.length ? `: not ${bare}` : ""}`,
    );
  }
}

process.exit(failed ? 1 : 0);
