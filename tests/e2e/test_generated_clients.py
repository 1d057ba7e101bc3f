"""Every client reaches every service: the Python client, the generated TypeScript client
(clients/typescript, `make ts-client` / `make ts-package`) and the generated Go client (clients/go,
`make go-client`) against the real services.

The list of services is read from the proto descriptors (every service of every ``memory.v1`` module),
never written here. Each client calls at least one RPC of every service, with a bearer token, over real
channels, and checks the answers:

* Python: `MemoryClient` with a client interceptor recording the method of every call that succeeded;
* TypeScript: clients/typescript/src/e2e/check_services.ts (compiled to dist/e2e/check_services.js),
  which prints the method path it called per service, and the microsecond Timestamps it read back;
* Go: clients/go/cmd/check ``every``, whose client interceptors record the methods that succeeded.

The published packages are checked per service too: the npm tarball, installed by name into a consumer
project (`make ts-package`), exports a client of every service through its package.json ``exports``, and
the Go package holds a client of every service. A contract change that breaks a generated client fails
here (or in `make ts-client` / `make go-client`, which CI runs before the tests).
"""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import re
import shutil
import subprocess
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

import memory_service_grpc_client.memory.v1
from common.auth.principals import Right
from common.grpc.proto_mapping import instant
from common.kernel.config import Settings
from common.kernel.identifiers import canonical_instant
from common.kernel.memory_names import memory_namespace
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import MemoryClient
from memory_service_grpc_client.memory.v1 import audit_service_pb2
from memory_service_grpc_client.memory.v1 import change_feed_service_pb2
from memory_service_grpc_client.memory.v1 import context_service_pb2
from memory_service_grpc_client.memory.v1 import data_protection_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import domain_pack_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_service_pb2
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import memory_query_service_pb2
from memory_service_grpc_client.memory.v1 import memory_service_pb2
from memory_service_grpc_client.memory.v1 import namespace_service_pb2
from memory_service_grpc_client.memory.v1 import observation_query_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import retrieval_service_pb2
from memory_service_grpc_client.memory.v1 import snapshot_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import trace_service_pb2
from memory_service_grpc_client.memory.v1 import vault_service_pb2
from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "clients" / "typescript" / "dist" / "e2e" / "check_services.js"
GO_CHECK = ROOT / "clients" / "go" / "bin" / "check"
GO_PACKAGE = ROOT / "clients" / "go" / "gen" / "memory" / "v1"
TS_CONSUMER = ROOT / ".tools" / "ts-consumer"
TS_INSTALLED = TS_CONSUMER / "node_modules" / "@memory-service" / "client"


def proto_services() -> set[str]:
    """Full names of every service declared in the ``memory.v1`` protos (from the descriptors)."""
    names: set[str] = set()
    for module_info in pkgutil.iter_modules(memory_service_grpc_client.memory.v1.__path__):
        if module_info.name.endswith("_pb2"):
            module = importlib.import_module(f"memory_service_grpc_client.memory.v1.{module_info.name}")
            names |= {service.full_name for service in module.DESCRIPTOR.services_by_name.values()}
    return names


def _built(path: Path, target: str) -> Path:
    """``path``, built with ``make target`` when it is missing (node and npm; Go from Debian packages)."""
    if not path.exists():
        assert shutil.which("npm"), f"make {target} needs npm"
        subprocess.run(["make", target], cwd=ROOT, check=True, timeout=900)
    return path


