-- bench/wrk/get.lua: a plain GET, with summary.lua's line at the end
-- (bench/wrk/small.sh).
dofile(debug.getinfo(1, "S").source:match("^@(.*/)") .. "summary.lua")
