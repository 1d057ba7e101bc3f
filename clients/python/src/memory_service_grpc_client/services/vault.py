"""VaultService (ingest_service): ingesting a vault of documents."""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from memory_service_grpc_client.errors import raise_for_status
from memory_service_grpc_client.memory.v1 import vault_service_pb2, vault_service_pb2_grpc
from memory_service_grpc_client.service_calls import ServiceCalls

__all__ = ["VaultCalls"]


class VaultCalls(ServiceCalls):
    """The calls of VaultService on `MemoryClient`."""

    def ingest_vault(
        self, requests: Iterable[vault_service_pb2.IngestVaultRequest], *, timeout: float
    ) -> vault_service_pb2.IngestVaultResponse:
        """VaultService.IngestVault: header, document batches, end message (docs/how-to/vault-ingest.md); sent
        once (an iterator cannot be replayed; a run cut short sweeps nothing, so the caller may send it
        again and unchanged documents are only marked seen). A KeyboardInterrupt while it runs cancels the
        call (the server then sweeps nothing) and is raised again."""
        stub = vault_service_pb2_grpc.VaultServiceStub(self.ingest_channel)
        call = stub.IngestVault.future(iter(requests), timeout=timeout, metadata=self._call_metadata())
        try:
            response: vault_service_pb2.IngestVaultResponse = call.result()
        except KeyboardInterrupt:
            call.cancel()  # the server ends the run as CANCELLED and sweeps nothing
            raise
        except grpc.RpcError as exc:
            raise_for_status(exc)
        return response
