-- park: store a message durably until it is due (instead of a Celery ETA held in worker RAM).
--
-- KEYS[1]  due        zset  member = envelope id, score = due time (ms since epoch)
-- KEYS[2]  envelopes  hash  envelope id -> envelope JSON
--
-- ARGV[1]  now_ms     current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  delay_ms   how long from now until the message is due, ms (>= 0)
-- ARGV[3]  id         envelope id (unique per parked message)
-- ARGV[4]  envelope   the envelope JSON (task name, args, queue, attempts…)
--
-- Returns the due time (ms since epoch) as a decimal string.

--!include clock

local now = clock(ARGV[1])
local due = now + tonumber(ARGV[2])
redis.call("HSET", KEYS[2], ARGV[3], ARGV[4])
redis.call("ZADD", KEYS[1], string.format("%.3f", due), ARGV[3])
return string.format("%.3f", due)
