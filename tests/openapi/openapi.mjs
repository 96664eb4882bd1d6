// Checks docs/openapi.json, and the replies the integration suites received
// against it. Run from a copy of this directory with its packages installed
// (tests/openapi/check.sh: `npm ci` into build/openapi-node):
//
//   node openapi.mjs lint DOC REPO
//     1. `redocly lint` with tests/openapi/redocly.yaml (recommended-strict:
//        its exit status decides);
//     2. the document against what it describes: the error codes and their
//        statuses against server/errors.h, /v1/info's keys against the
//        F_INFO and F_LIMIT keys of server/config.c, info.version against
//        ATTN_VERSION.
//
//   node openapi.mjs validate DOC FILE.jsonl...
//     Each line is one reply, as tests/server_harness.c records it with
//     ATTND_TEST_REPLIES: {"method", "path", "status", "content_type",
//     "header_length"?, "content_encoding"?, "body"? | "body_skipped"? |
//     "body_not_utf8"? | "body_bad_coding"?} (a compressed body inflated). For
//     each, finds the operation (the path decoded as attnd decodes it, then
//     matched against the path templates; HEAD as GET without a body), the
//     response for the status (or `default`), the media type, and validates
//     the JSON body against its schema with ajv (JSON Schema 2020-12). A
//     binary reply (application/octet-stream) has its JSON header validated
//     against the same response's application/json schema, when its
//     Inference-Header-Content-Length was recorded.
//     Replies outside the documented operations:
//       - a path no template matches takes the document's
//         `x-attnd-unrouted` responses (404, and 400/401/501, which attnd
//         answers before it looks the path up);
//       - a method the path does not document takes the 405 of the path's
//         OPTIONS (its reply without CORS), or for another status the
//         response of one of the path's operations.
//     Prints the replies checked per file and per operation, every failure
//     with its path and ajv's errors, and the operations no reply reached.
//     Exits 1 on any failure, on a status the document does not give, and
//     when there was no reply at all.
import { readFileSync, readdirSync, statSync } from "node:fs";
import { spawnSync } from "node:child_process";
import { basename, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const here = dirname(fileURLToPath(import.meta.url));
const METHODS = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];

function die(msg) {
  console.error(`openapi: ${msg}`);
  process.exit(2);
}

// ---- the document --------------------------------------------------------

// The value at JSON pointer `ptr` ("#/a/b") in doc.
function at(doc, ptr) {
  if (!ptr.startsWith("#")) die(`only local references are supported: ${ptr}`);
  let v = doc;
  for (const raw of ptr.slice(1).split("/").slice(1)) {
    const k = decodeURIComponent(raw).replaceAll("~1", "/").replaceAll("~0", "~");
    if (v === null || typeof v !== "object" || !(k in v)) die(`unresolved reference ${ptr}`);
    v = v[k];
  }
  return v;
}

const esc = (k) => String(k).replaceAll("~", "~0").replaceAll("/", "~1");

// Follows an object's $ref (a response, a parameter) to [value, pointer].
function deref(doc, v, ptr) {
  for (let n = 0; v && typeof v === "object" && typeof v.$ref === "string"; n++) {
    if (n > 16) die(`reference loop at ${ptr}`);
    ptr = v.$ref;
    v = at(doc, ptr);
  }
  return [v, ptr];
}

// attnd's path decoding (server/http/framing.c, attnd_http_unescape): %XX
// decoded, except %00, which stays as the three characters. Bytes as latin1,
// so that any byte string round-trips.
function decodePath(p) {
  const bytes = [];
  const src = Buffer.from(p, "utf8");
  const hex = (c) => (c >= 48 && c <= 57 ? c - 48 : (c | 32) >= 97 && (c | 32) <= 102 ? (c | 32) - 87 : -1);
  for (let i = 0; i < src.length; i++) {
    const hi = src[i] === 37 && i + 2 < src.length ? hex(src[i + 1]) : -1;
    const lo = hi >= 0 ? hex(src[i + 2]) : -1;
    if (lo >= 0 && (hi | lo) !== 0) {
      bytes.push((hi << 4) | lo);
      i += 2;
    } else {
      bytes.push(src[i]);
    }
  }
  return Buffer.from(bytes).toString("latin1");
}

// The path templates as regular expressions, the templates without
// parameters first (OpenAPI: concrete paths match before templated ones).
function pathMatchers(doc) {
  const list = Object.keys(doc.paths || {}).map((t) => {
    const re = t
      .split(/(\{[^}]+\})/)
      .map((part) => (part.startsWith("{") ? "([^/]+)" : part.replace(/[.*+?^$()|[\]\\]/g, "\\$&")))
      .join("");
    return { template: t, re: new RegExp(`^${re}$`), params: (t.match(/\{/g) || []).length };
  });
  return list.sort((a, b) => a.params - b.params);
}

