-- adaptive_drain: take the fleet's observation window and start a new one.
--
-- Read and delete in one step, so a report that lands meanwhile goes to the next
-- window instead of being lost between the read and the delete.
--
-- KEYS[1]  obs   hash  the window (see adaptive_observe.lua)
-- KEYS[2]  wake  list  the 429 token; taken with the window, so a token left means
--                      a 429 came after this drain
--
-- Returns the window as a flat field/value list (HGETALL), empty when nothing came.

local window = redis.call("HGETALL", KEYS[1])
redis.call("DEL", KEYS[1], KEYS[2])
return window
