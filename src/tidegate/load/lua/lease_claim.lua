-- lease_claim: hand the oldest waiting members of one line to one claimer, crash-safely.
--
-- One script for the parking lot (a mover claims due messages to republish) and the
-- quarantine (a replayer claims the oldest documents of one queue). Claimed members
-- move to an in-flight set with a lease; the claimer acks each one once it is
-- republished (or releases it). A claimer that dies mid-way loses nothing: once its
-- lease expires, the next claim puts the member back in line. Members another claimer
-- still holds (lease not expired) are never taken twice; the reply says how many.
--
-- KEYS[1]  waiting   zset  member -> place in line (ms since epoch: parking's due time,
--                          quarantine's quarantine time)
-- KEYS[2]  inflight  zset  member -> claim lease expiry (ms since epoch)
-- KEYS[3]  bodies    hash  member -> what the claimer gets (envelope or record JSON)
-- KEYS[4]  home      hash  member -> place in line to return to when its lease expires
--                          (ms; quarantine's "since"). Optional: without it an expired
--                          claim is due again at once (now); with it, a member that has
--                          no home entry is not put back.
--
-- ARGV[1]  now_ms    current time in ms since epoch; "" = use Redis TIME
-- ARGV[2]  limit     most members to claim in this call (>= 1)
-- ARGV[3]  lease_ms  how long the claimer has to republish and ack, ms
-- ARGV[4]  pick      "due": only members whose place is <= now (parking);
--                    "oldest": the oldest, whatever their place (quarantine)
--
-- Returns a flat list {held, member1, body1, home1, member2, ...}: held = members still
-- leased by another claimer (after expired leases went back), as a decimal string;
-- then the claimed members, oldest first, each with its body and its KEYS[4] entry
-- ("0" where there is none, always "0" without KEYS[4]).

--!include clock

local now = clock(ARGV[1])
local home = KEYS[4]
local expired = redis.call("ZRANGEBYSCORE", KEYS[2], "-inf", string.format("%.3f", now))
for _, member in ipairs(expired) do
  redis.call("ZREM", KEYS[2], member)
  if home then
    local place = redis.call("HGET", home, member)
    if place then
      redis.call("ZADD", KEYS[1], place, member)
    end
  else
    redis.call("ZADD", KEYS[1], string.format("%.3f", now), member)
  end
end
local held = redis.call("ZCARD", KEYS[2])
local members
if ARGV[4] == "due" then
  members = redis.call("ZRANGEBYSCORE", KEYS[1], "-inf", string.format("%.3f", now),
                       "LIMIT", 0, tonumber(ARGV[2]))
elseif ARGV[4] == "oldest" then
  members = redis.call("ZRANGE", KEYS[1], 0, tonumber(ARGV[2]) - 1)
else
  return redis.error_reply("lease_claim: pick must be \"due\" or \"oldest\"")
end
local lease_until = string.format("%.3f", now + tonumber(ARGV[3]))
local out = {tostring(held)}
for _, member in ipairs(members) do
  redis.call("ZREM", KEYS[1], member)
  local body = redis.call("HGET", KEYS[3], member)
  if body then
    redis.call("ZADD", KEYS[2], lease_until, member)
    table.insert(out, member)
    table.insert(out, body)
    table.insert(out, home and redis.call("HGET", home, member) or "0")
  end
end
return out