function mediaEssence(ct) {
  return ct ? ct.split(";")[0].trim().toLowerCase() : null;
}

// ---- validate ------------------------------------------------------------

function validate(docFile, files) {
  const doc = JSON.parse(readFileSync(docFile, "utf8"));
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictTypes: false });
  addFormats(ajv);
  // The document's own members are no schema keywords: declare them, so
  // that strict mode accepts the document as the root of its schemas.
  ajv.addVocabulary(Object.keys(doc).filter((k) => !["$id", "$schema"].includes(k)));
  ajv.addSchema(doc, "openapi.json");
  const compiled = new Map();
  const validator = (ptr) => {
    if (!compiled.has(ptr)) compiled.set(ptr, ajv.compile({ $ref: `openapi.json${ptr}` }));
    return compiled.get(ptr);
  };
  const matchers = pathMatchers(doc);
  const unrouted = doc["x-attnd-unrouted"]?.responses || {};

  // Every documented operation, for the report of what went unreached.
  const seen = new Map(); // "METHOD template" -> {status: count}
  for (const [t, item] of Object.entries(doc.paths || {}))
    for (const m of METHODS) if (item[m]) seen.set(`${m.toUpperCase()} ${t}`, {});

  const failures = [];
  let total = 0;
  const perFile = [];

  for (const file of files) {
    const lines = readFileSync(file, "utf8").split("\n").filter((l) => l.trim() !== "");
    const stats = { file: basename(file), replies: lines.length, bodies: 0, skipped: 0, failed: 0 };
    perFile.push(stats);
    lines.forEach((line, i) => {
      total++;
      const where = `${basename(file)}:${i + 1}`;
      const fail = (rep, msg) => {
        stats.failed++;
        failures.push(`${where}: ${rep ? `${rep.method} ${rep.path} ${rep.status}` : "?"}: ${msg}`);
      };
      let rep;
      try {
        rep = JSON.parse(line);
      } catch (e) {
        return fail(null, `not a JSON line: ${e.message}`);
      }
      const method = String(rep.method || "GET").toLowerCase();
      const status = String(rep.status);
      const path = decodePath(String(rep.path || ""));

      // the operation, and the response for this status
      const m = matchers.find((x) => x.re.test(path));
      let response, rptr, opKey;
      if (m === undefined) {
        opKey = "(a path not in the document)";
        if (unrouted[status]) [response, rptr] = deref(doc, unrouted[status], `#/x-attnd-unrouted/responses/${status}`);
      } else {
        const item = doc.paths[m.template];
        const base = `#/paths/${esc(m.template)}`;
        const opMethod = item[method] ? method : method === "head" && item.get ? "get" : null;
        if (opMethod) {
          opKey = `${method.toUpperCase()} ${m.template}`;
          const rs = item[opMethod].responses || {};
          const k = status in rs ? status : "default" in rs ? "default" : null;
          if (k) [response, rptr] = deref(doc, rs[k], `${base}/${opMethod}/responses/${k}`);
        } else {
          opKey = `(${method.toUpperCase()}, not a method of ${m.template})`;
          const from = status === "405" && item.options ? ["options"] : METHODS.filter((x) => item[x]);
          const hit = from.find((x) => item[x].responses && status in item[x].responses);
          if (hit) [response, rptr] = deref(doc, item[hit].responses[status], `${base}/${hit}/responses/${status}`);
        }
      }
      if (!seen.has(opKey)) seen.set(opKey, {});
      const counts = seen.get(opKey);
      counts[status] = (counts[status] || 0) + 1;
      if (!response) return fail(rep, `status ${status} is not in the document for ${opKey}`);

      // the media type
      const content = response.content || {};
      const ct = mediaEssence(rep.content_type);
      const types = Object.keys(content);
      if (types.length === 0) {
        if (ct !== null && !(rep.body === "" || rep.body === undefined))
          return fail(rep, `the document gives no content, but the reply has ${rep.content_type}`);
        return;
      }
      if (ct === null) return fail(rep, `no Content-Type; the document gives ${types.join(", ")}`);
      const mt = types.find((t) => mediaEssence(t) === ct);
      if (mt === undefined) return fail(rep, `Content-Type ${rep.content_type} is not among ${types.join(", ")}`);

      // the body
      if (rep.body_not_utf8) return fail(rep, "the body is not UTF-8");
      if (rep.body_bad_coding) return fail(rep, `the body does not inflate as its Content-Encoding ${rep.content_encoding}`);
      if (rep.body_skipped !== undefined) {
        stats.skipped++;
        return;
      }
      if (rep.body === undefined) return; // not JSON (text/plain), or binary without a header length
      if (rep.body === "" && method === "head") return;
      let schemaPtr = `${rptr}/content/${esc(mt)}/schema`;
      if (ct === "application/octet-stream") {
        const j = types.find((t) => mediaEssence(t) === "application/json");
        if (j === undefined) return fail(rep, "a binary reply with a JSON header, but the response has no application/json schema for it");
        schemaPtr = `${rptr}/content/${esc(j)}/schema`;
      } else if (!(ct === "application/json" || ct.endsWith("+json"))) {
        return;
      }
      let body;
      try {
        body = JSON.parse(rep.body);
      } catch (e) {
        return fail(rep, `the body is not JSON (${e.message}): ${rep.body.slice(0, 200)}`);
      }
      const v = validator(schemaPtr);
      stats.bodies++;
      if (!v(body)) {
        const errs = v.errors
          .slice(0, 8)
          .map((e) => `    ${e.instancePath || "(the body)"} ${e.message}${e.params && Object.keys(e.params).length ? " " + JSON.stringify(e.params) : ""} [${e.schemaPath}]`)
          .join("\n");
        return fail(rep, `the body does not match ${schemaPtr}:\n${errs}\n    body: ${rep.body.slice(0, 300)}`);
      }
    });
  }

  console.log("replies by suite (file: replies, JSON bodies validated, bodies too large to record, failures):");
  for (const s of perFile) console.log(`  ${s.file}: ${s.replies} replies, ${s.bodies} bodies validated, ${s.skipped} skipped, ${s.failed} failed`);
  console.log("replies by operation (status: count):");
  const unreached = [];
  for (const [k, counts] of seen) {
    const c = Object.entries(counts);
    if (c.length === 0) unreached.push(k);
    else console.log(`  ${k}: ${c.map(([s, n]) => `${s}: ${n}`).join(", ")}`);
  }
  if (unreached.length) console.log(`operations no reply reached (${unreached.length}): ${unreached.join("; ")}`);
  for (const f of failures) console.log(`FAIL ${f}`);
  if (total === 0) {
    console.log("FAIL no reply was recorded: is ATTND_TEST_REPLIES reaching tests/server_harness.c?");
    return 1;
  }
  console.log(`openapi: ${total - failures.length} of ${total} replies match the document, ${failures.length} do not`);
  return failures.length ? 1 : 0;
}

