"""The write side of the change feed: webhook subscriptions (`subscriptions`), the URL rule of their
targets (`targets`), turning changes into signed CloudEvents and posting them (`delivery`), the tasks of
the worker's queue (`webhook_queue`) and the outbox's retention (`pruner`)."""
