-- outstanding_pushed: kombu's LPUSH of a tracked unit's message has returned.
--
-- The sequence s1 handed out now is larger than the s0 of every message pushed before
-- this one: that is what lets the sweep decide from the oldest queued message alone
-- (see tidegate.load.outstanding). A unit settled or published again meanwhile (its
-- published score is no longer s0) is left alone.
--
-- KEYS[1]  published  zset    <prefix>:published:<lane>, key -> s0
-- KEYS[2]  pushed     zset    <prefix>:pushed:<lane>, key -> s1
-- KEYS[3]  seq        string  the last publish sequence handed out
--
-- ARGV[1]  idempotency key
-- ARGV[2]  s0, as returned by outstanding_record
-- ARGV[3]  s1 to store; "" = the next sequence (the sweep passes the one it read before
--          its queue reads when it stamps a unit whose publisher never confirmed)
-- ARGV[4]  now_ms: the clock for a new s1, ms since epoch; "" = Redis TIME
--
-- Returns s1, or 0 when the unit was not waiting under s0.

--!include next_seq

local score = redis.call("ZSCORE", KEYS[1], ARGV[1])
if not score or tonumber(score) ~= tonumber(ARGV[2]) then
  return 0
end
local s1 = tonumber(ARGV[3])
if not s1 then
  s1 = next_seq(KEYS[3], ARGV[4])
end
redis.call("ZREM", KEYS[1], ARGV[1])
redis.call("ZADD", KEYS[2], s1, ARGV[1])
return s1
