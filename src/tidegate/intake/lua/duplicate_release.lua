-- duplicate_release: nothing was acknowledged; let the sender's retry claim again.
--
-- KEYS[1]  seen   string  {prefix}:intake:interchange:<sha256(sender, reference)>
--
-- ARGV[1]  token  the claiming request's token
--
-- Returns 1 when the claim was this request's and is gone, 0 otherwise (another
-- request's claim or an accepted record is never touched).

if redis.call("GET", KEYS[1]) == "pending:" .. ARGV[1] then
  redis.call("DEL", KEYS[1])
  return 1
end
return 0
