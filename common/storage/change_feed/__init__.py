"""The change feed's storage: the outbox (`common.storage.change_feed.outbox`)."""
