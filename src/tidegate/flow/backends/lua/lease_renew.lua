-- lease_renew: extend a held lease so a long downstream call keeps its slot.
--
-- KEYS[1]  leases    zset  member = holder id, score = lease expiry (ms since epoch)
--
-- ARGV[1]  holder    lease holder id
-- ARGV[2]  lease_ms  new lease duration from now, ms
-- ARGV[3]  now_ms    current time in ms since epoch; "" = use Redis TIME
-- ARGV[4]  restore   "1" = the holder's own clock says its lease has not expired: if it
--                    is absent, Redis lost it (a failover to a replica without it, a
--                    fresh server), since a reclaim removes expired leases only; put it
--                    back. "" = never restore.
--
-- Returns 1 if the lease was still held and now expires at now + lease_ms; 2 if it was
-- absent and restored (restore = "1"); 0 if it had already expired, or was absent and
-- not restored (the slot may be someone else's now: the caller must know).

--!include clock

local now = clock(ARGV[3])
local new_expiry = now + tonumber(ARGV[2])
local expiry = tonumber(redis.call("ZSCORE", KEYS[1], ARGV[1]))
local status = 1
if expiry == nil and ARGV[4] == "1" then
  redis.call("ZADD", KEYS[1], string.format("%.3f", new_expiry), ARGV[1])
  status = 2
elseif expiry == nil or expiry < now then
  return 0
else
  redis.call("ZADD", KEYS[1], "XX", string.format("%.3f", new_expiry), ARGV[1])
end
local ttl = redis.call("PTTL", KEYS[1])
if ttl < 0 or ttl < new_expiry - now + 60000 then
  redis.call("PEXPIRE", KEYS[1], math.ceil(new_expiry - now) + 60000)
end
return status
