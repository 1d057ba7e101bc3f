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
-- and embedding are already equal is left untouched (no new row version), so its row count is 0.
INSERT INTO {chunks} AS c (
    namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta, seen_run
) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, node_key, chunk_order) DO UPDATE SET
    node_type = excluded.node_type, source_path = excluded.source_path, title = excluded.title,
    heading = excluded.heading, text = excluded.text, embedding = excluded.embedding, meta = excluded.meta,
    seen_run = excluded.seen_run
WHERE (c.node_type, c.source_path, c.title, c.heading, c.text, c.meta, c.seen_run)
    IS DISTINCT FROM (excluded.node_type, excluded.source_path, excluded.title, excluded.heading,
        excluded.text, excluded.meta, excluded.seen_run)
    OR c.embedding IS DISTINCT FROM excluded.embedding

-- name: delete_chunks_from_order
-- Deletes the chunks of a node whose order is at least the given one (parameters: namespace, node key,
-- first order to delete).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s AND chunk_order >= %s

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

-- name: upsert_vault_chunk
-- `upsert_chunk` for a vault run (seen_run set): a chunk written through the API (seen_run NULL) at the
-- same order is left as it is (the vault never overwrites agent data, issue 11 §3), so its row count is 0.
INSERT INTO {chunks} AS c (
    namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta, seen_run
) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, node_key, chunk_order) DO UPDATE SET
    node_type = excluded.node_type, source_path = excluded.source_path, title = excluded.title,
    heading = excluded.heading, text = excluded.text, embedding = excluded.embedding, meta = excluded.meta,
    seen_run = excluded.seen_run
WHERE c.seen_run IS NOT NULL AND (
    (c.node_type, c.source_path, c.title, c.heading, c.text, c.meta, c.seen_run)
    IS DISTINCT FROM (excluded.node_type, excluded.source_path, excluded.title, excluded.heading,
        excluded.text, excluded.meta, excluded.seen_run)
    OR c.embedding IS DISTINCT FROM excluded.embedding)

-- name: delete_vault_chunks_from_order
-- `delete_chunks_from_order` for a vault run: only chunks a vault run wrote (seen_run set) (parameters:
-- namespace, node key, first order to delete).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s AND chunk_order >= %s AND seen_run IS NOT NULL

-- name: delete_vault_chunks_of_node
-- Deletes the chunks a vault run wrote of a node, keeping those written through the API (parameters:
-- namespace, node key).
DELETE FROM {chunks} WHERE namespace = %s AND node_key = %s AND seen_run IS NOT NULL

-- name: count_api_chunks_of_node
-- Chunks of a node written through the API (seen_run NULL) (parameters: namespace, node key).
SELECT count(*) FROM {chunks} WHERE namespace = %s AND node_key = %s AND seen_run IS NULL
