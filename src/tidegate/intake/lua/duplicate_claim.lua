-- duplicate_claim: check an interchange against the duplicate window and claim it, atomically.
--
-- One key per interchange (sender id + control reference, hashed by the client):
--   "pending:<token>"     a request is publishing it; expires after the claim lease
--   "accepted:<ms>"       accepted at <ms> (ms since epoch); expires after the window
-- Two concurrent posts of one interchange both run this script; Redis runs them one
-- after the other, so exactly one gets "claimed" and only that one publishes.
--
-- KEYS[1]  seen      string  {prefix}:intake:interchange:<sha256(sender, reference)>
--
-- ARGV[1]  token     random token of the claiming request
-- ARGV[2]  lease_ms  how long an unfinished claim blocks others (ms, > 0)
--
-- Returns {verdict, detail}: {"claimed", ""}, {"duplicate", accepted_at_ms} or
-- {"in_flight", remaining_lease_ms}.

local current = redis.call("GET", KEYS[1])
if not current then
  redis.call("SET", KEYS[1], "pending:" .. ARGV[1], "PX", ARGV[2])
  return {"claimed", ""}
end
if string.sub(current, 1, 9) == "accepted:" then
  return {"duplicate", string.sub(current, 10)}
end
return {"in_flight", tostring(redis.call("PTTL", KEYS[1]))}
