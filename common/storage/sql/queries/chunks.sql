-- Static SQL of the chunks table (common/storage/chunk_store.py, chunk_rankings.py). Loaded by
-- common/storage/named_queries.py; see there for the placeholders ({chunks}, ...) and parameters. Reads
-- that take a caller's visibility predicate and the three rankings (optional filters) are composed in
-- Python.

-- name: chunk_embeddings_of_node
-- Title, heading, text and stored embedding (NULL: stored without one) of every chunk of a node
-- (parameters: namespace, node key).
SELECT title, heading, text, embedding FROM {chunks} WHERE namespace = %s AND node_key = %s

-- name: upsert_chunk
-- Inserts one chunk or updates the stored one of (namespace, node_key, chunk_order); a row whose columns
-- and embedding are already equal is left untouched (no new row version), so its row count is 0. The
-- last parameter is embedding_pending (true: the background embedder fills the NULL embedding).
INSERT INTO {chunks} AS c (
    namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta, seen_run,
    embedding_pending
) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, node_key, chunk_order) DO UPDATE SET
    node_type = excluded.node_type, source_path = excluded.source_path, title = excluded.title,
    heading = excluded.heading, text = excluded.text, embedding = excluded.embedding, meta = excluded.meta,
    seen_run = excluded.seen_run, embedding_pending = excluded.embedding_pending
WHERE (c.node_type, c.source_path, c.title, c.heading, c.text, c.meta, c.seen_run, c.embedding_pending)
    IS DISTINCT FROM (excluded.node_type, excluded.source_path, excluded.title, excluded.heading,
        excluded.text, excluded.meta, excluded.seen_run, excluded.embedding_pending)
    OR c.embedding IS DISTINCT FROM excluded.embedding

-- name: claim_pending_embeddings
-- Locks up to N chunks waiting for their embedding, oldest first, skipping rows another embedder holds:
-- of one namespace, or of all when it is NULL (parameters: namespace, namespace, N). Returns id, title,
-- heading, text.
SELECT id, title, heading, text FROM {chunks}
WHERE embedding_pending AND (%s::text IS NULL OR namespace = %s)
ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED

-- name: fill_embedding
-- Stores the embedding of a claimed chunk and takes it off the backlog (parameters: vector, id); a row no
-- longer pending is left alone.
UPDATE {chunks} SET embedding = %s, embedding_pending = false WHERE id = %s AND embedding_pending

-- name: embedding_backlog
-- Chunks waiting for their embedding, and when the oldest was written: of one namespace, or of all when
-- the parameter is NULL (parameters: namespace, namespace).
SELECT count(*), min(created_at) FROM {chunks}
WHERE embedding_pending AND (%s::text IS NULL OR namespace = %s)

-- name: queue_unembedded_episodes
-- Puts the episode chunks of a namespace that have no embedding on the backlog (chunks written before
-- migration 0010); returns how many (parameter: namespace).
UPDATE {chunks} SET embedding_pending = true
WHERE namespace = %s AND node_type = 'episode' AND embedding IS NULL AND NOT embedding_pending

-- name: delete_chunks_from_order
-- Deletes the chunks of a node whose order is at least the given one (parameters: namespace, node key,
-- first order to delete).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s AND chunk_order >= %s

-- name: delete_chunks_beyond_counts
-- Deletes, for each (namespace, node key, count), the chunks of that node whose order is at least the
-- count (parameters: namespaces, node keys, counts: arrays of one length).
DELETE FROM {chunks} AS c USING unnest(%s::text[], %s::text[], %s::int[]) AS x(namespace, node_key, count)
WHERE c.namespace = x.namespace AND c.node_key = x.node_key AND c.chunk_order >= x.count

-- name: delete_chunks_of_node
-- Deletes every chunk of a node (parameters: namespace, node key).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s

-- name: lexemes_of_query
-- The distinct lexemes of a query under a text search configuration, sorted (parameters: config, text).
SELECT DISTINCT lexeme FROM unnest(to_tsvector(%s::regconfig, %s)) ORDER BY 1

-- name: lexeme_frequencies
-- The planner's statistics of search_document of a chunks table (parameter: the table's name): each of
-- the most common lexemes of the sampled rows with the fraction of rows holding it.
SELECT u.lexeme, u.frequency
FROM pg_stats AS s, unnest(s.most_common_elems::text::text[], s.most_common_elem_freqs) AS u(lexeme, frequency)
WHERE s.schemaname = current_schema() AND s.tablename = %s AND s.attname = 'search_document'
    AND u.lexeme IS NOT NULL
