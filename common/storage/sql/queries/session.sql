-- Session set-up of every connection (common/storage/session.py: prepare_age_session), used by the
-- pool (database.py), the migration runner and label creation. Loaded by common/storage/named_queries.py.

-- name: load_age
-- Loads the AGE library into the session (fails for non-superusers: the server then must have age in
-- shared_preload_libraries).
LOAD 'age'

-- name: set_age_search_path
-- Our tables in the first writable schema, never in AGE's own; ag_catalog last so agtype operators
-- resolve.
SET search_path = "$user", public, ag_catalog

-- name: set_local_statement_timeout
-- The statement timeout of the rest of this transaction only, in milliseconds as text (parameter); a
-- long administrative write (an erasure scanning a large namespace) gets its own budget.
SELECT set_config('statement_timeout', %s, true)
