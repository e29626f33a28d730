-- quarantine_ack: forget a document that was queued again, and count the replay.
--
-- Removes the document wherever it is (in flight, or back in line if the lease
-- expired meanwhile: it *was* queued, so it must not be replayed twice by us).
--
-- KEYS[1]  inflight  zset  member = idempotency key, score = claim lease expiry (ms)
-- KEYS[2]  waiting   zset  member = idempotency key, score = quarantine time (ms)
-- KEYS[3]  records   hash  idempotency key -> record JSON
-- KEYS[4]  since     hash  idempotency key -> quarantine time (ms)
-- KEYS[5]  stats     hash  counters: "replayed:<class>"
--
-- ARGV[1]  key       the document's idempotency key
-- ARGV[2]  class     the document class name (for the counter)
--
-- Returns 1 if the record was removed (and counted), 0 if it was already gone.

redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("HDEL", KEYS[4], ARGV[1])
if redis.call("HDEL", KEYS[3], ARGV[1]) == 1 then
  redis.call("HINCRBY", KEYS[5], "replayed:" .. ARGV[2], 1)
  return 1
end
return 0
