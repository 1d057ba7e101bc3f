-- Static SQL of WAL positions: consistency tokens and read replicas (common/storage/replicas/wal_position.py,
-- common/storage/replicas/read_routing.py). Positions travel as pg_lsn text (common/kernel/consistency.py parses it).

-- name: current_wal_position
-- The primary's current WAL write position: run after a write committed, it is at or past its commit
-- record (the consistency token of the write).
SELECT pg_current_wal_lsn()::text

-- name: replayed_wal_position
-- What this database can answer for: on a standby the WAL position replayed so far, on a primary its
-- current position (every committed write is visible there).
SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text

-- name: replica_status
-- One row: in recovery (a standby), position replayed (current position on a primary), seconds since
-- the last replayed transaction committed on the primary (NULL on a primary or before any replay).
SELECT pg_is_in_recovery(),
       CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text,
       extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
