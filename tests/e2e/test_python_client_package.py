"""The Python client and the server install from the locks alone, and the client also works on its own.

Both wheels are built here (`pip wheel --no-deps` with the locked setuptools) and installed into fresh
virtual environments (no system site packages) the one supported way: every dependency from a lock with
`--require-hashes`, then our wheels without dependencies. The client's environment (requirements/
client.txt) holds exactly the lock's pins and the client; clients/python/examples/check_services.py then
runs in it against the real services with a bearer token: health, a write with its consistency token, a
retained document found by search, paging through ListFacts, NOT_FOUND, INVALID_ARGUMENT with its field
violations, and UNAUTHENTICATED without a token, each as the package's exception class. The service's
environment (deploy/service/install_from_lock.sh with requirements/service.txt, as the image is built)
holds exactly the lock's pins and our two distributions; `memory_service_grpc_client` is imported from
the files of our wheel (each one's bytes match the wheel's RECORD), no top-level `memory` package exists,
and the servers' modules and `cb` load.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest

from common.auth.principals import Right
from common.kernel.config import Settings
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
LOCKS = ROOT / "requirements"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$", re.M)
# Prints, from inside a venv: every distribution with its version, where the client's package is, the
# client distribution's RECORD, whether a top-level `memory` can be imported, and which names of
# sys.argv[1:] are importable.
PROBE = """
import importlib.metadata as m, importlib.util, json, sys
import memory_service_grpc_client, memory_service_grpc_client.memory.v1.knowledge_pb2
client = m.distribution("memory-service-grpc-client")
print(json.dumps({
    "installed": {d.metadata["Name"]: d.version for d in m.distributions()},
    "client_file": memory_service_grpc_client.__file__,
    "client_record": client.read_text("RECORD"),
    "client_location": str(client.locate_file("")),
    "memory": importlib.util.find_spec("memory") is not None,
    "importable": {name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]},
}))
"""


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _lock(name: str) -> dict[str, str]:
    return {_canonical(m[1]): m[2] for m in PIN.finditer((LOCKS / f"{name}.txt").read_text())}


def _run(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    environment = {
        key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "VIRTUAL_ENV"))
    }
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    # No byte-compiling of what pip installs (--no-compile): most of an install's time on 2 cores.
    environment["PIP_COMPILE"] = "0"
    environment.update(kwargs.pop("env", {}))  # type: ignore[arg-type]
    run = subprocess.run(command, capture_output=True, text=True, check=False, env=environment, **kwargs)  # type: ignore[call-overload]
    assert run.returncode == 0, f"{command}: {run.stdout}\n{run.stderr}"
    return run  # type: ignore[no-any-return]


def _probe(python: Path, *names: str) -> dict:  # type: ignore[type-arg]
    return json.loads(_run([str(python), "-c", PROBE, *names], cwd="/", timeout=120).stdout)  # type: ignore[no-any-return]


def _wheel_record(wheel: Path) -> dict[str, tuple[str, bytes]]:
    """path -> (RECORD hash, bytes) of every file of `wheel` that its RECORD hashes."""
    with zipfile.ZipFile(wheel) as archive:
        (record,) = [name for name in archive.namelist() if name.endswith(".dist-info/RECORD")]
        rows = csv.reader(archive.read(record).decode().splitlines())
        return {path: (digest, archive.read(path)) for path, digest, _ in rows if digest}


def _installed_like_the_lock(seen: dict, lock: dict[str, str], ours: dict[str, str]) -> None:  # type: ignore[type-arg]
    installed = {_canonical(name): version for name, version in seen["installed"].items()}
    assert installed == lock | ours, "the environment is not exactly the lock's pins and our wheels"


def _check_client_from_wheel(seen: dict, wheel: Path, venv: Path) -> None:  # type: ignore[type-arg]
    """The client's package is the installed files of our wheel: path, RECORD and bytes."""
    site = Path(seen["client_location"])
    assert site.is_relative_to(venv) and site.name == "site-packages"
    assert Path(seen["client_file"]) == site / "memory_service_grpc_client" / "__init__.py"
    built = _wheel_record(wheel)
    installed = {path: digest for path, digest, _ in csv.reader(seen["client_record"].splitlines()) if digest}
    package = {path for path in built if path.startswith("memory_service_grpc_client/")}
    assert "memory_service_grpc_client/memory/v1/knowledge_pb2.py" in package
    assert {path: installed[path] for path in package} == {path: built[path][0] for path in package}
    assert all((site / path).read_bytes() == built[path][1] for path in package)
    assert not any(path.startswith("memory/") for path in installed)


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv with the client lock's pins and the client's wheel only; its python and the wheel."""
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
    (wheel,) = wheels.glob("memory_service_grpc_client-*.whl")
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    _run(
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(LOCKS / "client.txt")],
        timeout=600,
    )
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], timeout=300)
    _run([str(python), "-m", "pip", "check"], timeout=120)
    return python, wheel


@pytest.fixture(scope="module")
def service_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A fresh venv installed as the image is, from requirements/service.txt; its python and the wheels."""
    where = tmp_path_factory.mktemp("python-service")
    venv, wheels = where / "venv", where / "wheels"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = venv / "bin" / "python"
    script = ROOT / "deploy" / "service" / "install_from_lock.sh"
    _run([str(script), str(python), str(LOCKS / "service.txt"), str(wheels)], cwd="/", timeout=900)
    return python, wheels


def test_the_client_venv_is_its_lock_and_our_wheel_and_needs_nothing_of_memory_service(
    client_venv: tuple[Path, Path],
) -> None:
    python, wheel = client_venv
    forbidden = ("common", "ingest_service", "query_service", "grpc_status", "grpc_health", "tenacity")
    seen = _probe(python, *forbidden)
    _installed_like_the_lock(seen, _lock("client"), {"memory-service-grpc-client": "0.1.0+local"})
    _check_client_from_wheel(seen, wheel, python.parent.parent)
    assert seen["memory"] is False
    assert seen["importable"] == dict.fromkeys(forbidden, False)


def test_the_service_venv_is_its_lock_and_our_two_wheels(service_venv: tuple[Path, Path]) -> None:
    python, wheels = service_venv
    (client_wheel,) = wheels.glob("memory_service_grpc_client-*.whl")
    servers = ("common", "ingest_service", "query_service")
    seen = _probe(python, *servers)
    ours = {"memory-service": "0.1.0", "memory-service-grpc-client": "0.1.0+local"}
    _installed_like_the_lock(seen, _lock("service"), ours)
    _check_client_from_wheel(seen, client_wheel, python.parent.parent)
    assert seen["memory"] is False
    assert seen["importable"] == dict.fromkeys(servers, True)
    # The servers' modules load with what the lock brought (an import missing from it fails here).
    _run([str(python), "-c", "import ingest_service.main, query_service.main"], cwd="/", timeout=300)
    _run([str(python.parent / "cb"), "--help"], cwd="/", timeout=300)


def test_the_installed_client_calls_the_services_on_its_own(
    client_venv: tuple[Path, Path], settings: Settings, tmp_path: Path
) -> None:
    python, _ = client_venv
    namespace = "py-" + uuid.uuid4().hex[:10]
    tokens_file = tmp_path / "tokens.yaml"
    token, _ = add_token(tokens_file, principal="python-client", namespaces={namespace: [Right.WRITE]})
    with token_secured_services(settings, tokens_file) as (ingest_addr, query_addr):
        run = _run(
            [str(python), str(PACKAGE / "examples" / "check_services.py"), namespace],
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
