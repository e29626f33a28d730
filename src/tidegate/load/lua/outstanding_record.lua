-- outstanding_record: a tracked unit is about to be published (before kombu's LPUSH).
--
-- The record replaces any older one of the same key (a new message for the unit); the
-- unit is indexed as "published, push not confirmed" under its sequence s0, which the
-- caller puts in the message's headers. outstanding_pushed moves it on after the push.
--
-- KEYS[1]  units    hash    idempotency key -> record (JSON: task, task_id, queue, args, kwargs, lane)
-- KEYS[2]  misses   hash    idempotency key -> consecutive sweeps missing
-- KEYS[3]  queues   set     every queue a unit was published to
-- KEYS[4]  seq      string  the last publish sequence handed out
-- KEYS[5]  indexed  string  present once every record of units is in the index
--
-- ARGV[1]  idempotency key
-- ARGV[2]  the record (JSON)
-- ARGV[3]  the index key prefix ("<prefix>:{outstanding}"): the zsets are
--          <prefix>:published:<queue> and <prefix>:pushed:<queue>, score = sequence
-- ARGV[4]  the unit's queue
-- ARGV[5]  the unit's lane (the kombu list its message goes to, without prefix)
-- ARGV[6]  now_ms: the clock for the sequence, ms since epoch; "" = Redis TIME
--
-- Returns s0, the unit's publish sequence (an integer).

--!include next_seq
--!include record_unit

return record_unit(
  KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5],
  ARGV[6]
)
