// Writes the copy of deployment.yaml that docker/container-test.sh starts
// with `podman kube play`:
//   node podman-variant.mjs IN.yaml OUT.yaml NAME HOSTPORT
// podman (4.3) publishes every containerPort on the host, so replicas of one
// pod would all claim the same host port: this copy runs one replica, named
// NAME, published on 127.0.0.1:HOSTPORT; and each persistentVolumeClaim is
// renamed NAME-CLAIM, the podman volume the test makes and fills for it
// (kube play mounts the volume named like the claim). Everything else is
// unchanged.
import { readFileSync, writeFileSync } from "node:fs";
import { parse, stringify } from "yaml";

const [inFile, outFile, name, hostPort] = process.argv.slice(2);
const d = parse(readFileSync(inFile, "utf8"));
d.metadata.name = name;
d.spec.replicas = 1;
const port = d.spec.template.spec.containers[0].ports[0];
port.hostPort = Number(hostPort);
port.hostIP = "127.0.0.1";
for (const v of d.spec.template.spec.volumes ?? [])
  if (v.persistentVolumeClaim) v.persistentVolumeClaim.claimName = `${name}-${v.persistentVolumeClaim.claimName}`;
writeFileSync(outFile, stringify(d));
