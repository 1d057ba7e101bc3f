"""The client's retry loop (memory_service_grpc_client.call_policy): backoff, budget, and what is retried."""

from __future__ import annotations

import grpc
import pytest

from memory_service_grpc_client import call_policy


class Failure(grpc.RpcError):  # type: ignore[misc]
    """A failed call as a stub raises it: an RpcError with a status code."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


def test_backoff_doubles_from_the_initial_wait_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(call_policy, "RETRY_INITIAL_WAIT", 0.5)
    monkeypatch.setattr(call_policy, "RETRY_MAX_WAIT", 10.0)
    assert [call_policy.backoff_wait(n) for n in range(1, 8)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_unavailable_is_retried_until_it_succeeds_and_each_wait_is_announced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(call_policy, "RETRY_INITIAL_WAIT", 0.001)
    outcomes: list[Exception | str] = [Failure(grpc.StatusCode.UNAVAILABLE)] * 3 + ["done"]
    announced: list[str] = []

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert call_policy.retry_while_unavailable(call, on_retry=announced.append) == "done"
    assert len(announced) == 3 and all(
        text.startswith("service unavailable, retrying in") for text in announced
    )


def test_other_codes_are_raised_at_once_and_a_zero_budget_tries_once() -> None:
    calls = []

    def refused() -> None:
        calls.append(1)
        raise Failure(grpc.StatusCode.INVALID_ARGUMENT)

    with pytest.raises(Failure):
        call_policy.retry_while_unavailable(refused)
    assert len(calls) == 1

    def down() -> None:
        calls.append(1)
        raise Failure(grpc.StatusCode.UNAVAILABLE)

    with pytest.raises(Failure) as raised:
        call_policy.retry_while_unavailable(down, max_seconds=0)
    assert raised.value.code() == grpc.StatusCode.UNAVAILABLE and len(calls) == 2
