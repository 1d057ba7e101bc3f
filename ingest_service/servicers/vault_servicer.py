"""VaultService transport: proto <-> domain mapping only (docs/explanation/architecture.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import NoReturn

import grpc
from google.protobuf import json_format

from common.kernel.errors import DomainError
from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from ingest_service.servicers.client_stream import ClientStream
from ingest_service.servicers.client_stream import stream_header
from ingest_service.vault.documents import VaultFile
from ingest_service.vault.ingest import VaultHeader
from ingest_service.vault.ingest import VaultIngestor
from ingest_service.vault.ingest import VaultRunReport
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2_grpc

log = logging.getLogger(__name__)

_STATUS = {
    "new": vault_service_pb2.VAULT_DOCUMENT_STATUS_NEW,
    "changed": vault_service_pb2.VAULT_DOCUMENT_STATUS_CHANGED,
    "unchanged": vault_service_pb2.VAULT_DOCUMENT_STATUS_UNCHANGED,
    "conflict": vault_service_pb2.VAULT_DOCUMENT_STATUS_CONFLICT,
    "rejected": vault_service_pb2.VAULT_DOCUMENT_STATUS_REJECTED,
}


class VaultServicer(vault_service_pb2_grpc.VaultServiceServicer):  # type: ignore[misc]
    """memory.v1.VaultService (IngestVault); domain errors are mapped by the server's interceptor."""

    def __init__(self, ingestor: VaultIngestor) -> None:
        self.ingestor = ingestor

    def IngestVault(
        self,
        request_iterator: Iterator[vault_service_pb2.IngestVaultRequest],
        context: grpc.ServicerContext,
    ) -> vault_service_pb2.IngestVaultResponse:
        """The header, then the documents consumed lazily by the run, then the end message."""
        header = stream_header(request_iterator)
        try:
            report = self.ingestor.run(
                VaultHeader(
                    namespace=header.namespace,
                    dry_run=header.dry_run,
                    source=header.source,
                    branch=header.branch,
                    commit_sha=header.commit_sha,
                    trace_id=header.trace_id,
                    allow_mass_sweep=header.allow_mass_sweep,
                    source_incomplete=header.source_incomplete,
                ),
                _documents(request_iterator),
                still_wanted=context.is_active,
            )
        except DomainError:
            if context.is_active():
                raise
            _abort_gone(context, header.namespace)
        return _response(report)


def _abort_gone(context: grpc.ServicerContext, namespace: str) -> NoReturn:
    """The client went away mid-run (the stream broke because it cancelled the call or its deadline
    passed): the run is ended with CANCELLED or DEADLINE_EXCEEDED, not as a broken stream (UNAVAILABLE),
    and logged so; nothing was swept."""
    remaining = context.time_remaining()
    if remaining is not None and remaining <= 0:
        code, why = grpc.StatusCode.DEADLINE_EXCEEDED, "its deadline passed"
    else:
        code, why = grpc.StatusCode.CANCELLED, "the client cancelled it"
    log.info("IngestVault of namespace %s ended because %s: nothing was swept", namespace, why)
    context.abort(code, f"the vault run ended because {why}: nothing was swept")


def _documents(messages: Iterator[vault_service_pb2.IngestVaultRequest]) -> Iterator[list[VaultFile]]:
    """Messages 2.. of the stream as lists of documents; returns normally only after the end message with
    the number of documents that arrived, and the close of the stream (so the run sweeps only then).

    Raises:
        InvalidArgument: a second header, a message after the end, no end message, a wrong count.
        Unavailable: the stream broke (cancelled, deadline exceeded, connection lost): nothing swept.
    """
    stream = ClientStream(messages, "documents", consequence="nothing was swept")
    count = 0
    for part in stream.parts():
        count += len(part.documents)
        yield [
            VaultFile(
                path=document.path,
                content=document.content,
                original=document.original,
                media_type=document.media_type,
                provenance=json_format.MessageToDict(document.provenance)
                if document.HasField("provenance")
                else {},
            )
            for document in part.documents
        ]
    end = stream.end
    if end.document_count != count:
        raise InvalidArgument(
            [
                FieldViolation(
                    "end.document_count", f"{end.document_count} documents announced, {count} arrived"
                )
            ]
        )


def _response(report: VaultRunReport) -> vault_service_pb2.IngestVaultResponse:
    counts = vault_service_pb2.VaultRunCounts(**report.counts)
    return vault_service_pb2.IngestVaultResponse(
        run_id=report.run_id,
        namespace=report.namespace,
        dry_run=report.dry_run,
        swept=report.swept,
        sweep_refused=report.sweep_refused,
        counts=counts,
        documents=[
            vault_service_pb2.VaultDocumentResult(
                path=doc.path,
                natural_key=doc.natural_key,
                status=_STATUS[doc.status],
                chunk_count=doc.chunk_count,
                detail=doc.detail,
            )
            for doc in report.documents
        ],
        swept_keys=sorted(report.swept_keys),
        unresolved_links=[
            vault_service_pb2.UnresolvedLink(path=path, target=target, relation=relation)
            for path, target, relation in report.unresolved_links
        ],
        audit_event_ids=report.audit_event_ids,
        trace_id=report.trace_id,
    )