// ---- lint ----------------------------------------------------------------

// The error table of server/errors.h: [{code, status}].
function errorTable(repo) {
  const text = readFileSync(join(repo, "server/errors.h"), "utf8");
  const rows = [...text.matchAll(/X\(\s*\w+\s*,\s*"([a-z0-9_]+)"\s*,\s*(\d{3})\s*,/g)].map((m) => ({ code: m[1], status: m[2] }));
  if (rows.length === 0) die("no rows found in server/errors.h's ATTND_ERROR_MAP");
  return rows;
}

// The integer keys of server/config.c's table that GET /v1/info shows: at
// its top level (F_INFO) and under "limits" (F_LIMIT).
function infoKeys(repo) {
  const text = readFileSync(join(repo, "server/config.c"), "utf8");
  const table = text.slice(text.indexOf("static const cfg_key_t keys[]"));
  const entries = table.slice(0, table.indexOf("};")).split(/(?=\b(?:INT_KEY|STR_KEYF|STR_KEY)\()/);
  const info = [], limits = [];
  for (const e of entries) {
    const m = /^INT_KEY\(\s*(\w+)\s*,/.exec(e);
    if (!m) continue;
    if (/\bF_INFO\b/.test(e)) info.push(m[1]);
    if (/\bF_LIMIT\b/.test(e)) limits.push(m[1]);
  }
  if (info.length === 0 || limits.length === 0) die("no F_INFO or F_LIMIT keys found in server/config.c");
  return { info, limits };
}

const sameSet = (a, b) => a.length === b.length && [...a].sort().join() === [...b].sort().join();

// What the document's list `doc` lacks of the code's `code`, and has that
// the code does not, so that a failure names the row to add or remove.
function setDiff(doc, code, what) {
  const lacks = code.filter((x) => !doc.includes(x)), extra = doc.filter((x) => !code.includes(x));
  return [lacks.length ? `lacks [${lacks}] of ${what}` : "", extra.length ? `has [${extra}] besides ${what}` : ""].filter(Boolean).join(", and ");
}

function lint(docFile, repo) {
  const redocly = join(here, "node_modules/.bin/redocly");
  const r = spawnSync(redocly, ["lint", "--config", join(repo, "tests/openapi/redocly.yaml"), "--format", "codeframe", docFile], {
    encoding: "utf8",
    env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_COLOR: "1" },
  });
  if (r.error) die(`cannot run ${redocly}: ${r.error.message}`);
  // Pass or fail is redocly's exit status alone. tests/openapi/redocly.yaml
  // extends `recommended-strict`, so every rule that would only warn is an
  // error there; what redocly says about itself (a notice about the Node
  // version it runs on, say) is printed and never read as a failure.
  const out = (r.stdout + r.stderr).trim();
  const problems = [];
  if (r.status !== 0) problems.push(`redocly lint (exit ${r.status}):\n${out}`);
  else console.log(`redocly lint:\n${out.replace(/^/gm, "  ")}`);

  const doc = JSON.parse(readFileSync(docFile, "utf8"));
  const s = doc.components?.schemas || {};
  const rows = errorTable(repo);
  const docCodes = s.ErrorCode?.enum || [];
  if (!sameSet(docCodes, rows.map((x) => x.code)))
    problems.push(`components.schemas.ErrorCode ${setDiff(docCodes, rows.map((x) => x.code), "the codes of server/errors.h")}`);
  for (const st of new Set(rows.map((x) => x.status))) {
    const want = rows.filter((x) => x.status === st).map((x) => x.code);
    const got = s[`Error${st}`]?.allOf?.[1]?.properties?.error?.properties?.code?.enum;
    if (!got) problems.push(`components.schemas.Error${st} is missing; server/errors.h gives ${st} to [${want}]`);
    else if (!sameSet(got, want)) problems.push(`components.schemas.Error${st}'s code enum ${setDiff(got, want, `the codes server/errors.h gives ${st}`)}`);
  }
  for (const k of Object.keys(s).filter((k) => /^Error\d{3}$/.test(k)))
    if (!rows.some((x) => `Error${x.status}` === k)) problems.push(`components.schemas.${k}: server/errors.h has no code with that status`);

  const keys = infoKeys(repo);
  const info = s.Info?.properties || {};
  // the members that are not configuration keys (tls: with HTTPS only)
  const own = ["version", "limits", "backend", "tls"];
  const top = Object.keys(info).filter((k) => !own.includes(k));
  if (!sameSet(top, keys.info)) problems.push(`components.schemas.Info's properties ${setDiff(top, keys.info, "the keys server/config.c marks F_INFO")}`);
  const topReq = (s.Info?.required || []).filter((k) => !own.includes(k));
  if (!sameSet(topReq, keys.info)) problems.push(`components.schemas.Info.required ${setDiff(topReq, keys.info, "the keys server/config.c marks F_INFO")}`);
  const lim = Object.keys(info.limits?.properties || {});
  if (!sameSet(lim, keys.limits)) problems.push(`components.schemas.Info.limits' properties ${setDiff(lim, keys.limits, "the keys server/config.c marks F_LIMIT")}`);
  const req = info.limits?.required || [];
  if (!sameSet(req, keys.limits)) problems.push(`components.schemas.Info.limits.required ${setDiff(req, keys.limits, "the keys server/config.c marks F_LIMIT")}`);

  const version = /#define ATTN_VERSION "([^"]+)"/.exec(readFileSync(join(repo, "include/attn/attn.h"), "utf8"))?.[1];
  if (doc.info?.version !== version) problems.push(`info.version is ${doc.info?.version}; include/attn/attn.h's ATTN_VERSION is ${version}`);

  if (problems.length) {
    for (const p of problems) console.log(`FAIL ${p}`);
    return 1;
  }
  console.log(`the document agrees with server/errors.h (${rows.length} codes), server/config.c (${keys.info.length} info keys, ${keys.limits.length} limits) and ATTN_VERSION ${version}`);
  return 0;
}

// ---- main ----------------------------------------------------------------

const [cmd, doc, ...rest] = process.argv.slice(2);
if (cmd === "lint" && doc && rest.length === 1) {
  process.exit(lint(doc, rest[0]));
} else if (cmd === "validate" && doc && rest.length) {
  // a directory stands for its *.jsonl files
  const files = rest.flatMap((f) =>
    statSync(f).isDirectory() ? readdirSync(f).filter((n) => n.endsWith(".jsonl")).sort().map((n) => join(f, n)) : [f],
  );
  process.exit(validate(doc, files));
} else {
  die("usage: node openapi.mjs lint DOC REPO | validate DOC FILE.jsonl|DIR...");
}
