-- outstanding_drop: take a unit out of the sweep's index; settle also forgets it.
--
-- Settle (a unit delivered or dead-lettered) removes the record. Hold (a unit parked:
-- the parking lot keeps it, the mover publishes it again) keeps the record and only
-- leaves the index, so that a parked unit is never a sweep candidate.
--
-- KEYS[1]  units   hash  idempotency key -> record (JSON with its queue and lane)
-- KEYS[2]  misses  hash  idempotency key -> consecutive sweeps missing
--
-- ARGV[1]  idempotency key
-- ARGV[2]  the index key prefix ("<prefix>:{outstanding}")
-- ARGV[3]  "settle" or "hold"
--
-- Returns 1 when a record was found, else 0.

local key, base = ARGV[1], ARGV[2]
local raw = redis.call("HGET", KEYS[1], key)
if not raw then
  return 0
end
local ok, rec = pcall(cjson.decode, raw)
if ok and type(rec) == "table" and type(rec.queue) == "string" then
  local lane = rec.lane or rec.queue
  redis.call("ZREM", base .. ":published:" .. lane, key)
  redis.call("ZREM", base .. ":pushed:" .. lane, key)
end
redis.call("HDEL", KEYS[2], key)
if ARGV[3] == "settle" then
  redis.call("HDEL", KEYS[1], key)
end
return 1
