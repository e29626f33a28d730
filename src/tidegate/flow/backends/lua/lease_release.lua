-- lease_release: give back a concurrency slot and wake one waiter.
--
-- KEYS[1]  leases    zset  member = holder id, score = lease expiry (ms since epoch)
-- KEYS[2]  released  list  wake-up tokens for waiters blocked in BLPOP
--
-- ARGV[1]  holder       lease holder id
-- ARGV[2]  wake_cap     most tokens kept in the wake-up list (the concurrency cap)
-- ARGV[3]  wake_ttl_ms  expiry of the wake-up list, ms (stale tokens must not pile up)
--
-- Returns 1 if the lease was held and is now released, 0 if it was already gone
-- (expired and reclaimed: the holder overran its lease without renewing).

local removed = redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("RPUSH", KEYS[2], "1")
redis.call("LTRIM", KEYS[2], -tonumber(ARGV[2]), -1)
redis.call("PEXPIRE", KEYS[2], tonumber(ARGV[3]))
return removed
