"""The methods of `MemoryClient` grouped by service: one mixin a service (or a write service with its
query service) over `memory_service_grpc_client.service_calls.ServiceCalls`.

`memory_service_grpc_client.memory_client.MemoryClient` composes them; import the client, not these.
"""
