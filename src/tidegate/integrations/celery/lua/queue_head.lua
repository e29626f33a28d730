-- queue_head: what the oldest message of one kombu list says about the units behind it.
--
-- kombu LPUSHes and BRPOPs, so index -1 is the oldest message; a message kombu restored
-- from unacked is RPUSHed there again (headers.redelivered = true), ahead of everything.
-- Walking from -1, the restored messages are collected; the first other message's
-- publish sequence (headers.tidegate_seq) bounds the sweep: every unit pushed with a
-- smaller s1 left this list before the read. One list, read in one atomic call.
--
-- KEYS[1]  list  a kombu queue list (one priority step)
--
-- ARGV[1]  first index to look at, counted from the oldest end (1 = the oldest)
-- ARGV[2]  how many messages to look at, at most
-- ARGV[3]  the last publish sequence, read before this call (the sequence only grows:
--          a unit pushed after this read gets a larger s1)
--
-- Returns {status, bound, raw, id...}:
--   status 0  bound found: a message's s0, or (the walk reached the list's end) ARGV[3] + 1;
--   status 1  the first message that was not restored carries no sequence: raw is it;
--   status 2  only restored messages among those looked at: call again further on;
--   status 3  a message that is not kombu's JSON: raw is it.
-- id...: the task ids of the restored messages looked at.

local first, count = tonumber(ARGV[1]), tonumber(ARGV[2])
local ids = {}
local function reply(status, bound, raw)
  local out = {status, bound, raw}
  for _, id in ipairs(ids) do
    out[#out + 1] = id
  end
  return out
end
for i = first, first + count - 1 do
  local raw = redis.call("LINDEX", KEYS[1], -i)
  if not raw then
    return reply(0, string.format("%.0f", tonumber(ARGV[3]) + 1), "")
  end
  local ok, msg = pcall(cjson.decode, raw)
  if not ok or type(msg) ~= "table" or type(msg.headers) ~= "table" then
    return reply(3, "0", raw)
  end
  local headers = msg.headers
  if headers.redelivered == true then
    ids[#ids + 1] = tostring(headers.id)
  elseif tonumber(headers.tidegate_seq) then
    return reply(0, string.format("%.0f", tonumber(headers.tidegate_seq)), "")
  else
    return reply(1, "0", raw)
  end
end
return reply(2, "0", "")
