"""The methods of `MemoryClient` grouped by service: one mixin a service (or a write service with its
query service) over `memory_service_grpc_client.service_calls.ServiceCalls`, in three modules:
`knowledge` (memory records, observations, facts, documents, search and context), `administration` (data
protection, domain packs, audit, namespaces) and `sync` (snapshots, vault ingest, change feed, webhooks).

`memory_service_grpc_client.memory_client.MemoryClient` composes them; import the client, not these.
"""
