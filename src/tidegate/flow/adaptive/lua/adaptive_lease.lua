-- adaptive_lease: one adaptive controller per downstream for the whole fleet.
--
-- Any worker may run the controller; the one holding this lease does. The holder
-- renews it every tick; a holder that stops renewing (crashed, partitioned) loses it
-- once until_ms has passed, and the next worker to ask takes over. A holder that
-- stops cleanly releases it (ttl_ms = 0), so another takes over at once. Expiry is
-- judged on the fleet clock passed in (or Redis TIME), not on the key's TTL, so a
-- test clock can expire a lease; the TTL only collects a lease nobody asks for.
--
-- KEYS[1]  lease    hash  holder (worker id), until_ms (ms since epoch)
--
-- ARGV[1]  holder   the asking worker's id (host:pid:random)
-- ARGV[2]  ttl_ms   lease duration from now, ms (a few ticks); "0" = release if held
-- ARGV[3]  now_ms   current time in ms since epoch; "" = use Redis TIME
--
-- Returns 1 if the caller holds the lease after the call, else 0.

--!include clock

local now = clock(ARGV[3])
local ttl = tonumber(ARGV[2])
local current = redis.call("HGET", KEYS[1], "holder")
local until_ms = tonumber(redis.call("HGET", KEYS[1], "until_ms"))
if current and (until_ms == nil or until_ms < now) then
  current = false
end
if ttl == 0 then
  if current == ARGV[1] then
    redis.call("DEL", KEYS[1])
  end
  return 0
end
if current and current ~= ARGV[1] then
  return 0
end
redis.call("HSET", KEYS[1], "holder", ARGV[1], "until_ms", string.format("%.3f", now + ttl))
redis.call("PEXPIRE", KEYS[1], math.ceil(ttl) + 60000)
return 1