class SucceededCalls(  # type: ignore[misc]
    grpc.UnaryUnaryClientInterceptor, grpc.StreamUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor
):
    """Records the method path of every unary and client-streaming call that succeeded, and of every
    server stream that opened (its first message is checked by the caller)."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    def _after(self, details: Any, outcome: Any) -> Any:
        if outcome.exception() is None:
            self.methods.append(details.method)
        return outcome

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return self._after(details, continuation(details, request))

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return self._after(details, continuation(details, requests))

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        stream = continuation(details, request)
        self.methods.append(details.method)
        return stream


def _services_of(methods: list[str]) -> set[str]:
    return {method.lstrip("/").partition("/")[0] for method in methods}


def _python_calls(client: MemoryClient, namespace: str) -> None:
    """One or more RPCs of every service with the Python client, each answer checked."""
    recorded = client.record_observations(
        json_format.ParseDict(
            {
                "observations": [
                    {
                        "namespace": namespace,
                        "source": {"system": "python", "stream": "e2e", "external_id": "py-1"},
                        "kind": "note",
                        "occurred_at": "2026-11-01T10:00:00.123456Z",
                        "content": "The billing service reads the Python-written ledger.",
                    }
                ]
            },
            observation_service_pb2.RecordObservationsRequest(),
        )
    ).results[0]
    assert recorded.status == "processed"
    asserted = client.assert_facts(
        fact_service_pb2.AssertFactsRequest(
            namespace=namespace,
            facts=[
                json_format.ParseDict(
                    {"subject": "service:billing", "predicate": "DEPENDS_ON", "object": "service:ledger"},
                    knowledge_pb2.FactAssertion(),
                )
            ],
        )
    )
    assert asserted.results[0].fact_id
    client.retain(
        document_service_pb2.RetainRequest(
            namespace=namespace,
            natural_key="doc:py-runbook",
            content="# Billing\n\nClose the ledger monthly.\n",
        )
    )
    reconciled = client.reconcile(
        json_format.ParseDict(
            {
                "namespace": namespace,
                "source": "python",
                "scope": "hosts",
                "snapshot_id": "py-snapshot-1",
                "snapshot_time": "2026-11-02T00:00:00Z",
                "entities": [{"key": "host:billing-1", "type": "host", "title": "billing-1"}],
            },
            snapshot_service_pb2.ReconcileRequest(),
        )
    )
    assert reconciled.HasField("counts")
    assert (
        client.get_namespace_kinds(
            domain_pack_service_pb2.GetNamespaceKindsRequest(namespace=namespace)
        ).namespace
        == namespace
    )
    event = client.record_audit_event(
        audit_service_pb2.RecordAuditEventRequest(namespace=namespace, action="export", trace_id="py-trace")
    ).event
    added = client.add_memories(
        memory_service_pb2.AddMemoriesRequest(
            memories=[memory_service_pb2.NewMemory(text="Python prefers tables.")]
        )
    ).results[0]
    assert added.memory_id.startswith("mem-")
    run = client.ingest_vault(
        [
            vault_service_pb2.IngestVaultRequest(
                header=vault_service_pb2.IngestVaultHeader(namespace=namespace, dry_run=True)
            ),
            vault_service_pb2.IngestVaultRequest(
                documents=vault_service_pb2.IngestVaultDocuments(
                    documents=[vault_service_pb2.VaultDocument(path="notes/py.md", content="# Py\n")]
                )
            ),
            vault_service_pb2.IngestVaultRequest(end=vault_service_pb2.IngestVaultEnd(document_count=1)),
        ],
        timeout=120,
    )
    assert run.dry_run and len(run.documents) == 1
    observed = client.get_observation(
        observation_query_service_pb2.GetObservationRequest(
            namespace=namespace, observation_id=recorded.observation_id
        )
    ).observation
    assert canonical_instant(instant(observed.occurred_at)) == "2026-11-01T10:00:00.123456Z"
    assert client.search(
        retrieval_service_pb2.SearchRequest(namespace=namespace, query="close the ledger")
    ).hits
    assert client.list_facts(
        fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject="service:billing")
    ).facts
    assert client.get_source(
        source_service_pb2.GetSourceRequest(namespace=namespace, natural_key="doc:py-runbook")
    ).source.content
    assert client.compile_context(
        context_service_pb2.CompileContextRequest(
            namespace=namespace, query="billing", anchors=["service:billing"], token_budget=300
        )
    ).pack.text
    assert client.get_trace(
        trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id="py-trace")
    ).trace.entries
    listed = client.list_audit_events(
        audit_service_pb2.ListAuditEventsRequest(namespace=namespace, action="export")
    )
    assert [e.event_id for e in listed.events] == [event.event_id]
    memories = client.list_memories(memory_query_service_pb2.ListMemoriesRequest(page_size=50)).memories
    assert added.memory_id in {m.memory_id for m in memories}
    assert not client.list_legal_holds(
        data_protection_service_pb2.ListLegalHoldsRequest(namespace=namespace)
    ).holds
    stats = client.get_namespace_stats(namespace_service_pb2.GetNamespaceStatsRequest(namespace=namespace))
    assert stats.namespace == namespace and stats.chunk_count >= 1
    assert not client.list_webhook_subscriptions(
        webhook_service_pb2.ListWebhookSubscriptionsRequest(namespace=namespace)
    ).subscriptions
    first = next(
        iter(
            client.watch_changes(
                change_feed_service_pb2.WatchChangesRequest(namespace=namespace, heartbeat_seconds=1),
                timeout=30,
            )
        )
    )
    assert first.HasField("change") and first.change.cursor >= 1


@pytest.fixture(scope="module")
def every_client_token(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """A token with admin on one namespace per language and a memory scope; returns (tokens file,
    token, language -> namespace)."""
    tokens_file = tmp_path_factory.mktemp("clients") / "tokens.yaml"
    suffix = uuid.uuid4().hex[:8]
    namespaces = {language: f"{language}-{suffix}" for language in ("py", "ts", "go")}
    organization = "clients" + suffix
    token, _ = add_token(
        tokens_file,
        principal="every-client",
        namespaces={
            **{namespace: [Right.ADMIN] for namespace in namespaces.values()},
            memory_namespace(organization, "production"): [Right.READ, Right.WRITE],
        },
        memory_scope=(organization, "production", "client-user"),
    )
    return tokens_file, token, namespaces


def test_python_typescript_and_go_each_call_every_service(
    settings: Settings, every_client_token: tuple[Path, str, dict[str, str]]
) -> None:
    services = proto_services()
    assert len(services) >= 15 and "memory.v1.VaultService" in services, services
    script = _built(SCRIPT, "ts-client")
    go_check = _built(GO_CHECK, "go-client")
    tokens_file, token, namespaces = every_client_token
    with token_secured_services(settings, tokens_file) as (ingest_addr, query_addr):
        recorder = SucceededCalls()
        with MemoryClient(
            ingest_addr, query_addr, security=ClientSecurity(token=token), interceptors=[recorder]
        ) as client:
            _python_calls(client, namespaces["py"])
        assert _services_of(recorder.methods) == services

        environment = {
            **os.environ,
            "CB_INGEST_ADDR": ingest_addr,
            "CB_QUERY_ADDR": query_addr,
            "CB_TOKEN": token,
        }
        run = subprocess.run(
            ["node", str(script), namespaces["ts"]],
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        seen = json.loads(run.stdout)
        assert set(seen["services"]) == services, set(seen["services"]) ^ services
        assert all(path.startswith(f"/{name}/") for name, path in seen["services"].items())
        assert seen["factsCreated"] == 1 and seen["hits"] >= 1
        assert seen["missingCode"] == 5  # NOT_FOUND
        assert seen["refusedCode"] == 16  # UNAUTHENTICATED: the call without a token
        # Timestamps keep their microseconds in TypeScript: what it read equals what Python reads.
        assert seen["occurredAt"] == "2026-11-01T10:00:00.123456Z"
        with MemoryClient(ingest_addr, query_addr, security=ClientSecurity(token=token)) as client:
            facts = client.list_facts(
                fact_query_service_pb2.ListFactsRequest(
                    namespace=namespaces["ts"], subject="service:checkout"
                )
            ).facts
            events = client.list_audit_events(
                audit_service_pb2.ListAuditEventsRequest(namespace=namespaces["ts"], action="export")
            ).events
        assert [fact.fact_id for fact in facts] == seen["facts"]
        assert [fact.object for fact in facts] == ["service:quokkapay"]
        assert [e.event_id for e in events] == [seen["auditEventId"]]
        stored = canonical_instant(instant(events[0].record_time))
        assert seen["auditRecordTime"] == stored and re.search(r"\.\d{6}Z$", stored), (
            seen["auditRecordTime"],
            stored,
        )

        every = subprocess.run(
            [str(go_check), "every", ingest_addr, query_addr, namespaces["go"], token],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert every.returncode == 0, every.stdout + every.stderr
        assert set(json.loads(every.stdout)["services"]) == services
        # The Go client finds the document the TypeScript client retained; without a token it is refused.
        found = subprocess.run(
            [str(go_check), query_addr, namespaces["ts"], "Quokkapay adapter", token],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["first"] == "doc:ts-runbook"
        refused = subprocess.run(
            [str(go_check), query_addr, namespaces["ts"], "Quokkapay adapter"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode == 1 and json.loads(refused.stdout) == {"code": "Unauthenticated"}


def _node_exports(consumer: Path) -> list[str]:
    """The service names of the client constructors the installed package exports (by package name,
    through its package.json ``exports``)."""
    program = (
        "const m = require('@memory-service/client'); const found = [];"
        "for (const value of Object.values(m)) { if (value && typeof value === 'object') {"
        " for (const item of Object.values(value)) { if (typeof item === 'function' && item.serviceName) found.push(item.serviceName); } } }"
        "process.stdout.write(JSON.stringify(found));"
    )
    run = subprocess.run(
        ["node", "-e", program], cwd=consumer, capture_output=True, text=True, timeout=60, check=False
    )
    assert run.returncode == 0, run.stderr
    return list(json.loads(run.stdout))


def test_the_published_packages_export_every_service() -> None:
    services = proto_services()
    _built(TS_INSTALLED, "ts-package")
    manifest = json.loads((TS_INSTALLED / "package.json").read_text())
    assert set(manifest["exports"]) == {"."}  # one entry point: every service must come through it
    exported = _node_exports(TS_CONSUMER)
    assert set(exported) == services, set(exported) ^ services
    _built(GO_CHECK, "go-client")
    go_services = {
        match
        for path in GO_PACKAGE.glob("*_grpc.pb.go")
        for match in re.findall(r'ServiceName: "([\w.]+)"', path.read_text())
    }
    assert go_services == services, go_services ^ services
