-- gate_acquire: one admission decision for one downstream, atomically, in one round trip.
--
-- Checks, in order: the fleet-wide pause, the concurrency cap (leases), the rate (GCRA).
-- Nothing is consumed unless the request is admitted; an admitted request may be
-- admitted *in the future* (wait > 0, up to max_wait_ms): its slot is reserved now,
-- so the caller sleeps exactly that long, with no polling and no second round trip.
--
-- KEYS[1]  tat      string  GCRA theoretical arrival time, ms since the Unix epoch
-- KEYS[2]  leases   zset    member = holder id, score = lease expiry (ms since epoch)
-- KEYS[3]  pause    hash    until_ms (ms since epoch), reason
-- KEYS[4]  config   hash    live overrides: rate, burst, concurrency, lease_ms
-- KEYS[5]  admitted string  admissions so far, in tokens (sum of admitted costs, reserved
--                           future slots included); monotonic, no expiry: readers take
--                           deltas (the console's admitted/s chart)
--
-- ARGV[1]  now_ms       current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  cost         tokens this request takes (integer >= 1)
-- ARGV[3]  rate         default sustained rate, admissions per second; "0" = no rate limit
-- ARGV[4]  burst        default bucket size, tokens (>= cost)
-- ARGV[5]  concurrency  default cap on held leases; "0" = no cap
-- ARGV[6]  lease_ms     default lease duration after the reserved start, ms
-- ARGV[7]  max_wait_ms  furthest ahead a slot may be reserved, ms; "0" = admit only now
-- ARGV[8]  holder       lease holder id (unique per acquisition); "" when no cap
-- ARGV[9]  flags        "p" check pause, "c" read config hash, "n" no lease: the cap is
--                       treated as 0 after the config hash is read, so no lease is
--                       counted, taken or returned; "t" no token: the rate is
--                       treated as 0 after the config hash is read (a relay lane's
--                       lease, whose calls' tokens the workers took) (e.g. "pc",
--                       "pcn", "pct"; "" = none)
--
-- Every admission adds its cost to KEYS[5] (one INCRBY in this same call); refusals
-- add nothing.
--
-- Returns {status, wait_us, remaining, reclaimed, leased, now_us, lease_us} as integers:
--   status  0 admitted: sleep wait_us, then go; the lease (if capped) is held
--           1 rate: the request conforms in wait_us (> max_wait_ms); nothing consumed
--           2 paused: the fleet-wide pause ends in wait_us; nothing consumed
--           3 concurrency: all leases held; the earliest expires in wait_us; nothing consumed
--   remaining  tokens left at the admission time (rate), or free leases when capped;
--              -1 when neither a rate nor a cap applies
--   reclaimed  expired leases removed by this call (holders that died without releasing)
--   leased     1 if a lease was taken for holder (the caller must release it), else 0
--   now_us     the decision's time on the fleet clock, us since epoch
--   lease_us   the lease length this decision used (the live config's lease_ms when
--              set, else ARGV[6]), us, rounded up; in every reply, refusals included.
--              The holder renews by it (a third of it apart), not by its own default:
--              a live lease shorter than a third of the default would otherwise expire
--              before its first renewal.

--!include gcra

local now = clock(ARGV[1])
local cost = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local lease_ms = tonumber(ARGV[6])
local max_wait = tonumber(ARGV[7])
local holder = ARGV[8]
local flags = ARGV[9]

local function us(ms) return math.ceil(ms * 1000) end
local now_us = math.floor(now * 1000)

if string.find(flags, "c", 1, true) then
  local cfg = redis.call("HMGET", KEYS[4], "rate", "burst", "concurrency", "lease_ms")
  rate = tonumber(cfg[1]) or rate
  burst = tonumber(cfg[2]) or burst
  cap = tonumber(cfg[3]) or cap
  lease_ms = tonumber(cfg[4]) or lease_ms
end

local lease_us = us(lease_ms)

if string.find(flags, "n", 1, true) then
  cap = 0
end
if string.find(flags, "t", 1, true) then
  rate = 0
end

if string.find(flags, "p", 1, true) then
  local until_ms = tonumber(redis.call("HGET", KEYS[3], "until_ms"))
  if until_ms and until_ms > now then
    return {2, us(until_ms - now), 0, 0, 0, now_us, lease_us}
  end
end

local reclaimed = 0
local free = -1
if cap > 0 then
  reclaimed = redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. string.format("%.3f", now))
  local held = redis.call("ZCARD", KEYS[2])
  if held >= cap then
    local first = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
    return {3, us(tonumber(first[2]) - now), 0, reclaimed, 0, now_us, lease_us}
  end
  free = cap - held - 1
end

local wait = 0
local remaining = -1
if rate > 0 then
  if cost > burst then
    return redis.error_reply("cost " .. cost .. " exceeds burst " .. burst)
  end
  local admitted
  admitted, wait, remaining = gcra(KEYS[1], now, cost, 1000 / rate, burst, max_wait)
  if not admitted then
    return {1, us(wait), remaining, reclaimed, 0, now_us, lease_us}
  end
end

if cap > 0 then
  local expiry = now + wait + lease_ms
  redis.call("ZADD", KEYS[2], string.format("%.3f", expiry), holder)
  local last = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
  -- Keep the set a minute past its last lease, so a dead holder's lease is seen (and
  -- reported as reclaimed) by the next admission rather than vanishing with the key.
  redis.call("PEXPIRE", KEYS[2], math.ceil(tonumber(last[2]) - now) + 60000)
  if remaining < 0 or free < remaining then remaining = free end
  redis.call("INCRBY", KEYS[5], cost)
  return {0, us(wait), remaining, reclaimed, 1, now_us, lease_us}
end

redis.call("INCRBY", KEYS[5], cost)
return {0, us(wait), remaining, reclaimed, 0, now_us, lease_us}
