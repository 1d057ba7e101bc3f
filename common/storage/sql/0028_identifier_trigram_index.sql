-- The trigram index of the chunks table covers the chunk's identifier-like pieces only, not its whole text
-- (issue 15, ingest). The trigram ranking looks up identifier-like query tokens, which always hold an ASCII
-- digit and no whitespace (`common.storage.chunk_rankings.identifier_tokens`), as case-insensitive
-- substrings. Such a token found in a chunk lies inside one run of the text between the whitespace
-- characters below (a subset of what Python's str.split() splits on), and that run then holds a digit too,
-- so `identifier_text ILIKE '%token%'` is true exactly when `text ILIKE '%token%'` is: the ranking finds the
-- same rows. `identifier_text` holds those runs of the text that contain a digit, joined by one space
-- (a token holds no space, so it never matches across two runs): on the debian upload episodes 91
-- characters of 483 on average. Maintaining the GIN index over the whole text was most of the cost of
-- writing a chunk: 200 episode chunks took 140 ms with it and 61 ms with the identifier index instead
-- (bench/RESULTS.md, session 19).
-- The whole-query match of a sentence does not use this index (`ChunkRankings.trigram_candidates`).
-- On an existing table the new column rewrites it and the index build holds a write lock while it runs.
CREATE OR REPLACE FUNCTION {chunk_identifier_text}(chunk_text text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(string_agg(piece, ' '), '')
    FROM regexp_split_to_table(chunk_text, '[ \t\n\r\f\v]+') AS piece
    WHERE piece ~ '[0-9]'
$$;
ALTER TABLE {chunks} ADD COLUMN IF NOT EXISTS identifier_text text
    GENERATED ALWAYS AS ({chunk_identifier_text}(text)) STORED;
CREATE INDEX IF NOT EXISTS {chunks_namespace_identifier_idx} ON {chunks}
    USING gin (namespace, identifier_text gin_trgm_ops) WITH (gin_pending_list_limit = 256);
DROP INDEX IF EXISTS {chunks_namespace_trigram_idx};
