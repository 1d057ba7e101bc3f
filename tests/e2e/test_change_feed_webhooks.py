"""Webhooks of the change feed against real HTTP receivers on loopback (`http.server` in a thread), with
the ingest service and the worker's procrastinate queue running in this process on the real database.

* A receiver that answers 500 and times out for a while gets every event once by id (CloudEvents 1.0,
  structured JSON), in cursor order, each request signed (HMAC-SHA256 over timestamp and body, verified
  here with the subscription's secret), the same event id on every retry.
* A receiver that always fails: the deliveries become dead letters after the attempts; an admin lists
  them and replays them (with the explicit word) once the receiver is back.
* Target URLs outside the allow-list (private, loopback not named, link-local, other schemes) are
  refused with a field violation.
* A subscription carries its creator's scopes: it delivers nothing about items the creator could not read.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import psycopg
import pytest
from cryptography.fernet import Fernet
from google.protobuf import json_format
from pydantic import SecretStr

from common.auth.principals import Right
from common.kernel.config import Settings
from ingest_service.main import create_ingest_host
from ingest_service.worker import build_worker
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import rpc_failure
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import webhook_service_pb2
from memory_service_grpc_client.memory.v1 import webhook_service_pb2_grpc
from memory_service_tools.token_writer import add_token
from tests.e2e.conftest import token_secured_services

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]
WHEN = "2024-05-01T10:00:00Z"
TIMEOUT = 1.0
MAX_ATTEMPTS = 6


@dataclass
class Hook:
    """What one receiver path answers and what it got."""

    secret: str = ""
    answers: list[str] = field(default_factory=list)  # per request, first to last: "500", "timeout", "ok"
    default: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)
    accepted: list[dict[str, Any]] = field(default_factory=list)  # first accepted delivery of each id
    accepted_ids: set[str] = field(default_factory=set)


class Receiver:
    """An HTTP server on 127.0.0.1 with one `Hook` per path."""

    def __init__(self) -> None:
        self.hooks: dict[str, Hook] = {}
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with receiver.lock:
                    hook = receiver.hooks[self.path]
                    answer = hook.answers.pop(0) if hook.answers else hook.default
                    timestamp = self.headers.get("webhook-timestamp", "")
                    expected = (
                        "v1="
                        + hmac.new(
                            hook.secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256
                        ).hexdigest()
                    )
                    event = json.loads(body)
                    hook.requests.append(
                        {
                            "id": event["id"],
                            "header_id": self.headers.get("webhook-id"),
                            "content_type": self.headers.get("content-type"),
                            "signed": hmac.compare_digest(
                                expected, self.headers.get("webhook-signature", "")
                            ),
                            "answer": answer,
                            "event": event,
                        }
                    )
                    if answer == "ok" and event["id"] not in hook.accepted_ids:
                        hook.accepted_ids.add(event["id"])
                        hook.accepted.append(event)
                if answer == "timeout":
                    time.sleep(TIMEOUT * 2)
                status = 200 if answer in ("ok", "timeout") else 500
                try:
                    self.send_response(status)
                    self.end_headers()
                except OSError:
                    pass  # the sender gave up (timeout)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


SECRET_KEY = Fernet.generate_key().decode()


@pytest.fixture(scope="module")
def hook_settings(settings: Settings) -> Settings:
    return settings.model_copy(
        update={
            "webhook_allowed_targets": ["127.0.0.1"],
            "webhook_retry_wait_seconds": 0.2,
            "webhook_retry_max_wait_seconds": 1.0,
            "webhook_max_attempts": MAX_ATTEMPTS,
            "webhook_timeout_seconds": TIMEOUT,
            # secrets sealed at rest: every delivery below is signed with a secret opened by this key
            "webhook_secret_keys": SecretStr(SECRET_KEY),
        }
    )


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker(hook_settings: Settings) -> Iterator[None]:
    queue, database = build_worker(hook_settings, concurrency=2)
    try:
        with queue.running(2):
            yield
    finally:
        database.close()


@pytest.fixture(scope="module")
def ingest(hook_settings: Settings, worker: None) -> Iterator[grpc.Channel]:
    host = create_ingest_host(hook_settings, address="127.0.0.1:0", metrics_port=0)
    host.start()
    address = f"127.0.0.1:{host.port}"
    assert wait_for_serving(address, timeout=120)
    channel = grpc.insecure_channel(address)
    yield channel
    channel.close()
    host.stop(5)


def _observations(namespace: str, count: int, *, scopes: tuple[str, ...] = (), tag: str = "") -> Any:
    return observation_service_pb2.RecordObservationsRequest(
        observations=[
            json_format.ParseDict(
                {
                    "namespace": namespace,
                    "source": {"system": "hook-test", "stream": "s", "external_id": f"{tag}{i}"},
                    "kind": "note",
                    "occurred_at": WHEN,
                    "scopes": list(scopes),
                    "content": f"note {tag}{i}",
                    "assertions": [{"entity": {"key": f"service:{tag}svc{i}", "title": f"S {tag}{i}"}}],
                },
                knowledge_pb2.Observation(),
            )
            for i in range(count)
        ]
    )


def _subscribe(channel: grpc.Channel, namespace: str, url: str, **filters: Any) -> tuple[str, str]:
    response = webhook_service_pb2_grpc.WebhookServiceStub(channel).CreateWebhookSubscription(
        webhook_service_pb2.CreateWebhookSubscriptionRequest(namespace=namespace, target_url=url, **filters),
        timeout=30,
    )
    return response.subscription.subscription_id, response.secret


def _event_ids(settings: Settings, namespace: str) -> list[str]:
    with psycopg.connect(settings.database_url) as conn:
        rows = conn.execute(
            "SELECT id FROM change_events WHERE namespace = %s ORDER BY cursor", (namespace,)
        ).fetchall()
    return [str(row[0]) for row in rows]


def _wait(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds  # a bounded wait for the worker, not a timing assertion
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_a_flaky_receiver_gets_every_event_once_by_id_in_order_and_signed(
    hook_settings: Settings, ingest: grpc.Channel, receiver: Receiver
) -> None:
    namespace = "hook-" + uuid.uuid4().hex[:10]
    hook = receiver.hooks["/flaky"] = Hook(answers=["500", "500", "timeout", "500", "timeout"])
    _, hook.secret = _subscribe(ingest, namespace, receiver.url("/flaky"))
    observation_service_pb2_grpc.ObservationServiceStub(ingest).RecordObservations(
        _observations(namespace, 12), timeout=120
    )
    expected = _event_ids(hook_settings, namespace)
    assert len(expected) >= 36  # per observation: recorded, its episode node, its entity node
    _wait(lambda: hook.accepted_ids >= set(expected), 420, "every event reached the receiver")
    assert [event["id"] for event in hook.accepted] == expected, "each event once, in cursor order"
    assert all(r["signed"] for r in hook.requests), "every request carries a valid signature"
    assert all(r["header_id"] == r["id"] for r in hook.requests)
    assert {r["content_type"] for r in hook.requests} == {"application/cloudevents+json"}
    first = hook.requests[0]["id"]
    assert [r["answer"] for r in hook.requests if r["id"] == first][:6] == [
        "500",
        "500",
        "timeout",
        "500",
        "timeout",
        "ok",
    ], "the first event was retried through the failures with the same id"
    event = hook.accepted[0]
    assert event["specversion"] == "1.0" and event["type"] == "memory.observation.recorded"
    assert event["source"] == f"memory-service/namespaces/{namespace}"
    assert event["data"]["cursor"] == 1


def test_dead_letters_are_listed_and_replayed_by_an_admin(
    hook_settings: Settings, ingest: grpc.Channel, receiver: Receiver
) -> None:
    namespace = "hook-" + uuid.uuid4().hex[:10]
    hook = receiver.hooks["/down"] = Hook(default="500")
    subscription_id, hook.secret = _subscribe(
        ingest, namespace, receiver.url("/down"), event_types=["observation.recorded"]
    )
    observation_service_pb2_grpc.ObservationServiceStub(ingest).RecordObservations(
        _observations(namespace, 3), timeout=120
    )
    stub = webhook_service_pb2_grpc.WebhookServiceStub(ingest)

    def dead() -> list[Any]:
        request = webhook_service_pb2.ListDeadLettersRequest(namespace=namespace)
        return list(stub.ListDeadLetters(request, timeout=30).dead_letters)

    _wait(lambda: len(dead()) == 3, 420, "three dead letters")
    letters = dead()
    assert {letter.attempts for letter in letters} == {MAX_ATTEMPTS}
    assert {letter.last_error for letter in letters} == {"HTTP 500"}
    assert {letter.event_type for letter in letters} == {"observation.recorded"}
    assert len(hook.requests) == 3 * MAX_ATTEMPTS and not hook.accepted
    with pytest.raises(grpc.RpcError) as refused:
        stub.ReplayDeadLetters(
            webhook_service_pb2.ReplayDeadLettersRequest(
                namespace=namespace, subscription_id=subscription_id
            ),
            timeout=30,
        )
    assert rpc_failure(refused.value).code == grpc.StatusCode.INVALID_ARGUMENT
    hook.default = "ok"
    replayed = stub.ReplayDeadLetters(
        webhook_service_pb2.ReplayDeadLettersRequest(
            namespace=namespace, subscription_id=subscription_id, all_dead_letters=True
        ),
        timeout=30,
    ).replayed
    assert replayed == 3
    _wait(lambda: len(hook.accepted) == 3, 120, "the replayed events arrive")
    assert [e["id"] for e in hook.accepted] == [letter.event_id for letter in letters]
    assert dead() == []


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.2:9/hook",  # loopback, but not the allow-listed address
        "http://10.1.2.3/hook",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:8080/hook",
        "http://0.0.0.0:9/hook",
        "file:///etc/passwd",
        "http://user:pw@127.0.0.1/hook",
    ],
)
def test_a_target_outside_the_allow_list_is_refused(ingest: grpc.Channel, url: str) -> None:
    with pytest.raises(grpc.RpcError) as refused:
        _subscribe(ingest, "hook-refused", url)
    failure = rpc_failure(refused.value)
    assert failure.code == grpc.StatusCode.INVALID_ARGUMENT
    assert [v.field for v in failure.violations] == ["target_url"]


def test_a_webhook_delivers_nothing_its_creator_could_not_read(
    hook_settings: Settings, worker: None, receiver: Receiver, tmp_path: Path
) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    namespace = "hook-" + uuid.uuid4().hex[:10]
    writer, _ = add_token(
        tokens_file, principal="hook-writer", namespaces={namespace: [Right.WRITE]}, scopes=["workspace:x"]
    )
    outsider, _ = add_token(tokens_file, principal="hook-outsider", namespaces={namespace: [Right.WRITE]})
    insider, _ = add_token(
        tokens_file, principal="hook-insider", namespaces={namespace: [Right.WRITE]}, scopes=["workspace:x"]
    )
    with token_secured_services(hook_settings, tokens_file) as (ingest_addr, _query_addr):
        hooks = {}
        for name, token in (("outsider", outsider), ("insider", insider)):
            hooks[name] = receiver.hooks[f"/{name}-{namespace}"] = Hook()
            with make_channel(ingest_addr, security=ClientSecurity(token=token)) as channel:
                _, hooks[name].secret = _subscribe(channel, namespace, receiver.url(f"/{name}-{namespace}"))
        with make_channel(ingest_addr, security=ClientSecurity(token=writer)) as channel:
            stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
            stub.RecordObservations(
                _observations(namespace, 2, scopes=("workspace:x",), tag="hidden"), timeout=120
            )
            stub.RecordObservations(_observations(namespace, 2, tag="public"), timeout=120)
        everything = _event_ids(hook_settings, namespace)
        _wait(
            lambda: hooks["insider"].accepted_ids >= set(everything), 120, "the insider's hook got everything"
        )
        _wait(lambda: len(hooks["outsider"].accepted) >= 6, 120, "the outsider's hook got the public events")
        time.sleep(2)  # a few more dispatch rounds: anything hidden would have followed by now
    with psycopg.connect(hook_settings.database_url) as conn:
        stored = [
            str(row[0])
            for row in conn.execute(
                "SELECT secret FROM webhook_subscriptions WHERE namespace = %s", (namespace,)
            )
        ]
    assert len(stored) == 2 and all(value.startswith("fernet:") for value in stored), stored
    assert not {hook.secret for hook in hooks.values()} & set(stored)  # sealed: no secret as it is
    outsider_text = json.dumps(hooks["outsider"].accepted)
    assert "hidden" not in outsider_text
    assert "public" in outsider_text
    assert len(hooks["outsider"].accepted) == 6  # two public observations: recorded, episode, entity


def test_with_tokens_a_webhook_needs_a_key_to_seal_its_secret(settings: Settings, tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens.yaml"
    namespace = "hook-" + uuid.uuid4().hex[:10]
    writer, _ = add_token(tokens_file, principal="hook-keyless", namespaces={namespace: [Right.WRITE]})
    keyless = settings.model_copy(update={"webhook_allowed_targets": ["127.0.0.1"]})
    assert not keyless.webhook_secret_keys.get_secret_value()
    with (
        token_secured_services(keyless, tokens_file) as (ingest_addr, _query_addr),
        make_channel(ingest_addr, security=ClientSecurity(token=writer)) as channel,
        pytest.raises(grpc.RpcError) as refused,
    ):
        _subscribe(channel, namespace, "http://127.0.0.1:9/hook")
    failure = rpc_failure(refused.value)
    assert (failure.code, failure.reason) == (
        grpc.StatusCode.FAILED_PRECONDITION,
        "WEBHOOK_SECRET_KEY_MISSING",
    )
    with psycopg.connect(settings.database_url) as conn:
        assert conn.execute(
            "SELECT count(*) FROM webhook_subscriptions WHERE namespace = %s", (namespace,)
        ).fetchone() == (0,)
