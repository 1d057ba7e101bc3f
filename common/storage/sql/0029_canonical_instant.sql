-- The canonical instant (DESIGN §3: UTC, `YYYY-MM-DDTHH:MM:SSZ`, with `.ffffff` before the `Z` only when the
-- microseconds are not zero) computed by the database, for the properties of the fact edges that a batch
-- creates from the rows of `facts` it has just written (`common.storage.graph_edges.GraphEdges.create_fact_edges`)
-- instead of sending each edge's property map from Python (issue 15: building and encoding those maps was
-- about a tenth of the ingest service's interpreter time). It must give exactly the text of
-- `common.kernel.identifiers.canonical_instant`, a year below 1000 without leading zeros included (`FM`);
-- tests/integration/test_fact_edges_in_sql.py checks both on the server.
CREATE OR REPLACE FUNCTION {canonical_instant}(instant timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT to_char(instant AT TIME ZONE 'UTC', 'FMYYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN extract(microseconds FROM instant)::bigint % 1000000 <> 0
                THEN to_char(instant AT TIME ZONE 'UTC', '.US') ELSE '' END
        || 'Z'
$$;
