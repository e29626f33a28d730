-- rate_acquire: one rate-limit decision (GCRA), atomically: the RateLimiter's hot path.
--
-- The gate's full script checks a pause, leases and live configuration too; a plain rate
-- limit needs none of that, and every argument and reply element costs encoding and
-- parsing on the client, so this one takes one key and five numbers and answers four
-- integers.
--
-- KEYS[1]  tat   string  GCRA theoretical arrival time, ms since the Unix epoch
--
-- ARGV[1]  now_ms       current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  cost         tokens this request takes (integer >= 1, <= burst)
-- ARGV[3]  interval_ms  ms per token: 1000 / rate
-- ARGV[4]  burst        bucket size, tokens
-- ARGV[5]  max_wait_ms  furthest ahead a slot may be reserved, ms; "0" = admit only now
--
-- Returns {status, wait_us, remaining, now_us} as integers:
--   status 0 admitted: sleep wait_us microseconds (the slot is reserved), then go
--          1 refused: the request would conform in wait_us; nothing consumed
--   remaining  tokens left at the admission time (refused: tokens now)
--   now_us     the decision's time on the fleet clock, us since epoch (exact in a double)

--!include gcra

local now = clock(ARGV[1])
local admitted, wait, remaining = gcra(KEYS[1], now, tonumber(ARGV[2]), tonumber(ARGV[3]),
                                       tonumber(ARGV[4]), tonumber(ARGV[5]))
return {admitted and 0 or 1, math.ceil(wait * 1000), remaining, math.floor(now * 1000)}
