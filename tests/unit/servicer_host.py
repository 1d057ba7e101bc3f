"""Small in-process servicers behind the real server host (`common.grpc.server.build_server` on port 0,
no database) for the unit tests of the CLI and the client; the `serve` fixture of tests/unit/conftest.py."""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from common.grpc.server import ServiceHost
from common.grpc.server import build_server
from common.kernel.config import Settings

Register = Callable[[grpc.Server], list[str]]
"""Adds servicers to a server and returns the names of their services."""

Serve = Callable[..., str]
"""``serve(register, ready=True)``: starts a host with ``register``'s servicers; returns ``host:port``."""


class Readiness:
    """The database stand-in of a host: ready (health SERVING) or not, never opened."""

    def __init__(self, ready: bool = True) -> None:
        self.ready = ready

    def ensure_ready(self) -> bool:
        return self.ready

    def close(self) -> None:
        pass


@contextmanager
def served_hosts() -> Iterator[Serve]:
    """A `Serve` whose hosts are stopped when the block ends."""
    hosts: list[ServiceHost] = []

    def start(register: Register, ready: bool = True) -> str:
        host = build_server(
            Settings(),
            service_name="unit_test",
            address="127.0.0.1:0",
            metrics_port=0,
            database=Readiness(ready),
            register=register,
            readiness_interval=0.05,
        )
        host.start()
        hosts.append(host)
        return f"127.0.0.1:{host.port}"

    try:
        yield start
    finally:
        for host in hosts:
            host.stop(0)
