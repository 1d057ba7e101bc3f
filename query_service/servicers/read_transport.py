"""What the read servicers share (transport only): the RPC caller's visibility scopes and personal data
policy, taken from the principal the auth interceptor set for the call, and the memory.v1.Provenance
message of a domain `query_service.provenance.Provenance`.
"""

from __future__ import annotations

from memory.v1 import knowledge_pb2

from common.auth.principals import current_principal
from common.grpc.proto_mapping import dict_to_struct
from common.kernel.config import Settings
from common.storage.visibility import Visibility, visibility_for
from query_service.pii_output import PiiPolicy
from query_service.provenance import Provenance


def caller_visibility() -> Visibility:
    """The visibility scopes of the RPC's caller (`common.storage.visibility.visibility_for`): a token's
    scopes plus its own ``principal:<name>``; development mode (auth off) sees everything."""
    return visibility_for(current_principal())


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
