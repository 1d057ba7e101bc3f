"""The generated TypeScript (clients/typescript, `make ts-client`) and Go (clients/go, `make go-client`)
clients against the real services.

A Node script compiled from clients/typescript/src/e2e/check_services.ts records an observation,
retains a document, searches, lists facts, reads the source, compiles a context pack and decodes a
NOT_FOUND, with a bearer token, over real channels; this test then reads what the script wrote with the
Python client, and the Go command clients/go/cmd/check searches for it. A contract change that breaks
a generated client fails here (or in `make ts-client` / `make go-client`, which CI runs before the
tests).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from memory_service_grpc_client import ClientSecurity, MemoryClient
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "clients" / "typescript" / "dist" / "e2e" / "check_services.js"
GO_CHECK = ROOT / "clients" / "go" / "bin" / "check"


def _built(path: Path, target: str) -> Path:
    """``path``, built with ``make target`` when it is missing (node and npm; Go from Debian packages)."""
    if not path.exists():
        assert shutil.which("npm"), f"make {target} needs npm"
        subprocess.run(["make", target], cwd=ROOT, check=True, timeout=900)
    return path


def test_the_generated_typescript_and_go_clients_call_the_services(
    settings: Settings, tmp_path: Path
) -> None:
    script = _built(SCRIPT, "ts-client")
    go_check = _built(GO_CHECK, "go-client")
    namespace = "ts-" + uuid.uuid4().hex[:10]
    tokens_file = tmp_path / "tokens.yaml"
    token, _ = add_token(tokens_file, principal="node-client", namespaces={namespace: [Right.WRITE]})
    with token_secured_services(settings, tokens_file) as (ingest_addr, query_addr):
        environment = {
            **os.environ,
            "CB_INGEST_ADDR": ingest_addr,
            "CB_QUERY_ADDR": query_addr,
            "CB_TOKEN": token,
        }
        run = subprocess.run(
            ["node", str(script), namespace],
            env=environment,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert run.returncode == 0, run.stderr
        seen = json.loads(run.stdout)
        assert seen["factsCreated"] == 1 and seen["hits"] >= 1
        assert seen["missingCode"] == 5  # NOT_FOUND
        assert seen["refusedCode"] == 16  # UNAUTHENTICATED: the call without a token
        with MemoryClient(ingest_addr, query_addr, security=ClientSecurity(token=token)) as client:
            facts = client.list_facts(
                fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject="service:checkout")
            ).facts
        assert [fact.fact_id for fact in facts] == seen["facts"]
        assert [fact.object for fact in facts] == ["service:quokkapay"]
        # The Go client finds the document the TypeScript client retained; without a token it is refused.
        found = subprocess.run(
            [str(go_check), query_addr, namespace, "Quokkapay adapter", token],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert found.returncode == 0, found.stderr
        assert json.loads(found.stdout)["first"] == "doc:ts-runbook"
        refused = subprocess.run(
            [str(go_check), query_addr, namespace, "Quokkapay adapter"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert refused.returncode == 1 and json.loads(refused.stdout) == {"code": "Unauthenticated"}
