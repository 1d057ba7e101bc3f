-- Who may read a context compilation through GetTrace: the compiling caller's own
-- principal:<name> scope (none in development mode), checked like any item's visibility scopes. Rows
-- written before this migration have none and stay readable by every reader of the namespace.
ALTER TABLE {context_traces} ADD COLUMN IF NOT EXISTS scopes text[] NOT NULL DEFAULT '{{}}';
