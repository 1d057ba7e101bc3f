-- The exact nearest neighbours of one namespace among many: a B-tree on namespace that
-- carries each row's id and embedding, so `ChunkRankings.vector_candidates` reads a namespace's vectors
-- in an index-only scan (contiguous index pages, the vectors inline) instead of fetching each heap row
-- and detoasting its embedding (44-49 ms for a 10k-chunk namespace in a 100k-chunk table before).
-- A B-tree tuple holds at most 2,704 bytes (a third of a page): with a namespace of at most 128
-- characters and the id, a vector fits up to about 630 dimensions (512 for the default model). Wider
-- embeddings get no such index and the planner keeps the HNSW index or the namespace index.
DO $migration$
BEGIN
    IF {embedding_dim} <= 600 THEN
        CREATE INDEX IF NOT EXISTS {chunks_namespace_vector_idx} ON {chunks} (namespace) INCLUDE (id, embedding);
    END IF;
END
$migration$;
