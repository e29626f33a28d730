-- adaptive_observe: add one downstream call to the fleet's current observation window.
--
-- Every worker reports every call; the elected controller drains the window once a
-- tick (adaptive_drain.lua). Counters only, so a report is one small atomic write
-- whatever the fleet's size.
--
-- KEYS[1]  obs   hash  ok, throttled, unavailable, held (counts); latency_count,
--                      latency_sum_ms, latency_min_ms, max_in_flight; hint (JSON);
--                      throttled_stamped (429s with an admission time) and
--                      throttled_admitted_max_ms (the latest of those times);
--                      unavailable_stamped and unavailable_admitted_max_ms (the
--                      same for 503s and refused calls)
-- KEYS[2]  wake  list  one token while the window holds a 429: the controller blocks
--                      on it (BLPOP) between ticks, and decides at once
--
-- ARGV[1]  outcome      "ok", "throttled" or "unavailable"
-- ARGV[2]  latency_ms   the call's latency in ms; "" when unknown (refused calls)
-- ARGV[3]  in_flight    calls in flight when this one ran (leases held), >= 0
-- ARGV[4]  held         "1" if the gate made this call wait for admission, else "0"
-- ARGV[5]  hint         the answer's rate-limit headers as JSON; "" when none
-- ARGV[6]  ttl_ms       the window's expiry if nobody drains it, ms
-- ARGV[7]  admitted_ms  when the gate admitted the call, fleet clock in ms; "" when
--                       unknown (kept for a 429 or a 503: the controller sets aside
--                       rejections of calls admitted before its last cut)
--
-- A 429 also leaves the wake token (at most one; it expires with the window), so the
-- elected controller cuts within a round trip instead of at its next tick: by then the
-- fleet's pause for the 429 may be over and calls resumed at the old rate, each 429 of
-- them counting towards a suspension. (A 503 counts towards none: it waits for the tick.)
--
-- Returns 1.

local obs = KEYS[1]
redis.call("HINCRBY", obs, ARGV[1], 1)
local latency = tonumber(ARGV[2])
if latency then
  redis.call("HINCRBY", obs, "latency_count", 1)
  redis.call("HINCRBYFLOAT", obs, "latency_sum_ms", ARGV[2])
  local low = tonumber(redis.call("HGET", obs, "latency_min_ms"))
  if low == nil or latency < low then
    redis.call("HSET", obs, "latency_min_ms", ARGV[2])
  end
end
local in_flight = tonumber(ARGV[3])
local most = tonumber(redis.call("HGET", obs, "max_in_flight"))
if most == nil or in_flight > most then
  redis.call("HSET", obs, "max_in_flight", ARGV[3])
end
if ARGV[4] == "1" then
  redis.call("HINCRBY", obs, "held", 1)
end
if ARGV[5] ~= "" then
  redis.call("HSET", obs, "hint", ARGV[5])
end
local admitted = tonumber(ARGV[7])
if ARGV[1] ~= "ok" and admitted then
  redis.call("HINCRBY", obs, ARGV[1] .. "_stamped", 1)
  local field = ARGV[1] .. "_admitted_max_ms"
  local latest = tonumber(redis.call("HGET", obs, field))
  if latest == nil or admitted > latest then
    redis.call("HSET", obs, field, ARGV[7])
  end
end
redis.call("PEXPIRE", obs, tonumber(ARGV[6]))
if ARGV[1] == "throttled" then
  redis.call("LPUSH", KEYS[2], "1")
  redis.call("LTRIM", KEYS[2], 0, 0)
  redis.call("PEXPIRE", KEYS[2], tonumber(ARGV[6]))
end
return 1
