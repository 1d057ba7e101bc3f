-- RecallMemories' approximate stage (common/storage/memories/recall.py, docs/how-to/memory-records.md
-- "How recall scales"): the HNSW scan cannot enumerate many identical vectors (their graph neighbours are
-- one another), so when an owner holds more copies of one text than the scan returns, the copies that
-- score best by recency and importance were missed. The candidates' texts are looked up again among the
-- owner's memory chunks through this index: (namespace, the owner's scope - a memory chunk's only scope,
-- ingest_service/memories/writer.py: chunk_of -, the text's md5), memory chunks only.
CREATE INDEX IF NOT EXISTS {chunks_memory_text_idx}
    ON {chunks} (namespace, (meta -> 'scopes' ->> 0), md5(text))
    WHERE node_type = 'memory' AND chunk_order = 0;
