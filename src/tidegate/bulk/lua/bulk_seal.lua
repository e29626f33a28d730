-- bulk_seal: the dispatch has published every parse task of a batch; say how many.
--
-- The fan-out counts itself in Redis instead of a Celery chord: a chord's header and
-- results pass through one process, which then holds memory for every B/L of the
-- manifest. Whichever comes last — this seal or the last unit's outcome — starts the
-- aggregate, once (the fired flag).
--
-- KEYS[1]  expected  string  distinct units of the batch (set here)
-- KEYS[2]  done      string  units whose outcome is recorded (bulk_outcome.lua)
-- KEYS[3]  fired     string  set once when the aggregate is started
--
-- ARGV[1]  expected  distinct units of the batch
-- ARGV[2]  ttl_s     expiry of the batch's keys, seconds
--
-- Returns 1 if the caller must start the aggregate now, else 0.

redis.call("SET", KEYS[1], ARGV[1], "EX", tonumber(ARGV[2]))
local done = tonumber(redis.call("GET", KEYS[2]) or "0")
if done >= tonumber(ARGV[1]) and redis.call("SET", KEYS[3], "1", "NX", "EX", tonumber(ARGV[2])) then
  return 1
end
return 0
