-- ledger_entry: read one unit's ledger entry, the fleet clock, and whether the ledger
-- is in doubt because Redis restarted (and may have lost its last writes).
--
-- A restart is seen as a new server run_id (INFO server) under the one recorded in
-- the downstream's epoch hash. Redis restarted from its append-only file may have lost
-- up to the last second of writes (appendfsync everysec): delivered marks, and the
-- broker's pops of the messages they settled. Such a message comes back looking new,
-- so for doubt_ms after a restart every unit without a record asks the downstream.
-- The first sight of a server (no run_id recorded yet) is not a restart, unless the
-- caller read another server before this one (ARGV[3]): then the record of the
-- server before it was lost with the last second of writes (a crash within a second of
-- the epoch's first write, or a server started without its files), and it is one —
-- whoever read the new server first. Such a caller puts the ledger in doubt until
-- doubt_ms after the server started (INFO's uptime).
--
-- KEYS[1]  entry   string  "1" = delivered, "s:<ms>" / "s" = sending (see ledger_sending)
-- KEYS[2]  epoch   hash    run_id -> the server last seen, doubt_until -> ms since epoch
--
-- ARGV[1]  doubt_ms  how long a restart leaves the ledger in doubt, ms (>= 0)
-- ARGV[2]  now_ms    current time in ms since epoch; "" = use Redis TIME (fleet clock)
-- ARGV[3]  known     run_ids the caller read before, comma-separated ("" = none): one
--                    that is not this server's means the caller saw it take over
--
-- Returns {entry or false, now_ms, doubt_until_ms, run_id} (times as decimal strings,
-- ms since epoch on the clock of ARGV[2]; run_id the server's, for the caller to
-- remember).

--!include clock

local now = clock(ARGV[2] or "")
local value = redis.call("GET", KEYS[1])
local info = redis.call("INFO", "server")
local run_id = string.match(info, "run_id:(%x+)")
local seen = redis.call("HGET", KEYS[2], "run_id")
local doubt_until = tonumber(redis.call("HGET", KEYS[2], "doubt_until") or "0")
local witnessed = false
for known in string.gmatch(ARGV[3] or "", "[^,]+") do
  if known ~= run_id then
    witnessed = true
  end
end
if seen ~= run_id then
  if seen then
    doubt_until = now + tonumber(ARGV[1])
    redis.call("HSET", KEYS[2], "doubt_until", string.format("%.3f", doubt_until))
  end
  redis.call("HSET", KEYS[2], "run_id", run_id)
end
if witnessed then
  local uptime_s = tonumber(string.match(info, "uptime_in_seconds:(%d+)") or "0")
  local since_start = now - 1000 * uptime_s + tonumber(ARGV[1])
  if since_start > doubt_until then
    doubt_until = since_start
    redis.call("HSET", KEYS[2], "doubt_until", string.format("%.3f", doubt_until))
  end
end
return {value, string.format("%.3f", now), string.format("%.3f", doubt_until), run_id}
