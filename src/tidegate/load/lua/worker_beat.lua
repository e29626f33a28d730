-- worker_beat: a worker main process says it is alive; a silent one arms the orphan sweep.
--
-- A Redis broker loses a message only when a worker main process dies between kombu's
-- BRPOP and its unacked write, so the sweep has nothing to find unless a worker died
-- without a clean shutdown. Every worker beats; the first beat that finds another
-- worker silent for longer than dead_after_ms removes it and arms the sweep.
--
-- KEYS[1]  workers  zset    member = worker id, score = its last beat (ms since epoch)
-- KEYS[2]  armed    string  sweeps still to run (an integer)
--
-- ARGV[1]  worker         this worker's id ("" = only look for silent workers)
-- ARGV[2]  dead_after_ms  silence after which a worker counts as dead, ms
-- ARGV[3]  arm_sweeps     sweeps to arm when a dead worker is found
-- ARGV[4]  now_ms         "" = the fleet clock (Redis TIME); tests pass their own
--
-- Returns the number of dead workers found by this call.

--!include clock

local now = clock(ARGV[4])
if ARGV[1] ~= "" then
  redis.call("ZADD", KEYS[1], now, ARGV[1])
end
local dead = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", now - tonumber(ARGV[2]))
if #dead > 0 then
  redis.call("ZREM", KEYS[1], unpack(dead))
  local armed = tonumber(redis.call("GET", KEYS[2]) or "0")
  if armed < tonumber(ARGV[3]) then
    redis.call("SET", KEYS[2], ARGV[3])
  end
end
return #dead
