-- bench/wrk/step.lua: wrk stepping KV-cache sessions (bench/wrk/small.sh).
--
--   wrk -t1 -c64 -d5s -s bench/wrk/step.lua http://127.0.0.1:8080 -- \
--       STEP_BODY_FILE PREFILL LIMIT ID...
--
-- Every request is a one-token step of the next session in turn (the
-- body: STEP_BODY_FILE, the same new token every time), so that with more
-- sessions than connections no two steps of one session are in flight at
-- once. A session that has taken LIMIT steps is truncated back to PREFILL
-- tokens by its next request instead, so that every step attends over at
-- most PREFILL + LIMIT keys; a truncate that finds a step of its session
-- still in flight (409 session_busy, which names the session) is sent
-- again at the session's next turn. One wrk thread (-t1): the turn is one
-- counter.

local ids, steps, index = {}, {}, {}
local body, prefill, limit
local n = 0
local headers = {["Content-Type"] = "application/json"}

function init(args)
  local f = assert(io.open(args[1], "rb"))
  body = f:read("*a")
  f:close()
  prefill = tonumber(args[2])
  limit = tonumber(args[3])
  for i = 4, #args do
    ids[#ids + 1] = args[i]
    steps[#ids] = 0
    index[args[i]] = #ids
  end
  assert(#ids > 0, "usage: ... -- BODY PREFILL LIMIT ID...")
end

function request()
  n = n + 1
  local i = n % #ids + 1
  local path = "/v1/sessions/" .. ids[i]
  if steps[i] >= limit then
    steps[i] = 0
    return wrk.format("POST", path .. "/truncate", headers,
                      '{"length":' .. prefill .. '}')
  end
  steps[i] = steps[i] + 1
  return wrk.format("POST", path .. "/attention", headers, body)
end

function response(status, headers, body)
  if status == 409 then
    local i = index[body:match("session (%x+)")]
    if i then
      steps[i] = limit
    end
  end
end

dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "summary.lua")
