-- adaptive_save: store what the controller learned, only if it still holds the lease.
--
-- The check and the write are one script, so a controller that lost its lease (it
-- stalled past until_ms and another worker took over) cannot overwrite the new
-- leader's state: its write is refused whole, nothing is half-written.
--
-- KEYS[1]  lease    hash  holder, until_ms (see adaptive_lease.lua)
-- KEYS[2]  state    hash  field = controller ("rate", "concurrency"), value = JSON state
-- KEYS[3]  history  list  JSON decision events, newest first, at most history_max
--
-- ARGV[1]  holder        the writing worker's id
-- ARGV[2]  now_ms        current time in ms since epoch; "" = use Redis TIME
-- ARGV[3]  history_max   events kept in the history (>= 1)
-- ARGV[4]  n_fields      number of state field/value pairs that follow
-- ARGV[5…] field, value pairs (n_fields of them), then the events to append, oldest first
--
-- Returns 1 if the state and events were written, 0 if the caller does not hold the
-- lease (nothing written).

--!include clock

local now = clock(ARGV[2])
local holder = redis.call("HGET", KEYS[1], "holder")
local until_ms = tonumber(redis.call("HGET", KEYS[1], "until_ms"))
if holder ~= ARGV[1] or until_ms == nil or until_ms < now then
  return 0
end
local n_fields = tonumber(ARGV[4])
local first_event = 5 + 2 * n_fields
if n_fields > 0 then
  redis.call("HSET", KEYS[2], unpack(ARGV, 5, first_event - 1))
end
if #ARGV >= first_event then
  redis.call("LPUSH", KEYS[3], unpack(ARGV, first_event, #ARGV))
  redis.call("LTRIM", KEYS[3], 0, tonumber(ARGV[3]) - 1)
end
return 1
