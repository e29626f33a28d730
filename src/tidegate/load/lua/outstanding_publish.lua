-- outstanding_publish: record a tracked unit, push its message, confirm the push — in
-- one call, when tidegate's Redis is the broker's.
--
-- The same records as outstanding_record (before kombu's LPUSH), the LPUSH itself, and
-- outstanding_pushed (after it), in that order: s0 is handed out before the push and
-- travels in the message, s1 after it and scores the unit in pushed:<lane>, exactly as
-- when the three are separate round trips (see tidegate.integrations.celery.sweep_index).
-- Atomic, so no other client sees the unit "published, push not confirmed".
--
-- KEYS[1]  units    hash    idempotency key -> record (JSON: task, task_id, queue, args,
--                           kwargs, lane)
-- KEYS[2]  misses   hash    idempotency key -> consecutive sweeps missing
-- KEYS[3]  queues   set     every queue a unit was published to
-- KEYS[4]  seq      string  the last publish sequence handed out
-- KEYS[5]  indexed  string  present once every record of units is in the index
-- KEYS[6]  list     list    the kombu list the message goes to (with kombu's key prefix)
--
-- ARGV[1]  idempotency key
-- ARGV[2]  the record (JSON)
-- ARGV[3]  the index key prefix ("<prefix>:{outstanding}"): the zsets are
--          <prefix>:published:<lane> and <prefix>:pushed:<lane>, score = sequence
-- ARGV[4]  the unit's queue
-- ARGV[5]  the unit's lane (the kombu list, without kombu's key prefix)
-- ARGV[6]  the message (kombu's JSON) up to where s0 goes (the tidegate_seq header's value)
-- ARGV[7]  the message after s0
-- ARGV[8]  now_ms: the clock for both sequences, ms since epoch; "" = Redis TIME
--
-- Returns {s0, s1} (integers, µs-based publish sequences).

--!include next_seq
--!include record_unit

local key, base, lane = ARGV[1], ARGV[3], ARGV[5]
local s0 = record_unit(
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], key, ARGV[2], base, ARGV[4], lane, ARGV[8]
)
redis.call("LPUSH", KEYS[6], ARGV[6] .. string.format("%.0f", s0) .. ARGV[7])
local s1 = next_seq(KEYS[4], ARGV[8])
redis.call("ZREM", base .. ":published:" .. lane, key)
redis.call("ZADD", base .. ":pushed:" .. lane, s1, key)
return {s0, s1}
