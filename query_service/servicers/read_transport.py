"""What the read servicers share (transport only): the RPC caller's visibility scopes and personal data
policy, taken from the principal the auth interceptor set for the call, and the memory.v1.Provenance
message of a domain `query_service.provenance.Provenance`.
"""

from __future__ import annotations

from common.auth.principals import Right
from common.auth.principals import current_principal
from common.grpc.proto_mapping import dict_to_struct
from common.kernel.config import Settings
from common.storage.audit_store import AuditReadAccess
from common.storage.visibility import Visibility
from common.storage.visibility import visibility_for
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from query_service.pii_output import PiiPolicy
from query_service.provenance import Provenance


def caller_visibility() -> Visibility:
    """The visibility scopes of the RPC's caller (`common.storage.visibility.visibility_for`): a token's
    scopes plus its own ``principal:<name>``; development mode (auth off) sees everything."""
    return visibility_for(current_principal())


def caller_audit_access(namespace: str) -> AuditReadAccess:
    """Which audit events of ``namespace`` the RPC's caller may read (`AuditReadAccess`): every one with
    the admin right on the namespace (or in development mode); otherwise its own and those whose
    restricting scopes it holds."""
    principal = current_principal()
    return AuditReadAccess(
        visibility=visibility_for(principal),
        principal=principal.name if principal is not None and principal.authenticated else "",
        admin=principal is not None and principal.allows(namespace, Right.ADMIN),
    )


def caller_pii_policy(settings: Settings, method: str) -> PiiPolicy:
    """The personal data policy of the RPC's caller (`query_service.pii_output.PiiPolicy`): masked output
    unless the token has PII clearance, when ``CB_PII_PROTECTION`` is on. ``method`` names the RPC in the
    ``pii_access`` audit event (e.g. ``/memory.v1.SourceService/GetSource``)."""
    return PiiPolicy.for_caller(current_principal(), settings, method)


def provenance_to_proto(provenance: Provenance) -> knowledge_pb2.Provenance:
    """memory.v1.Provenance of ``provenance`` (its metadata as a Struct: numbers become doubles)."""
    return knowledge_pb2.Provenance(
        node_key=provenance.node_key,
        source_path=provenance.source_path,
        observation_ids=list(provenance.observation_ids),
        fact_id=provenance.fact_id,
        chunk_order=provenance.chunk_order,
        metadata=dict_to_struct(provenance.metadata or {}),
        citation=provenance.citation,
    )
