-- The SQL-only ceiling of an outbox drain: a bare claim-and-delete of one batch of 100 with
-- FOR UPDATE SKIP LOCKED, no ordering per key, no lease and no publishing. The outbox benchmark
-- sends it from one client, one statement per round trip (autocommit), until it deletes nothing,
-- on the same rows the engine drains: `{table}` is replaced by the benchmark's table.
DELETE FROM {table} WHERE id IN (
    SELECT id FROM {table} ORDER BY seq LIMIT 100 FOR UPDATE SKIP LOCKED
)
