-- record_unit: included (--!include record_unit) by the scripts that record a tracked
-- unit before its message is pushed (outstanding_record, outstanding_publish).
--
-- record_unit(units, misses, queues, seq, indexed, key, record, base, queue, lane, now_ms)
--   -> s0 (now_ms: the clock for next_seq, "" = Redis TIME)
--
-- The record replaces any older one of the same key (a new message for the unit); the
-- unit is indexed as "published, push not confirmed" under its sequence s0. Keys as in
-- outstanding_record's header; needs next_seq included before it.

local function record_unit(
  units, misses, queues, seq, indexed, key, record, base, queue, lane, now_ms
)
  if redis.call("EXISTS", indexed) == 0 and redis.call("HLEN", units) == 0 then
    -- A registry started by this version: no record without an index entry can exist.
    redis.call("SET", indexed, "1")
  end
  local old = redis.call("HGET", units, key)
  if old then
    local ok, rec = pcall(cjson.decode, old)
    if ok and type(rec) == "table" and type(rec.queue) == "string" then
      local old_lane = rec.lane or rec.queue
      redis.call("ZREM", base .. ":published:" .. old_lane, key)
      redis.call("ZREM", base .. ":pushed:" .. old_lane, key)
    end
  end
  local s0 = next_seq(seq, now_ms)
  redis.call("HSET", units, key, record)
  redis.call("HDEL", misses, key)
  redis.call("SADD", queues, queue)
  redis.call("ZADD", base .. ":published:" .. lane, s0, key)
  redis.call("ZREM", base .. ":pushed:" .. lane, key)
  return s0
end
