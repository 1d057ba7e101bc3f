"""The locks in requirements/ agree with what the pyproject.toml files declare, without a network resolve.

For each lock (dev, service, client): every declared requirement is pinned with a version it admits, and
the set of pins is exactly the closure of those requirements over the metadata of the pinned
distributions (this environment, installed from the dev lock by `make deps`, holds every one of them),
so a lock with a package too many or too few fails as well as one whose pin a range excludes. Every pin
is `==` with hashes, one version per package across the locks, and the client is no pin of any lock: the
server requires it with a local version label, which a package index refuses, so only our build meets it.
"""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCKS = ROOT / "requirements"
CLIENT = "memory-service-grpc-client"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)((?:\s*\\\n\s*--hash=sha256:[0-9a-f]{64})+)", re.M)


def _pyproject(path: Path) -> dict:  # type: ignore[type-arg]
    return tomllib.loads(path.read_text())


SERVER = _pyproject(ROOT / "pyproject.toml")
CLIENT_PROJECT = _pyproject(ROOT / "clients" / "python" / "pyproject.toml")


def _lock(name: str) -> dict[NormalizedName, Version]:
    """The pins of requirements/<name>.txt; each must carry at least one sha256 hash."""
    text = (LOCKS / f"{name}.txt").read_text()
    pins = {canonicalize_name(m[1]): Version(m[2]) for m in PIN.finditer(text)}
    requirement_lines = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert len(requirement_lines) == len(pins), f"{name}.txt: a requirement without == or hashes"
    return pins


def _in_file(path: Path) -> list[Requirement]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [Requirement(line) for line in lines if line]


def _declared(lock: str) -> list[Requirement]:
    """What the lock must satisfy: its pyproject requirements (with the lock's extras) and build.in."""
    build = _in_file(LOCKS / "build.in")
    client = [Requirement(r) for r in CLIENT_PROJECT["project"]["dependencies"]]
    server = [Requirement(r) for r in SERVER["project"]["dependencies"]]
    extras = SERVER["project"]["optional-dependencies"]
    if lock == "client":
        return client + build
    if lock == "service":
        return server + client + build
    return server + [Requirement(r) for r in extras["test"] + extras["bench"] + extras["docs"]] + client + build


def _applies(requirement: Requirement, extras: set[str]) -> bool:
    if requirement.marker is None:
        return True
    return any(requirement.marker.evaluate({"extra": extra}) for extra in extras | {""})


def _closure(requirements: list[Requirement]) -> set[NormalizedName]:
    """The names reached from `requirements` through the installed distributions' metadata."""
    seen: dict[NormalizedName, set[str]] = {}
    pending = [(r, {""}) for r in requirements]
    while pending:
        requirement, wanted_by = pending.pop()
        if not _applies(requirement, wanted_by):
            continue
        name = canonicalize_name(requirement.name)
        extras = set(requirement.extras)
        if name in seen and extras <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras
        for line in metadata.distribution(name).requires or []:
            pending.append((Requirement(line), seen[name]))
    return set(seen)


@pytest.mark.parametrize("lock", ["dev", "service", "client"])
def test_every_declared_requirement_is_pinned_with_a_version_it_admits(lock: str) -> None:
    pins = _lock(lock)
    for requirement in _declared(lock):
        name = canonicalize_name(requirement.name)
        if name == CLIENT:
            assert name not in pins, f"{lock}.txt pins the client, which is built from clients/python"
            continue
        assert name in pins, f"{lock}.txt lacks {requirement}: run `make lock`"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"{lock}.txt pins {name}=={pins[name]}, outside {requirement}: run `make lock`"
        )


@pytest.mark.parametrize("lock", ["dev", "service", "client"])
def test_the_pins_are_exactly_the_closure_of_the_declared_requirements(lock: str) -> None:
    dev = _lock("dev")
    installed = {name: Version(metadata.version(name)) for name in dev}
    assert installed == dev, "this environment is not the dev lock's: run `make deps`"
    declared = [r for r in _declared(lock) if canonicalize_name(r.name) != CLIENT]
    if lock != "client":
        # The client's own requirements enter the server's closure through it.
        declared += [Requirement(r) for r in CLIENT_PROJECT["project"]["dependencies"]]
    reached = _closure(declared)
    pins = set(_lock(lock))
    assert pins - reached == set(), f"{lock}.txt pins what nothing declared needs: run `make lock`"
    assert reached - pins == set(), f"{lock}.txt misses what the declared requirements need: run `make lock`"


def test_a_package_has_one_version_in_every_lock() -> None:
    dev = _lock("dev")
    for lock in ("service", "client"):
        pins = _lock(lock)
        assert {name: dev[name] for name in pins} == pins, f"{lock}.txt and dev.txt pin different versions"


def test_the_tools_lock_pins_uv_and_cyclonedx_bom() -> None:
    pins = _lock("tools")
    for requirement in _in_file(LOCKS / "tools.in"):
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)])


def test_the_build_lock_input_is_the_build_system_of_both_projects() -> None:
    build = {canonicalize_name(r.name): r.specifier for r in _in_file(LOCKS / "build.in")}
    for project in (SERVER, CLIENT_PROJECT):
        for line in project["build-system"]["requires"]:
            requirement = Requirement(line)
            assert build[canonicalize_name(requirement.name)] == requirement.specifier


def test_the_server_requires_the_client_by_a_version_no_package_index_serves() -> None:
    requirements = [Requirement(r) for r in SERVER["project"]["dependencies"]]
    (requirement,) = [r for r in requirements if canonicalize_name(r.name) == CLIENT]
    version = Version(CLIENT_PROJECT["project"]["version"])
    assert CLIENT_PROJECT["project"]["name"] == CLIENT
    # Only `==` with the full local version admits the local build alone (`==0.1.0` would admit 0.1.0 too).
    assert version.local
    assert [(s.operator, s.version) for s in requirement.specifier] == [("==", str(version))]
    assert not requirement.specifier.contains(Version(version.public))
    assert requirement.url is None and requirement.marker is None


def test_the_pin_pattern_reads_a_pin_and_refuses_one_without_hashes() -> None:
    sample = "grpcio==1.85.4 \\\n    --hash=sha256:" + "0" * 64 + "\n    # via x\nrich==15.0.0\n"
    assert {m[1]: m[2] for m in PIN.finditer(sample)} == {"grpcio": "1.85.4"}
