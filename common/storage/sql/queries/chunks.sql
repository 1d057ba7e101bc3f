-- Static SQL of the chunks table (common/storage/chunks/store.py, rankings.py). Loaded by
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
-- last parameter is embedding_pending (true: the background embedder fills the NULL embedding). A vault
-- run's write (seen_run set) leaves a chunk written through the API (seen_run NULL) at the same order as
-- it is (the vault never overwrites agent data), so its row count is 0 too.
INSERT INTO {chunks} AS c (
    namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta, seen_run,
    embedding_pending
) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (namespace, node_key, chunk_order) DO UPDATE SET
    node_type = excluded.node_type, source_path = excluded.source_path, title = excluded.title,
    heading = excluded.heading, text = excluded.text, embedding = excluded.embedding, meta = excluded.meta,
    seen_run = excluded.seen_run, embedding_pending = excluded.embedding_pending
WHERE (excluded.seen_run IS NULL OR c.seen_run IS NOT NULL) AND (
    (c.node_type, c.source_path, c.title, c.heading, c.text, c.meta, c.seen_run, c.embedding_pending)
    IS DISTINCT FROM (excluded.node_type, excluded.source_path, excluded.title, excluded.heading,
        excluded.text, excluded.meta, excluded.seen_run, excluded.embedding_pending)
    OR c.embedding IS DISTINCT FROM excluded.embedding)

-- name: upsert_chunks
-- `upsert_chunk` of many rows in ONE statement (parallel arrays, one element per chunk, no
-- (namespace, node_key, chunk_order) twice): the statement-level term statistics triggers (migration
-- 0011) then run once for the rows, not once per row. Parameters: namespaces, keys, orders, types,
-- paths, titles, headings, texts, embeddings (vector[], NULL elements for pending), metas (jsonb[]),
-- pending (boolean[]); all sent in binary format: psycopg quotes every element of a text-format array
-- in Python (12 ms for 160 texts of 2.8 KB, against 0.04 ms in binary).
INSERT INTO {chunks} AS c (
    namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta, seen_run,
    embedding_pending
)
SELECT x.namespace, x.node_key, x.chunk_order, x.node_type, x.source_path, x.title, x.heading, x.text,
    x.embedding, x.meta, NULL, x.pending
FROM unnest(%(namespaces)b::text[], %(keys)b::text[], %(orders)b::int[], %(types)b::text[],
    %(paths)b::text[], %(titles)b::text[], %(headings)b::text[], %(texts)b::text[],
    %(embeddings)b::vector[], %(metas)b::jsonb[], %(pending)b::boolean[])
    AS x(namespace, node_key, chunk_order, node_type, source_path, title, heading, text, embedding, meta,
        pending)
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

-- name: fill_embeddings
-- Stores the embeddings of claimed chunks and takes them off the backlog in ONE statement (parallel
-- arrays: ids bigint[], embeddings vector[]), so the statement-level term statistics triggers (migration
-- 0011) run once per round, not once per chunk; a row no longer pending is left alone.
UPDATE {chunks} AS c SET embedding = x.embedding, embedding_pending = false
FROM unnest(%(ids)s::bigint[], %(embeddings)s::vector[]) AS x(id, embedding)
WHERE c.id = x.id AND c.embedding_pending

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

-- name: lexeme_statistics
-- BM25 statistics of a query in a namespace (common/storage/chunks/lexical_scoring.py; tables of
-- sql/0011_lexeme_statistics.sql): each distinct lexeme of the query under the configuration, and the
-- namespace totals row (lexeme ''), with the number of chunks holding it and (totals row) their summed
-- lengths; folded rows and not yet folded deltas added up (parameters: config, query, namespace).
WITH query AS MATERIALIZED (
    SELECT DISTINCT lexeme FROM unnest(to_tsvector(%(config)s::regconfig, %(query)s)) UNION SELECT ''
)
SELECT query.lexeme, coalesce(sum(counted.documents), 0)::bigint AS documents,
    coalesce(sum(counted.lengths), 0)::bigint AS lengths
FROM query LEFT JOIN (
    SELECT lexeme, documents, lengths FROM {chunk_terms}
    WHERE namespace = %(namespace)s AND lexeme = ANY(ARRAY(SELECT lexeme FROM query))
    UNION ALL
    SELECT lexeme, documents, lengths FROM {chunk_term_deltas}
    WHERE namespace = %(namespace)s AND lexeme = ANY(ARRAY(SELECT lexeme FROM query))
) AS counted USING (lexeme)
GROUP BY query.lexeme

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

-- name: similar_chunk_pairs
-- (source node key, source chunk order, target node key, target chunk order, cosine similarity) for every
-- source and target chunk of one namespace whose embeddings are at least `threshold` similar, never a
-- chunk with itself, sorted by source then target (codepoint order of the keys). The chunks are given by
-- their row ids, the sources and the targets as two arrays (parameters: namespace, sources, targets,
-- threshold): a Search has them from its rankings, and two integer arrays cost the caller far less to
-- send than the four parallel arrays of keys, orders and flags they replace (bench/RESULTS.md (git history));
-- chunks without an embedding are left out.
-- `l2_normalize` makes one detoasted, unit-length copy of each embedding in the materialized CTE, so the
-- pairs compare in-memory vectors (on the stored, TOASTed 2 KB column every pair fetched both vectors
-- again: 10 x 150 pairs took 27 ms), and the cosine is their inner product (`<#>` is its negative). A zero
-- vector (a remote model may return one) stays zero, so its similarity with every chunk is 0; the cosine
-- distance `<=>` would be NaN there, which PostgreSQL orders above every number (`NaN >= threshold`).
-- Used by Search's similar-chunk propagation (query_service/retrieval/rank_fusion.py).
WITH wanted AS MATERIALIZED (
    SELECT c.id, c.node_key, c.chunk_order, c.id = ANY(%(sources)s::bigint[]) AS source,
        c.id = ANY(%(targets)s::bigint[]) AS target, l2_normalize(c.embedding) AS unit
    FROM {chunks} AS c
    WHERE c.namespace = %(namespace)s AND c.id = ANY(%(sources)s::bigint[] || %(targets)s::bigint[])
        AND c.embedding IS NOT NULL
)
SELECT s.node_key, s.chunk_order, t.node_key, t.chunk_order, -(s.unit <#> t.unit) AS similarity
FROM wanted AS s
JOIN wanted AS t ON t.target AND t.id <> s.id
WHERE s.source AND -(s.unit <#> t.unit) >= %(threshold)s
ORDER BY s.node_key COLLATE "C", s.chunk_order, t.node_key COLLATE "C", t.chunk_order
