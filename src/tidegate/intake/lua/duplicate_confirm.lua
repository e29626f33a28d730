-- duplicate_confirm: every unit is published; remember the interchange as accepted.
--
-- Written even when the claim has expired meanwhile (a slow publish): the units are
-- on the broker, so a later copy is a duplicate whoever claimed it since.
--
-- KEYS[1]  seen         string  {prefix}:intake:interchange:<sha256(sender, reference)>
--
-- ARGV[1]  token        the claiming request's token
-- ARGV[2]  accepted_ms  when it was accepted (ms since epoch)
-- ARGV[3]  window_ms    how long a repeat is rejected as a duplicate (ms, > 0)
--
-- Returns 1 when this request still held the claim, 0 when it had expired or been
-- taken over (the record is written either way).

local held = redis.call("GET", KEYS[1]) == "pending:" .. ARGV[1]
redis.call("SET", KEYS[1], "accepted:" .. ARGV[2], "PX", ARGV[3])
if held then
  return 1
end
return 0
