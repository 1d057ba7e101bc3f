"""A call that must be refused, decoded: the status code, the message, the reason and the field violations."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc
import pytest

from memory_service_grpc_client import RpcFailure
from memory_service_grpc_client import rpc_failure


def refusal(call: Callable[[], Any]) -> RpcFailure:
    """Runs ``call``, which must raise `grpc.RpcError`, and returns its decoded failure."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return rpc_failure(raised.value)


def code_and_fields(call: Callable[[], Any]) -> tuple[grpc.StatusCode, list[str]]:
    """Runs ``call``, which must raise `grpc.RpcError`; returns the status code and the violated fields."""
    failure = refusal(call)
    return failure.code, [violation.field for violation in failure.violations]
