-- quarantine_claim: hand the oldest waiting documents of one queue to one replayer.
--
-- Claimed documents move to an in-flight set with a lease; the replayer acks each one
-- after it was queued again, or releases it. A replayer that dies mid-way loses
-- nothing: once its lease expires, the next claim puts the document back in line
-- with its original quarantine time. Documents another replayer still holds (its lease
-- not yet expired) are never taken twice; the call says how many there were.
--
-- KEYS[1]  waiting   zset  member = idempotency key, score = quarantine time (ms)
-- KEYS[2]  inflight  zset  member = idempotency key, score = claim lease expiry (ms)
-- KEYS[3]  records   hash  idempotency key -> record JSON
-- KEYS[4]  since     hash  idempotency key -> quarantine time (ms)
--
-- ARGV[1]  now_ms    current time in ms since epoch; "" = use Redis TIME
-- ARGV[2]  limit     most documents to claim (>= 1)
-- ARGV[3]  lease_ms  how long the replayer has to queue and ack them, ms
--
-- Returns a flat list {held, key1, record1, since1, key2, …}: held = documents of this
-- queue claimed by another replayer and still leased (skipped), as a decimal string;
-- then the claimed documents, oldest first.

--!include clock

local now = clock(ARGV[1])
local expired = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", string.format("%.3f", now))
for _, key in ipairs(expired) do
  redis.call("ZREM", KEYS[2], key)
  local since = redis.call("HGET", KEYS[4], key)
  if since then
    redis.call("ZADD", KEYS[1], since, key)
  end
end
local held = redis.call("ZCARD", KEYS[2])
local keys = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[2]) - 1)
local lease_until = string.format("%.3f", now + tonumber(ARGV[3]))
local out = {tostring(held)}
for _, key in ipairs(keys) do
  redis.call("ZREM", KEYS[1], key)
  local record = redis.call("HGET", KEYS[3], key)
  if record then
    redis.call("ZADD", KEYS[2], lease_until, key)
    table.insert(out, key)
    table.insert(out, record)
    table.insert(out, redis.call("HGET", KEYS[4], key) or "0")
  end
end
return out
