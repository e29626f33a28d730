-- sweep_take: use one of the armed sweeps, if any is left.
--
-- KEYS[1]  armed   string  sweeps still to run (an integer); deleted at 0
-- KEYS[2]  misses  hash    miss counts of the last sweeps; deleted with the last sweep
--                          (misses only count in consecutive sweeps)
-- KEYS[3]  seen    hash    units seen without a confirmed push in the last sweep
--                          (key -> s0); deleted with the last sweep, like the misses
--
-- Returns the number of sweeps left before this one (0 = nothing to sweep).

local armed = tonumber(redis.call("GET", KEYS[1]) or "0")
if armed <= 0 then
  redis.call("DEL", KEYS[1], KEYS[2], KEYS[3])
  return 0
end
if armed == 1 then
  redis.call("DEL", KEYS[1])
else
  redis.call("DECR", KEYS[1])
end
return armed
