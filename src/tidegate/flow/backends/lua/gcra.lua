-- gcra: the GCRA decision, included (--!include gcra) by rate_acquire.lua and
-- gate_acquire.lua. Not a script of its own: it defines local functions and touches only
-- the key its caller passes in.
--
-- gcra(tat_key, now, cost, interval, burst, max_wait) -> admitted, wait_ms, remaining
--   tat_key   string key holding the theoretical arrival time (ms since epoch)
--   now       ms since epoch;  cost: tokens;  interval: ms per token (1000 / rate)
--   burst     bucket size, tokens;  max_wait: furthest slot that may be reserved, ms
--   admitted  true when the request is admitted now or in wait_ms (its slot is reserved
--             and the TAT stored); false when the slot is further than max_wait
--             (nothing stored; wait_ms says when it would conform)
--   remaining whole tokens left at the admission time (refused: tokens now)
--
-- It runs on every admission, so it makes only the three calls it needs (TIME, GET, SET)
-- and no string formatting of its own.

--!include clock

local function gcra(tat_key, now, cost, interval, burst, max_wait)
  local tat = tonumber(redis.call("GET", tat_key)) or now
  if tat < now then tat = now end
  -- (tat - now) first: exactly 0 when the bucket is full and cost == burst.
  local wait = (tat - now) - (burst - cost) * interval
  -- Epoch-ms doubles have a ~2e-4 ms ulp: a wait under 1 us is rounding, not a refusal.
  if wait > 0 and wait <= 1e-3 then wait = 0 end
  if wait > max_wait then
    local left = math.floor((now + burst * interval - tat) / interval)
    if left < 0 then left = 0 end
    return false, wait, left
  end
  local remaining = 0
  if wait < 0 then
    remaining = math.floor(-wait / interval)
    wait = 0
  end
  local new_tat = tat + cost * interval
  -- The TAT goes to SET as a Lua number: Redis writes it with "%.17g" (newer servers: the
  -- shortest string that reads back the same), so it round-trips exactly (a rounded TAT
  -- would drift decisions at the edges) without a string.format on the hot path.
  redis.call("SET", tat_key, new_tat, "PX", math.max(1, math.ceil(new_tat - now)))
  return true, wait, remaining
end
