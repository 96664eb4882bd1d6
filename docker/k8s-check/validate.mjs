// Validates Kubernetes manifests offline, with no cluster:
//   node validate.mjs FILE.yaml...
// from a copy of this directory with its packages installed (`npm ci`, as
// docker/container-test.sh does in a scratch directory).
//
// Three passes over every document of every file:
//   1. kubernetes-models' validators, generated from the Kubernetes OpenAPI
//      schemas: required fields, types, enums and formats;
//   2. the field lists of @kubernetes/client-node's models, for unknown
//      fields, which pass 1 lets through: a misspelt enableServiceLinks
//      would be dropped without a word by the API server;
//   3. a ConfigMap's data entries named *.yaml or *.yml must parse as YAML.
// Prints one line per document; exits 1 if any failed.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import * as k8s from "@kubernetes/client-node";

// The fields unknown to `type` (a client-node model name, such as
// "V1Deployment", "Array<V1Container>" or "{ [key: string]: string; }")
// anywhere in `val`, as "path: message" strings appended to `errs`.
function unknownFields(val, type, path, errs) {
  if (val === null || val === undefined) return;
  let m = /^Array<(.+)>$/.exec(type);
  if (m) {
    if (!Array.isArray(val)) errs.push(`${path}: expected a list`);
    else val.forEach((v, i) => unknownFields(v, m[1], `${path}[${i}]`, errs));
    return;
  }
  m = /^\{ \[key: string\]: (.+); \}$/.exec(type);
  if (m) {
    if (typeof val !== "object" || Array.isArray(val))
      errs.push(`${path}: expected a map`);
    else
      for (const [k, v] of Object.entries(val))
        unknownFields(v, m[1], `${path}.${k}`, errs);
    return;
  }
  const model = k8s[type];
  if (!model || !Array.isArray(model.attributeTypeMap)) return; // a scalar
  if (typeof val !== "object" || Array.isArray(val)) {
    errs.push(`${path}: expected an object (${type})`);
    return;
  }
  const fields = new Map(model.attributeTypeMap.map((a) => [a.baseName, a.type]));
  for (const [k, v] of Object.entries(val)) {
    if (!fields.has(k)) errs.push(`${path}.${k}: unknown field of ${type}`);
    else unknownFields(v, fields.get(k), `${path}.${k}`, errs);
  }
}

let failed = 0;
for (const file of process.argv.slice(2)) {
  const docs = parseAllDocuments(readFileSync(file, "utf8"), { uniqueKeys: true });
  for (const [i, doc] of docs.entries()) {
    const where = docs.length > 1 ? `${file}#${i + 1}` : file;
    const errs = doc.errors.map((e) => `yaml: ${e.message}`);
    const obj = errs.length ? null : doc.toJS();
    let what = "?";
    if (obj && (typeof obj !== "object" || !obj.apiVersion || !obj.kind)) {
      errs.push("not a Kubernetes object (no apiVersion and kind)");
    } else if (obj) {
      const { apiVersion, kind } = obj;
      what = `${kind} ${apiVersion} ${obj.metadata?.name ?? "(no name)"}`;
      const slash = apiVersion.lastIndexOf("/");
      const version = apiVersion.slice(slash + 1);
      let Model;
      try {
        Model = (await import(`kubernetes-models/${apiVersion}`))[kind];
      } catch {
        Model = undefined;
      }
      if (!Model) {
        errs.push(`no schema for ${kind} in ${apiVersion}`);
      } else {
        try {
          new Model(obj).validate();
        } catch (e) {
          errs.push(`schema: ${e.message}`);
        }
        const name = version[0].toUpperCase() + version.slice(1) + kind;
        if (k8s[name]) unknownFields(obj, name, kind, errs);
        else errs.push(`no client-node model ${name} to check fields against`);
      }
      if (kind === "ConfigMap")
        for (const [key, text] of Object.entries(obj.data ?? {})) {
          if (!/\.ya?ml$/.test(key)) continue;
          for (const d of parseAllDocuments(text))
            for (const e of d.errors) errs.push(`data.${key}: yaml: ${e.message}`);
        }
    }
    if (errs.length) {
      failed++;
      console.log(`FAIL ${where}: ${what}`);
      for (const e of errs) console.log(`  ${e.replace(/\n/g, "\n  ")}`);
    } else {
      console.log(`ok   ${where}: ${what}`);
    }
  }
}
process.exit(failed ? 1 : 0);
