-- outstanding_requeued: kombu pushed a unit's message again at the newest end of its list
-- (a reject with requeue: the worker process running it was lost). For the sweep it is a
-- new push: the unit gets a new s1, larger than the s0 of every message pushed before.
--
-- KEYS[1]  units   hash    idempotency key -> record (JSON: task_id, queue, lane, ...)
-- KEYS[2]  seq     string  the last publish sequence handed out
-- KEYS[3]  misses  hash    idempotency key -> consecutive sweeps missing (reset: queued)
--
-- ARGV[1]  idempotency key
-- ARGV[2]  the requeued message's task id
-- ARGV[3]  the index key prefix ("<prefix>:{outstanding}")
-- ARGV[4]  now_ms: the clock for the new s1, ms since epoch; "" = Redis TIME
--
-- Returns the new s1, or 0 when the record is gone or belongs to another message.

--!include next_seq

local key, base = ARGV[1], ARGV[3]
local raw = redis.call("HGET", KEYS[1], key)
if not raw then
  return 0
end
local ok, rec = pcall(cjson.decode, raw)
if not ok or type(rec) ~= "table" or rec.task_id ~= ARGV[2] or type(rec.queue) ~= "string" then
  return 0
end
local lane = rec.lane or rec.queue
local s1 = next_seq(KEYS[2], ARGV[4])
redis.call("ZREM", base .. ":published:" .. lane, key)
redis.call("ZADD", base .. ":pushed:" .. lane, s1, key)
redis.call("HDEL", KEYS[3], key)
return s1
