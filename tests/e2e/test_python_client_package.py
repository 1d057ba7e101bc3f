"""memory-service-client installs and works on its own.

Its wheel is built from clients/python and installed into a fresh virtual environment (no system site
packages, no memory-service): pip brings in only grpcio, protobuf and googleapis-common-protos (from its
cache or the configured index). clients/python/examples/check_services.py then runs in that environment
against the real services with a bearer token: health, a write with its consistency token, a retained
document found by search, paging through ListFacts, NOT_FOUND, INVALID_ARGUMENT with its field
violations, and UNAUTHENTICATED without a token, each as the package's exception class.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from common.tooling.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
# What a venv holds after `pip install memory-service-client` besides pip itself; typing-extensions comes
# with grpcio.
EXPECTED = {
    "memory-service-client",
    "grpcio",
    "protobuf",
    "googleapis-common-protos",
    "typing-extensions",
    "pip",
}


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))
    }
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    environment.update(kwargs.pop("env", {}))  # type: ignore[arg-type]
    run = subprocess.run(command, capture_output=True, text=True, check=False, env=environment, **kwargs)  # type: ignore[call-overload]
    assert run.returncode == 0, f"{command}: {run.stdout}\n{run.stderr}"
    return run  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the client's wheel and its dependencies only; its python."""
    where = tmp_path_factory.mktemp("python-client")
    wheels = where / "wheels"
    # Built from a copy (setuptools writes build/ and *.egg-info beside the sources), with this
    # environment's setuptools (no download of a build backend).
    source = where / "source"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        timeout=300,
    )
    (wheel,) = wheels.glob("memory_service_client-*.whl")
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "-q", str(wheel)], timeout=600)
    return python


def test_the_wheel_holds_the_stubs_and_the_client_and_needs_nothing_of_memory_service(
    client_venv: Path,
) -> None:
    listed = _run([str(client_venv), "-m", "pip", "list", "--format=json"], timeout=120)
    installed = {entry["name"].lower().replace("_", "-") for entry in json.loads(listed.stdout)}
    assert installed - {"setuptools"} == EXPECTED
    forbidden = ("common", "ingest_service", "query_service", "grpc_status", "grpc_health", "tenacity")
    script = (
        "import importlib.util, json, sys\n"
        "import memory.v1.knowledge_pb2, memory_service_client\n"
        "print(json.dumps({name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]}))"
    )
    probe = _run([str(client_venv), "-c", script, *forbidden], cwd="/", timeout=120)
    assert json.loads(probe.stdout) == dict.fromkeys(forbidden, False)


def test_the_installed_client_calls_the_services_on_its_own(
    client_venv: Path, settings: Settings, tmp_path: Path
) -> None:
    namespace = "py-" + uuid.uuid4().hex[:10]
    tokens_file = tmp_path / "tokens.yaml"
    token, _ = add_token(tokens_file, principal="python-client", namespaces={namespace: [Right.WRITE]})
    with token_secured_services(settings, tokens_file) as (ingest_addr, query_addr):
        run = _run(
            [str(client_venv), str(PACKAGE / "examples" / "check_services.py"), namespace],
            env={"CB_INGEST_ADDR": ingest_addr, "CB_QUERY_ADDR": query_addr, "CB_TOKEN": token},
            cwd=str(tmp_path),
            timeout=300,
        )
    seen = json.loads(run.stdout)
    assert seen == {
        "health": {"ingest_service": "SERVING", "query_service": "SERVING"},
        "facts_created": 2,
        "retained_created": True,
        "first_hit": "doc:py-runbook",
        "facts": ["service:ledger", "service:quokkapay"],
        "missing": "NOT_FOUND",
        "violations": seen["violations"],
        "refused": "UNAUTHENTICATED",
    }
    assert seen["violations"] and all(field.startswith("observations[0].") for field in seen["violations"])
