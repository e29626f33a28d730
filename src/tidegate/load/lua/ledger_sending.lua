-- ledger_sending: record that a unit is about to be sent, and when (never downgrades).
--
-- The time is what lets a later attempt wait until the downstream can have finished
-- this request (a downstream that commits at the end of a slow request answers
-- "not received" to a lookup until then).
--
-- KEYS[1]  entry      string  "1" = delivered, "s:<ms>" = sending since <ms>, "s" = sending
--                             (written before the time was kept)
--
-- ARGV[1]  now_ms     current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  ttl_s      how long the entry is remembered, seconds
--
-- Returns the send time (ms since epoch) as a decimal string, or false when the entry
-- already says delivered (it is left alone).

--!include clock

if redis.call("GET", KEYS[1]) == "1" then
  return false
end
local now = clock(ARGV[1])
redis.call("SET", KEYS[1], string.format("s:%.3f", now), "EX", tonumber(ARGV[2]))
return string.format("%.3f", now)
