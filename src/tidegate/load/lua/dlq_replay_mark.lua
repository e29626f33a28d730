-- dlq_replay_mark: take one dead letter for a replay, unless a replay already holds it.
--
-- The check and the mark are one step, so two replays started at the same moment can
-- never both publish the same letter. The mark ends when the replayed unit settles
-- (delivered: the record is removed; failed again: the record is written again, which
-- clears the mark) or, if the unit is lost, by itself at in_replay_until: an operator
-- is never stuck behind a replay that will not finish.
--
-- KEYS[1]  records    hash  <prefix>:{dlq}:records, key -> record JSON (read only)
-- KEYS[2]  replaying  zset  <prefix>:{dlq}:replaying, member = key, score = in replay
--                           until (ms since epoch)
-- KEYS[3]  replays    hash  <prefix>:{dlq}:replays, key -> replays of that letter so far
--
-- ARGV[1]  now_ms     current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  hold_ms    how long the mark holds if the unit never settles, ms (> 0)
-- ARGV[3]  key        the letter's idempotency key
--
-- Returns {status, until_ms, replays}:
--   "marked"     taken; until_ms = this mark's end, replays = the count including this one
--   "in_replay"  another replay holds it until until_ms; replays unchanged
--   "gone"       no such record (resolved or purged meanwhile); until_ms = "0"
-- Numbers are decimal strings.

--!include clock

local now = clock(ARGV[1])
if redis.call("HEXISTS", KEYS[1], ARGV[3]) == 0 then
  return {"gone", "0", tostring(tonumber(redis.call("HGET", KEYS[3], ARGV[3]) or "0"))}
end
local held = redis.call("ZSCORE", KEYS[2], ARGV[3])
if held and tonumber(held) > now then
  return {"in_replay", held, tostring(tonumber(redis.call("HGET", KEYS[3], ARGV[3]) or "0"))}
end
local until_ms = string.format("%.3f", now + tonumber(ARGV[2]))
redis.call("ZADD", KEYS[2], until_ms, ARGV[3])
local replays = redis.call("HINCRBY", KEYS[3], ARGV[3], 1)
return {"marked", until_ms, tostring(replays)}
