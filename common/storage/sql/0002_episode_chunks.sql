-- Observation content is indexed as a chunk of its episode for full text and trigram search without
-- an embedding (keeps observation ingest fast); such rows have embedding NULL and vector search skips them.
ALTER TABLE {chunks} ALTER COLUMN embedding DROP NOT NULL;
