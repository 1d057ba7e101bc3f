"""WatchChanges, the read side of the change feed: the wake-up on commit (`notifier`) and the stream of
one subscriber (`watcher`)."""
