-- monitor_lease: one monitor samples and replays at a time; the others stand by.
--
-- The lease is taken when free and renewed by its holder; a holder that stops
-- renewing (crashed, partitioned) loses it after ttl_ms and another monitor takes over.
-- A holder that stops cleanly releases it (ttl_ms = 0), so a standby takes over at once.
--
-- KEYS[1]  lease    string  holder id, with a TTL
--
-- ARGV[1]  holder   this monitor's id (host:pid:random)
-- ARGV[2]  ttl_ms   lease duration, ms (a few sampling periods); "0" = release if held
--
-- Returns 1 if the caller holds the lease after the call, else 0.

local current = redis.call("GET", KEYS[1])
local ttl = tonumber(ARGV[2])
if ttl == 0 then
  if current == ARGV[1] then
    redis.call("DEL", KEYS[1])
  end
  return 0
end
if not current then
  redis.call("SET", KEYS[1], ARGV[1], "PX", ttl)
  return 1
end
if current == ARGV[1] then
  redis.call("PEXPIRE", KEYS[1], ttl)
  return 1
end
return 0
