-- Static read SQL of the facts table (common/storage/fact_store.py). Loaded by
-- common/storage/named_queries.py; see there for the placeholders and parameters. {fact_columns} and
-- {qualified_fact_columns} (the same prefixed with "f.") are the columns of a FactRow, in its field order
-- (fact_store._COLUMNS). ListFacts and conflict flags (optional filters, the caller's visibility) are
-- composed in Python, and so, for now, are the write statements (insert or strengthen, close, strike,
-- delete).

-- name: fact_by_id
-- One fact (parameters: namespace, fact id).
SELECT {fact_columns} FROM {facts} WHERE namespace = %s AND fact_id = %s

-- name: fact_by_id_for_update
-- One fact locked FOR UPDATE until the transaction ends (parameters: namespace, fact id).
SELECT {fact_columns} FROM {facts} WHERE namespace = %s AND fact_id = %s FOR UPDATE

-- name: keys_of_facts
-- The keys among %(keys)s that are the subject or object of some fact of %(namespace)s (lost ones
-- included).
SELECT subject_key FROM {facts} WHERE namespace = %(namespace)s AND subject_key = ANY(%(keys)s)
UNION SELECT object_key FROM {facts} WHERE namespace = %(namespace)s AND object_key = ANY(%(keys)s)

-- name: open_facts_of_subject_predicate
-- The facts of (subject, predicate) whose interval is open, lost ones included (parameters: namespace,
-- subject key, predicate), by object and fact_id (facts_subject_idx).
SELECT {fact_columns} FROM {facts}
WHERE namespace = %s AND subject_key = %s AND predicate = %s AND valid_to IS NULL
ORDER BY object_key, fact_id

-- name: first_facts_superseding
-- For each fact id of a list that some fact's supersedes names, the earliest such fact by valid_from,
-- fact_id (parameters: namespace, fact ids).
SELECT DISTINCT ON (supersedes) {fact_columns} FROM {facts} WHERE namespace = %s AND supersedes = ANY(%s)
ORDER BY supersedes, valid_from, fact_id

-- name: facts_by_ids
-- The facts of %(ids)s in %(namespace)s (missing ones left out), by fact_id: one fenced primary-key
-- look-up per id.
SELECT {qualified_fact_columns} FROM unnest(%(ids)b::text[]) AS x(fact_id)
CROSS JOIN LATERAL (
    SELECT * FROM {facts} WHERE fact_id = x.fact_id AND namespace = %(namespace)s OFFSET 0
) AS f
ORDER BY f.fact_id
