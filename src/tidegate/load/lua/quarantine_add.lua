-- quarantine_add: keep one shed document durably until it is replayed.
--
-- A document is keyed by its idempotency key: shedding the same document twice (a
-- producer that retried) keeps the first record and counts a duplicate, never two.
--
-- KEYS[1]  records  hash  idempotency key -> record JSON (payload + metadata)
-- KEYS[2]  since    hash  idempotency key -> quarantine time (ms since epoch)
-- KEYS[3]  waiting  zset  member = idempotency key, score = quarantine time (ms); one per queue
-- KEYS[4]  queues   set   names of the queues that have waiting documents
-- KEYS[5]  stats    hash  counters: "shed:<class>", "duplicate"
--
-- ARGV[1]  now_ms   current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  key      the document's idempotency key
-- ARGV[3]  record   the record JSON
-- ARGV[4]  queue    the queue the document was meant for
-- ARGV[5]  class    the document class name (for the counter)
--
-- Returns {added, since_ms}: added "1" for a new record, "0" for a duplicate (since_ms
-- is then the first record's time); numbers as decimal strings.

--!include clock

local now = clock(ARGV[1])
if redis.call("HEXISTS", KEYS[1], ARGV[2]) == 1 then
  redis.call("HINCRBY", KEYS[5], "duplicate", 1)
  return {"0", redis.call("HGET", KEYS[2], ARGV[2]) or string.format("%.3f", now)}
end
local since = string.format("%.3f", now)
redis.call("HSET", KEYS[1], ARGV[2], ARGV[3])
redis.call("HSET", KEYS[2], ARGV[2], since)
redis.call("ZADD", KEYS[3], since, ARGV[2])
redis.call("SADD", KEYS[4], ARGV[4])
redis.call("HINCRBY", KEYS[5], "shed:" .. ARGV[5], 1)
return {"1", since}
