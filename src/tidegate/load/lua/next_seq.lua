-- next_seq: included (--!include next_seq) by the scripts that stamp a publish sequence.
--
-- next_seq(key) -> the next publish sequence: max(stored + 1, Redis TIME in µs), stored
-- back under key. Tied to the fleet clock so that it never goes back, even when Redis
-- comes back from a restart without the tail of its append-only file (a plain INCR
-- would then hand out numbers that messages still queued already carry). Doubles hold
-- integers exactly up to 2^53 µs (year 2255).

local function next_seq(key)
  local t = redis.call("TIME")
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local nxt = (tonumber(redis.call("GET", key)) or 0) + 1
  if now > nxt then
    nxt = now
  end
  redis.call("SET", key, string.format("%.0f", nxt))
  return nxt
end
