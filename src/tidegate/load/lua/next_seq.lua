-- next_seq: included (--!include next_seq) by the scripts that stamp a publish sequence.
--
-- next_seq(key, now_ms) -> the next publish sequence: max(stored + 1, the clock in µs),
-- stored back under key. now_ms is the caller's clock (ms since epoch, a decimal
-- string); "" or nil = Redis TIME, the fleet clock. Tied to a clock so that it never
-- goes back, even when Redis comes back from a restart without the tail of its
-- append-only file (a plain INCR would then hand out numbers that messages still queued
-- already carry). Doubles hold integers exactly up to 2^53 µs (year 2255).

local function next_seq(key, now_ms)
  local now
  if now_ms == nil or now_ms == "" then
    local t = redis.call("TIME")
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = math.floor(tonumber(now_ms) * 1000)
  end
  local nxt = (tonumber(redis.call("GET", key)) or 0) + 1
  if now > nxt then
    nxt = now
  end
  redis.call("SET", key, string.format("%.0f", nxt))
  return nxt
end
