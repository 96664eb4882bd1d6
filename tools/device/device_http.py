#!/usr/bin/env python3
"""tools/device/device_http.py: what attnd's server says about the GPU,
checked against a running attnd on 127.0.0.1 (tools/device/check.sh).

  device_http.py serving PORT
      attnd serves on the GPU (backend cuda): after a request it computes
      there, its /metrics say the device is usable, has a budget of which
      nothing is held once the request is answered, a pool that kept
      memory, and time in each stage on cuda; /healthz, /readyz and the
      OIP's health answer 200.
  device_http.py budget PORT
      attnd runs with backend auto and a GPU budget of 1 MiB: a request
      naming cuda that needs more gets 422 limit_exceeded naming backend,
      and one naming no backend computes on the cpu.

Prints what it checked; exits 1 on the first check that fails.
"""
import json
import random
import sys
import urllib.error
import urllib.request


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}",
                                    timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/attention",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metrics(port):
    status, text = get(port, "/metrics")
    check(status == 200, f"/metrics answered {status}")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


def check(ok, what):
    print(("ok:   " if ok else "FAIL: ") + what)
    if not ok:
        sys.exit(1)


def request(L=512, E=128, H=4, **extra):
    rng = random.Random(1)
    q = [[round(rng.uniform(-1, 1), 4) for _ in range(E)] for _ in range(L)]
    return dict({"query": q, "num_heads": H, "mask": {"causal": True}}, **extra)


def serving(port):
    status, body = post(port, request())
    check(status == 200, f"a request on the GPU: {status}")
    m = metrics(port)
    show = [k for k in m if k.startswith("attnd_device")
            or k.startswith("attnd_backend_stage_seconds_total")]
    for k in show:
        print(f"      {k} {m[k]:.0f}" if "bytes" in k else f"      {k} {m[k]}")
    check(m.get("attnd_device_usable") == 1, "attnd_device_usable is 1")
    check(m.get("attnd_device_memory_limit_bytes", 0) > 0,
          "the GPU budget (max_device_memory_bytes, auto) is set")
    check(m.get("attnd_device_memory_held_bytes") == 0,
          "every answered request gave its GPU memory back")
    check(m.get('attnd_device_pool_bytes{state="reserved"}', 0) > 0,
          "CUDA's pool kept memory for the next call")
    check(m.get('attnd_device_bytes{state="total"}', 0) > 0,
          "the device's memory is read")
    check(m.get('attnd_backend_stage_seconds_total{backend="cuda",'
                'stage="attention"}', 0) > 0, "attention time on cuda")
    for path in ("/healthz", "/readyz", "/v2/health/live", "/v2/health/ready"):
        status, _ = get(port, path)
        check(status == 200, f"{path} answers 200 ({status})")


def budget(port):
    m0 = metrics(port)
    check(m0.get("attnd_device_memory_limit_bytes") == 1 << 20,
          "the GPU budget is the 1 MiB given")
    status, body = post(port, request(backend="cuda"))
    err = body.get("error", {}) if isinstance(body, dict) else {}
    check(status == 422 and err.get("code") == "limit_exceeded"
          and err.get("field") == "backend",
          f"over the GPU budget, backend cuda: {status} {err}")
    status, body = post(port, request())
    check(status == 200, f"over the GPU budget, backend auto: {status}")
    m1 = metrics(port)
    cpu = 'attnd_backend_requests_total{backend="cpu"}'
    cuda = 'attnd_backend_requests_total{backend="cuda"}'
    check(m1[cpu] == m0[cpu] + 1 and m1[cuda] == m0[cuda],
          "under auto it computed on the cpu")
    status, body = post(port, request(L=8, E=16, H=2))
    check(status == 200, f"within the budget: {status}")
    m2 = metrics(port)
    check(m2[cuda] == m1[cuda] + 1, "within the budget, auto used the GPU")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("serving", "budget"):
        sys.exit(__doc__)
    {"serving": serving, "budget": budget}[sys.argv[1]](int(sys.argv[2]))
