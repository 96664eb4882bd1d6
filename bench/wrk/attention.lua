-- bench/wrk/attention.lua: wrk sending the request of one attnd-load step.
--
-- attnd-load writes the body of a step's first request with --dump-body
-- (same shape options, same seed: the same bytes); this script POSTs it as
-- application/json on every request, as attnd-load does with --variants 1,
-- and prints a summary in attnd-load's terms at the end. wrk counts every
-- status other than 2xx and 3xx together ("status" below), and measures
-- latency from the moment it sends (a closed loop, like attnd-load's
-- --concurrency). Usage:
--
--   build/attnd-load --lengths 512 --dump-body /tmp/body.json
--   wrk -t1 -c4 -d10s -s bench/wrk/attention.lua \
--       http://127.0.0.1:8080/v1/attention -- /tmp/body.json
--
-- and compare with
--
--   build/attnd-load --url http://127.0.0.1:8080 --lengths 512 \
--       --concurrency 4 --duration 10 --variants 1

function init(args)
  local path = args[1]
  if path == nil then
    error("usage: wrk ... -s attention.lua URL -- BODY_FILE")
  end
  local f = assert(io.open(path, "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "summary.lua")
