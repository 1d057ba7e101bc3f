-- The lexical indexes of the chunks table lead with the namespace (`btree_gin`, created by the
-- migration runner, gives GIN the text equality). The table-wide GIN indexes held every tenant's postings:
-- for one namespace of 10k chunks among 1M, the full-text lookup read every tenant's postings of a lexeme
-- (23,700 for 237 rows of the namespace) and, when the planner estimated one row, fetched and filtered
-- the other tenants' heap rows (4,939 heap blocks for 51 kept). A multi-column GIN index intersects the
-- namespace's posting list with the lexemes' (trigrams') inside the index, so only the namespace's rows
-- reach the heap (bench/RESULTS.md (git history), `bench/bench_lexical_indexes.py`). Every statement that used the
-- table-wide indexes has `namespace = ...` (`common/storage/chunks/rankings.py`: the full-text and trigram
-- rankings); a GIN index also serves a condition on its second column alone, so nothing loses its index.
-- The BM25 statistics come from the trigger-kept tables of 0011, not from these indexes.
-- On an existing large table the builds hold a write lock for their duration (1M chunks: ~45 s).
CREATE INDEX IF NOT EXISTS {chunks_namespace_search_idx} ON {chunks} USING gin (namespace, search_document);
CREATE INDEX IF NOT EXISTS {chunks_namespace_trigram_idx} ON {chunks} USING gin (namespace, text gin_trgm_ops);
DROP INDEX IF EXISTS {chunks_search_idx};
DROP INDEX IF EXISTS {chunks_trigram_idx};
