-- The SQL-only ceiling of an outbox drain, sent by the outbox benchmark on the same rows the
-- engine drains (`{table}` is replaced by the benchmark's table, `$1` is the batch size, `$2` the
-- lease in seconds). One batch is the work of one engine claim and its delete, as plain SQL with
-- no client logic between the statements: in one transaction the claim's turn and the lease of
-- up to a batch of due rows whose key is not busy, in sequence order; after the commit, the
-- delete of every leased row. A client stops when its lease comes back empty.

-- @turn: the claim's bounds and its turn on the outbox's advisory lock.
SELECT pg_advisory_xact_lock(hashtextextended('bench-ceiling', 0))
FROM (SELECT set_config('statement_timeout', '30000', true),
             set_config('lock_timeout', '30000', true),
             set_config('idle_in_transaction_session_timeout', '30000', true),
             set_config('work_mem', '64MB', true)) timeouts;

-- @lease: due rows whose key is not busy, in sequence order, leased and returned whole.
WITH busy AS MATERIALIZED (
  SELECT b.ordering_key AS busy_key FROM {table} b
  WHERE (b.claimed_until > now() OR (b.attempts > 0 AND b.next_attempt_at > now()))
    AND b.ordering_key IS NOT NULL),
candidates AS MATERIALIZED (
  SELECT o.ctid AS row_ctid FROM {table} o
  WHERE (o.attempts = 0 OR o.next_attempt_at <= now())
    AND (o.claimed_until IS NULL OR o.claimed_until <= now())
    AND (o.ordering_key IS NULL OR o.ordering_key NOT IN (SELECT busy_key FROM busy))
  ORDER BY o.seq LIMIT $1
  FOR UPDATE OF o SKIP LOCKED),
claimed AS (
  UPDATE {table} t SET claimed_until = now() + make_interval(secs => $2)
  FROM candidates c WHERE t.ctid = c.row_ctid
  RETURNING t.*)
SELECT * FROM claimed ORDER BY seq;

-- @delete: the leased rows, after the commit.
DELETE FROM {table} WHERE id = ANY($1);

-- @bare: for reference, a bare claim-and-delete of a batch: no lease, no per-key order, no turn.
DELETE FROM {table} WHERE id IN (SELECT id FROM {table} ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED);
