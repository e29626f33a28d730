-- gate_acquire: one admission decision for one downstream, atomically, in one round trip.
--
-- Checks, in order: the fleet-wide pause, the concurrency cap (leases), the rate (GCRA).
-- Nothing is consumed unless the request is admitted; an admitted request may be
-- admitted *in the future* (wait_ms > 0, up to max_wait_ms): its slot is reserved now,
-- so the caller sleeps exactly that long, with no polling and no second round trip.
--
-- KEYS[1]  tat      string  GCRA theoretical arrival time, ms since the Unix epoch
-- KEYS[2]  leases   zset    member = holder id, score = lease expiry (ms since epoch)
-- KEYS[3]  pause    hash    until_ms (ms since epoch), reason
-- KEYS[4]  config   hash    live overrides: rate, burst, concurrency, lease_ms
--
-- ARGV[1]  now_ms       current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[2]  cost         tokens this request takes (integer >= 1)
-- ARGV[3]  rate         default sustained rate, admissions per second; "0" = no rate limit
-- ARGV[4]  burst        default bucket size, tokens (>= cost)
-- ARGV[5]  concurrency  default cap on held leases; "0" = no cap
-- ARGV[6]  lease_ms     default lease duration after the reserved start, ms
-- ARGV[7]  max_wait_ms  furthest ahead a slot may be reserved, ms; "0" = admit only now
-- ARGV[8]  holder       lease holder id (unique per acquisition); "" when no cap
-- ARGV[9]  flags        "p" check pause, "c" read config hash (e.g. "pc"; "" = neither)
--
-- Returns {status, wait_ms, remaining, now_ms, reclaimed, leased}; numbers as decimal strings
-- status  "0" admitted: sleep wait_ms, then go; the lease (if capped) is held
--         "1" rate: the request conforms in wait_ms (> max_wait_ms); nothing consumed
--         "2" paused: the fleet-wide pause ends in wait_ms; nothing consumed
--         "3" concurrency: all leases held; the earliest expires in wait_ms; nothing consumed
-- remaining  tokens left at the admission time (rate), or free leases when capped
-- reclaimed  expired leases removed by this call (holders that died without releasing)
-- leased     "1" if a lease was taken for holder (the caller must release it), else "0"

local now
if ARGV[1] == "" then
  local t = redis.call("TIME")
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(ARGV[1])
end
local cost = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local burst = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local lease_ms = tonumber(ARGV[6])
local max_wait = tonumber(ARGV[7])
local holder = ARGV[8]
local flags = ARGV[9]

local function fmt(x) return string.format("%.3f", x) end

if string.find(flags, "c", 1, true) then
  local cfg = redis.call("HMGET", KEYS[4], "rate", "burst", "concurrency", "lease_ms")
  rate = tonumber(cfg[1]) or rate
  burst = tonumber(cfg[2]) or burst
  cap = tonumber(cfg[3]) or cap
  lease_ms = tonumber(cfg[4]) or lease_ms
end

if string.find(flags, "p", 1, true) then
  local until_ms = tonumber(redis.call("HGET", KEYS[3], "until_ms"))
  if until_ms and until_ms > now then
    return {"2", fmt(until_ms - now), "0", fmt(now), "0", "0"}
  end
end

local reclaimed = 0
local free = -1
if cap > 0 then
  reclaimed = redis.call("ZREMRANGEBYSCORE", KEYS[2], "-inf", "(" .. fmt(now))
  local held = redis.call("ZCARD", KEYS[2])
  if held >= cap then
    local first = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
    return {"3", fmt(tonumber(first[2]) - now), "0", fmt(now), tostring(reclaimed), "0"}
  end
  free = cap - held - 1
end

local wait = 0
local remaining = -1
if rate > 0 then
  if cost > burst then
    return redis.error_reply("cost " .. cost .. " exceeds burst " .. burst)
  end
  local interval = 1000 / rate
  local tat = tonumber(redis.call("GET", KEYS[1])) or now
  if tat < now then tat = now end
  local new_tat = tat + cost * interval
  -- (tat - now) first: exact 0 when the bucket is full and cost == burst.
  wait = (tat - now) - (burst - cost) * interval
  -- Epoch-ms doubles have a ~2e-4 ms ulp: a wait under 1 us is rounding, not a refusal.
  if wait <= 1e-3 then wait = math.min(wait, 0) end
  if wait > max_wait then
    local left = math.floor((now + burst * interval - tat) / interval)
    if left < 0 then left = 0 end
    return {"1", fmt(wait), tostring(left), fmt(now), tostring(reclaimed), "0"}
  end
  if wait < 0 then
    remaining = math.floor(-wait / interval)
    wait = 0
  else
    remaining = 0
  end
  -- %.17g round-trips a double exactly: a rounded TAT would drift decisions at the edges.
  redis.call("SET", KEYS[1], string.format("%.17g", new_tat), "PX",
             math.max(1, math.ceil(new_tat - now)))
end

if cap > 0 then
  local expiry = now + wait + lease_ms
  redis.call("ZADD", KEYS[2], fmt(expiry), holder)
  local last = redis.call("ZRANGE", KEYS[2], -1, -1, "WITHSCORES")
  -- Keep the set a minute past its last lease, so a dead holder's lease is seen (and
  -- reported as reclaimed) by the next admission rather than vanishing with the key.
  redis.call("PEXPIRE", KEYS[2], math.ceil(tonumber(last[2]) - now) + 60000)
  if remaining < 0 or free < remaining then remaining = free end
end

local leased = "0"
if cap > 0 then leased = "1" end
return {"0", fmt(wait), tostring(remaining), fmt(now), tostring(reclaimed), leased}
