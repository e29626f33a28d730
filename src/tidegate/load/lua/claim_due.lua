-- claim_due: hand due parked messages to one mover, crash-safely.
--
-- Claimed messages move to an in-flight set with a lease; the mover deletes them
-- (ack) only after republishing. A mover that dies mid-way never loses a message:
-- once its lease expires, the next claim puts the message back among the due ones.
--
-- KEYS[1]  due        zset  member = envelope id, score = due time (ms since epoch)
-- KEYS[2]  envelopes  hash  envelope id -> envelope JSON
-- KEYS[3]  inflight   zset  member = envelope id, score = claim lease expiry (ms since epoch)
--
-- ARGV[1]  now_ms     current time in ms since epoch; "" = use Redis TIME
-- ARGV[2]  limit      most messages to claim in this call
-- ARGV[3]  lease_ms   how long the mover has to republish and ack, ms
--
-- Returns a flat list {id1, envelope1, id2, envelope2, …} of the claimed messages.

--!include clock

local now = clock(ARGV[1])
local expired = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", string.format("%.3f", now))
for _, id in ipairs(expired) do
  redis.call("ZREM", KEYS[3], id)
  redis.call("ZADD", KEYS[1], string.format("%.3f", now), id)
end
local ids = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", string.format("%.3f", now),
                       "LIMIT", 0, tonumber(ARGV[2]))
local out = {}
local lease_until = string.format("%.3f", now + tonumber(ARGV[3]))
for _, id in ipairs(ids) do
  redis.call("ZREM", KEYS[1], id)
  local envelope = redis.call("HGET", KEYS[2], id)
  if envelope then
    redis.call("ZADD", KEYS[3], lease_until, id)
    table.insert(out, id)
    table.insert(out, envelope)
  end
end
return out
