-- gate_pause: pause a downstream for the whole fleet (e.g. on 429 Retry-After).
--
-- A pause is only ever extended, never shortened: two workers that see 429s with
-- different Retry-After values end up waiting for the later one.
--
-- KEYS[1]  pause   hash  until_ms (ms since epoch), reason
--
-- ARGV[1]  now_ms     current time in ms since epoch; "" = use Redis TIME
-- ARGV[2]  pause_ms   how long to pause from now, ms (> 0)
-- ARGV[3]  reason     short machine-readable reason, e.g. "http_429"
--
-- Returns {until_ms, extended} as strings: the pause's end, and "1" if this call moved
-- it later ("0" if an existing pause already lasted longer).

--!include clock

local now = clock(ARGV[1])
local target = now + tonumber(ARGV[2])
local current = tonumber(redis.call("HGET", KEYS[1], "until_ms"))
if current and current >= target then
  return {string.format("%.3f", current), "0"}
end
redis.call("HSET", KEYS[1], "until_ms", string.format("%.3f", target), "reason", ARGV[3])
redis.call("PEXPIRE", KEYS[1], math.ceil(tonumber(ARGV[2])))
return {string.format("%.3f", target), "1"}
