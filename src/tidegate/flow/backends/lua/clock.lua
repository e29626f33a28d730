-- clock: included (--!include clock) by every script that needs the current time.
--
-- clock(arg) -> ms since the Unix epoch: the caller's ARGV, or Redis TIME when it is ""
-- (the fleet clock: no two hosts' clocks are ever compared; tests pass their own time).

local function clock(arg)
  if arg == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
  end
  return tonumber(arg)
end
