-- bulk_outcome: record one unit's outcome once; start the aggregate after the last one.
--
-- A redelivered or replayed parse task finds its outcome recorded and counts nothing.
--
-- KEYS[1]  outcomes  hash    unit key -> outcome JSON
-- KEYS[2]  done      string  units whose outcome is recorded
-- KEYS[3]  expected  string  distinct units of the batch, set by bulk_seal.lua
-- KEYS[4]  fired     string  set once when the aggregate is started
--
-- ARGV[1]  key       the unit's idempotency key
-- ARGV[2]  outcome   the outcome, JSON
-- ARGV[3]  ttl_s     expiry of the batch's keys, seconds
--
-- Returns 1 if the caller must start the aggregate now, else 0.

if redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
local ttl = tonumber(ARGV[3])
redis.call("EXPIRE", KEYS[1], ttl)
local done = redis.call("INCR", KEYS[2])
redis.call("EXPIRE", KEYS[2], ttl)
local expected = redis.call("GET", KEYS[3])
if expected and done >= tonumber(expected) and redis.call("SET", KEYS[4], "1", "NX", "EX", ttl) then
  return 1
end
return 0
