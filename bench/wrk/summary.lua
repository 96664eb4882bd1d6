-- bench/wrk/summary.lua: the one-line summary wrk's scripts here print at
-- the end (loaded by them with dofile), in attnd-load's terms. wrk counts
-- every status other than 2xx and 3xx together ("status"), and measures
-- latency from the moment it sends (a closed loop).
function done(summary, latency, requests)
  local s = summary.duration / 1e6
  local e = summary.errors
  io.write(string.format(
    "wrk: %d requests in %.2f s, %.1f req/s; latency ms p50 %.3f p90 %.3f " ..
    "p99 %.3f p99.9 %.3f max %.3f; errors: status %d, connect %d, read %d, " ..
    "write %d, timeout %d\n",
    summary.requests, s, summary.requests / s,
    latency:percentile(50) / 1e3, latency:percentile(90) / 1e3,
    latency:percentile(99) / 1e3, latency:percentile(99.9) / 1e3,
    latency.max / 1e3, e.status, e.connect, e.read, e.write, e.timeout))
end
