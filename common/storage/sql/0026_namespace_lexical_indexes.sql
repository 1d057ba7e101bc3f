-- The lexical indexes of the chunks table lead with the namespace (issue 15; needs btree_gin, created by
-- the migration runner): every full-text and trigram statement (`common/storage/chunk_rankings.py`) has
-- `namespace = ...`, and a GIN index on (namespace, search_document) or (namespace, text gin_trgm_ops)
-- intersects the namespace's posting list with the lexemes' (or trigrams') inside the index, so for one
-- namespace among many no other tenant's row reaches the heap.
CREATE INDEX IF NOT EXISTS {chunks_namespace_search_idx} ON {chunks} USING gin (namespace, search_document);
CREATE INDEX IF NOT EXISTS {chunks_namespace_trigram_idx} ON {chunks} USING gin (namespace, text gin_trgm_ops);
