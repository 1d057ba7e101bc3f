-- Episode chunks are embedded after they are written: an observation's episode
-- chunk is stored with embedding NULL and embedding_pending true, and the background embedder of
-- ingest_service (ingest_service/embedding/episodes.py) fills the vector in batches and clears the flag.
-- The partial index holds only the backlog, so claiming a batch and counting it stay cheap at any table
-- size. Episode chunks stored before this migration are not queued here (a large table would keep every
-- ingest process busy at start-up); ChunkStore.queue_unembedded_episodes queues a namespace's.
ALTER TABLE {chunks} ADD COLUMN IF NOT EXISTS embedding_pending boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS {chunks_embedding_pending_idx} ON {chunks} (id) WHERE embedding_pending;
