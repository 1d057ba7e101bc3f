-- The full-text and trigram GIN indexes of the chunks table keep a pending list of at most 256 kB (the
-- server default, gin_pending_list_limit, is 4 MB). GIN's fast update appends new entries to that list,
-- unsorted, until a vacuum, an autoanalyze or the limit merges them into the index, and every search
-- reads the whole list. While chunks are being written, a 4 MB list (up to ~860 pages for these two
-- indexes) made each full-text and trigram ranking read it: on the real base (docs vault and FAQ, 9,874
-- chunks), with 3,000 chunk rows written in batches of 50 between searches, the full-text ranking took
-- 8.2 ms and the trigram ranking 4.7 ms on average, against 5.9 and 2.1 at 256 kB and 6.2 and 2.0 with
-- fast update off; the writes took 1.4x as long as at 4 MB (fast update off: 3.8x). bench/RESULTS.md (git history),
--. A storage parameter only: no rebuild, and an existing list is merged at the next vacuum.
ALTER INDEX {chunks_namespace_search_idx} SET (gin_pending_list_limit = 256);
ALTER INDEX {chunks_namespace_trigram_idx} SET (gin_pending_list_limit = 256);
