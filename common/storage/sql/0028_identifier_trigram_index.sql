-- The trigram index of the chunks table covers the chunk's identifier-like pieces only, not its whole text
-- (ingest). The trigram ranking looks up identifier-like query tokens, which always hold an ASCII
-- digit and no whitespace (`common.storage.chunks.query_terms.identifier_tokens`), as case-insensitive
-- substrings. Such a token found in a chunk lies inside one run of the text between the whitespace
-- characters below (a subset of what Python's str.split() splits on), and that run then holds a digit too,
-- so `identifier_text ILIKE '%token%'` is true exactly when `text ILIKE '%token%'` is: the ranking finds the
-- same rows. `identifier_text` holds those runs of the text that contain a digit, joined by one space
-- (a token holds no space, so it never matches across two runs): 78 characters of 561 on average over the
-- debian upload episodes and the docs vault. Maintaining the GIN index over the whole text was most of
-- the cost of writing a chunk: one INSERT of 200 episode chunks took 136 ms with it and 58 ms with this
-- one (bench/RESULTS.md (git history), `bench/bench_identifier_index.py`).
-- The whole-query match of a sentence does not use this index (`ChunkRankings.trigram_candidates`).
-- The pattern is an escape string (E'...', backslashes doubled): a SQL function's body is parsed when it
-- runs, and with standard_conforming_strings off a plain '\v' would be the letter v.
-- A stored column, not an expression index: the trigram matches are rechecked on the heap, and an expression
-- index computed the runs again for each recheck (ranking p50 10.7 against 2.3 ms, p95 178 against 12).
-- Upgrade cost: on an existing table the new column rewrites the table and rebuilds every index of it, the
-- HNSW index included, under an exclusive lock (a 1M-chunk table is unavailable for that time).
CREATE OR REPLACE FUNCTION {chunk_identifier_text}(chunk_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(piece, ' '), '')
    FROM regexp_split_to_table(chunk_text, E'[ \\t\\n\\r\\f\\v]+') AS piece
    WHERE piece ~ '[0-9]'
$$;
ALTER TABLE {chunks} ADD COLUMN IF NOT EXISTS identifier_text text
    GENERATED ALWAYS AS ({chunk_identifier_text}(text)) STORED;
CREATE INDEX IF NOT EXISTS {chunks_namespace_identifier_idx} ON {chunks}
    USING gin (namespace, identifier_text gin_trgm_ops) WITH (gin_pending_list_limit = 256);
DROP INDEX IF EXISTS {chunks_namespace_trigram_idx};
