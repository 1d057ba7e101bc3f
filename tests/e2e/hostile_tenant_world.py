"""Tenants, tokens and data of the hostile-tenant tests (``test_hostile_tenant_audit_and_guards.py``,
``test_hostile_tenant_mcp.py``, ``test_hostile_bad_input.py``): the real services started with bearer tokens and
personal data protection on, row counts to prove that a refused request changed nothing, and decoded refusals."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from common.kernel.memory_names import memory_namespace
from common.storage.database import Database
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import audit_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import TokenChannels
from tests.e2e.conftest import token_secured_services

EMAIL = "olga.smirnova@example.ru"


COUNTED_TABLES = (
    "graph_nodes",
    "chunks",
    "facts",
    "observations",
    "memories",
    "audit_events",
    "vault_documents",
    "vault_runs",
    "source_snapshots",
    "domain_packs",
    "namespace_settings",
    "context_traces",
)


KEY_COLUMN = {"graph_nodes": "natural_key", "chunks": "node_key", "memories": "memory_id"}


def table_counts(database: Database, excluding: list[str] | tuple[str, ...] = ()) -> dict[str, int]:
    """Rows of every table, leaving out the rows of the memories ``excluding`` names."""
    with database.connection() as conn:
        found = {}
        for table in COUNTED_TABLES:
            column = KEY_COLUMN.get(table)
            where = f" WHERE NOT ({column} = ANY(%s))" if column else ""
            params = (list(excluding),) if column else ()
            row = conn.execute(f"SELECT count(*) FROM {table}{where}", params).fetchone()
            assert row is not None
            found[table] = int(row[0])
    return found


def ns_counts(database: Database, namespace: str) -> dict[str, int]:
    """Rows of ``namespace``: vault documents, document nodes, chunks, facts (all / open), audit events,
    observations."""
    queries = {
        "vault_documents": "SELECT count(*) FROM vault_documents WHERE namespace = %s",
        "nodes": "SELECT count(*) FROM graph_nodes WHERE namespace = %s AND node_type <> 'audit_event'"
        " AND node_type <> 'pc_trace'",
        "chunks": "SELECT count(*) FROM chunks WHERE namespace = %s",
        "facts": "SELECT count(*) FROM facts WHERE namespace = %s",
        "open_facts": "SELECT count(*) FROM facts WHERE namespace = %s AND valid_to IS NULL",
        "audit_events": "SELECT count(*) FROM audit_events WHERE namespace = %s",
        "observations": "SELECT count(*) FROM observations WHERE namespace = %s",
        "snapshots": "SELECT count(*) FROM source_snapshots WHERE namespace = %s",
    }
    with database.connection() as conn:
        out = {}
        for name, query in queries.items():
            row = conn.execute(query, (namespace,)).fetchone()
            assert row is not None
            out[name] = int(row[0])
    return out


def failure_of(call: Any) -> Any:
    """Runs ``call`` and returns the decoded failure; fails the test when the call succeeds."""
    try:
        call()
    except grpc.RpcError as error:
        return rpc_failure(error)
    pytest.fail("the call succeeded where a refusal was expected")


def violated_fields(failure: Any) -> list[str]:
    return [v.field for v in failure.violations]


def describe(failure: Any) -> str:
    return f"{failure.code.name}: {failure.message} reason={failure.reason} violations={violated_fields(failure)}"


DEEP = b"[" * 50_000 + b"]" * 50_000


class World(TokenChannels):
    def __init__(self, tokens_file: Path) -> None:
        tag = uuid.uuid4().hex[:8]
        self.tokens_file = tokens_file
        self.a = f"atk-a-{tag}"
        self.b = f"atk-b-{tag}"
        self.ghost = f"atk-c-{tag}"  # a namespace nobody wrote to: refusals about it must look the same
        self.v = f"atk-vault-{tag}"
        self.m = f"atk-mcp-{tag}"

        def token(principal: str, namespaces: dict[str, list[Right]], **kw: Any) -> str:
            value, _ = add_token(tokens_file, principal=principal, namespaces=namespaces, **kw)
            return value

        self.a_admin = token("atk-auditor", {self.a: [Right.ADMIN]}, pii_clearance=True)
        self.a_masked_admin = token("atk-masked-admin", {self.a: [Right.ADMIN]})
        self.a_reader = token("atk-reader", {self.a: [Right.READ]})
        self.a_writer = token("atk-writer", {self.a: [Right.WRITE]})
        self.a_hr = token("atk-hr", {self.a: [Right.WRITE]}, scopes=["workspace:hr"])
        self.officer = token(EMAIL, {self.a: [Right.READ]}, pii_clearance=True)
        self.b_admin = token("atk-b-admin", {self.b: [Right.ADMIN]}, pii_clearance=True)
        self.star_reader = token("atk-star-reader", {"*": [Right.READ, Right.WRITE]}, pii_clearance=True)
        try:
            self.nobody = token("atk-nobody", {})
        except Exception:  # noqa: BLE001 - a token must name a namespace: one unrelated to A
            self.nobody = token("atk-nobody", {f"atk-unrelated-{tag}": [Right.READ]})
        self.unknown = "cbt_" + "0" * 40
        # the vault / snapshot tenant
        self.v_writer = token("atk-v-writer", {self.v: [Right.WRITE]}, scopes=["workspace:vs"])
        self.v_narrow = token("atk-v-narrow", {self.v: [Right.WRITE]})
        # the MCP tenants
        self.m_writer = token("atk-m-writer", {self.m: [Right.WRITE]})
        self.m_reader = token("atk-m-reader", {self.m: [Right.READ]})
        self.m_scoped = token("atk-m-hr", {self.m: [Right.WRITE]}, scopes=["workspace:hr"])
        self.m_other = token("atk-m-other", {self.b: [Right.ADMIN]})
        self.m_admin_all = token("atk-m-root", {"*": [Right.ADMIN]})
        self.organization = "atk" + tag
        self.m_user = token(
            "atk-chat-app",
            {memory_namespace(self.organization, "production"): [Right.READ, Right.WRITE]},
            memory_scope=(self.organization, "production", "8821"),
        )
        self.ingest_addr = self.query_addr = ""
        self.pii_trace = f"atk-pii-{tag}"
        self.hr_trace = f"atk-hr-del-{tag}"
        self.export_trace = f"atk-export-{tag}"
        self.b_trace = f"atk-b-{tag}"
        self.ids: dict[str, list[str]] = {}


def populate(world: World) -> None:
    a, b = world.a, world.b
    with world.ingest(world.a_writer) as channel:
        docs = document_service_pb2_grpc.DocumentServiceStub(channel)
        docs.Retain(
            document_service_pb2.RetainRequest(
                namespace=a, natural_key=f"contact:{EMAIL}",
                content=f"# Contact\n\nWrite to {EMAIL} or call +7 (916) 123-45-67.\n",
            ),
            timeout=120,
        )
        docs.Retain(
            document_service_pb2.RetainRequest(
                namespace=a, natural_key="doc:plain", content="# Plain\n\nNothing personal here.\n"
            ),
            timeout=120,
        )
        recorded = audit_service_pb2_grpc.AuditServiceStub(channel).RecordAuditEvent(
            audit_service_pb2.RecordAuditEventRequest(
                namespace=a, action="export", target_key="doc:plain", trace_id=world.export_trace
            ),
            timeout=60,
        )
        world.ids["export"] = [recorded.event.event_id]
    with world.query(world.officer) as channel:
        source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            source_service_pb2.GetSourceRequest(namespace=a, natural_key=f"contact:{EMAIL}"),
            metadata=(("x-request-id", world.pii_trace),),
            timeout=60,
        )
    with world.ingest(world.a_hr) as channel:
        docs = document_service_pb2_grpc.DocumentServiceStub(channel)
        docs.Retain(
            document_service_pb2.RetainRequest(
                namespace=a, natural_key="doc:hr-secret", scopes=["workspace:hr"],
                content="# Layoffs\n\nThe Q3 layoff list is in the HR vault.\n",
            ),
            timeout=120,
        )
        deleted = docs.DeleteNode(
            document_service_pb2.DeleteNodeRequest(
                namespace=a, natural_key="doc:hr-secret", reason="atk", trace_id=world.hr_trace
            ),
            timeout=60,
        )
        world.ids["hr_delete"] = [deleted.audit_event_id]
    with world.ingest(world.b_admin) as channel:
        audit = audit_service_pb2_grpc.AuditServiceStub(channel)
        world.ids["b"] = [
            audit.RecordAuditEvent(
                audit_service_pb2.RecordAuditEventRequest(
                    namespace=b, action="export", target_key=f"doc:b-{i}", trace_id=world.b_trace
                ),
                timeout=60,
            ).event.event_id
            for i in range(3)
        ]


@contextmanager
def running_world(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """The services started with the world's tokens and personal data protection on, the world loaded."""
    folder = tmp_path_factory.mktemp("attacks")
    world = World(folder / "tokens.yaml")
    with token_secured_services(settings, world.tokens_file, pii_protection=True) as (
        world.ingest_addr,
        world.query_addr,
    ):
        populate(world)
        yield world
