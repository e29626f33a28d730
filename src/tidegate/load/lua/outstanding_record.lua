-- outstanding_record: a tracked unit is about to be published (before kombu's LPUSH).
--
-- The record replaces any older one of the same key (a new message for the unit); the
-- unit is indexed as "published, push not confirmed" under its sequence s0, which the
-- caller puts in the message's headers. outstanding_pushed moves it on after the push.
--
-- KEYS[1]  units    hash    idempotency key -> record (JSON: task, task_id, queue, args, kwargs, lane)
-- KEYS[2]  misses   hash    idempotency key -> consecutive sweeps missing
-- KEYS[3]  queues   set     every queue a unit was published to
-- KEYS[4]  seq      string  the last publish sequence handed out
-- KEYS[5]  indexed  string  present once every record of units is in the index
--
-- ARGV[1]  idempotency key
-- ARGV[2]  the record (JSON)
-- ARGV[3]  the index key prefix ("<prefix>:{outstanding}"): the zsets are
--          <prefix>:published:<queue> and <prefix>:pushed:<queue>, score = sequence
-- ARGV[4]  the unit's queue
--
-- Returns s0, the unit's publish sequence (an integer).

--!include next_seq

local key, base, queue, lane = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
if redis.call("EXISTS", KEYS[5]) == 0 and redis.call("HLEN", KEYS[1]) == 0 then
  -- A registry started by this version: no record without an index entry can exist.
  redis.call("SET", KEYS[5], "1")
end
local old = redis.call("HGET", KEYS[1], key)
if old then
  local ok, rec = pcall(cjson.decode, old)
  if ok and type(rec) == "table" and type(rec.queue) == "string" then
    local lane = rec.lane or rec.queue
    redis.call("ZREM", base .. ":published:" .. lane, key)
    redis.call("ZREM", base .. ":pushed:" .. lane, key)
  end
end
local s0 = next_seq(KEYS[4])
redis.call("HSET", KEYS[1], key, ARGV[2])
redis.call("HDEL", KEYS[2], key)
redis.call("SADD", KEYS[3], queue)
redis.call("ZADD", base .. ":published:" .. lane, s0, key)
redis.call("ZREM", base .. ":pushed:" .. lane, key)
return s0
