"""The CLI's commands and their error reporting over real gRPC channels to small in-process servicers
(`tests.unit.cli_fakes`, served by the `serve` fixture)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from typer.testing import CliRunner

from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import NotFound
from memory_service_grpc_client import call_policy
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc
from memory_service_tools.cli import app
from memory_service_tools.observation_file import parse_observation_lines
from memory_service_tools.observation_loader import record_observations
from tests.unit.cli_fakes import FakeDocuments
from tests.unit.cli_fakes import FakeObservations
from tests.unit.cli_fakes import document_server
from tests.unit.cli_fakes import observation_line
from tests.unit.cli_fakes import observation_server

# --------------------------------------------------------------------------------------------------
# Commands against small in-process servicers


runner = CliRunner()


def test_observe_counts_and_reports_per_item_errors(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str], tmp_path: Path
) -> None:
    fake = FakeObservations()
    address = observation_server(serve, fake)
    file = tmp_path / "obs.jsonl"
    file.write_text(
        "\n".join(
            [
                observation_line(),
                "{broken",
                observation_line(kind="dup"),
                "",
                observation_line(kind="bad"),
                observation_line(kind="package.uploaded"),
            ]
        )
        + "\n",
        encoding="utf-8",
    )
    result = runner.invoke(
        app,
        ["--ingest-addr", address, "observe", "--file", str(file), "--batch-size", "2", "--namespace", "ns2"],
    )
    assert result.exit_code == 1, result.output
    assert "created 2, duplicate 1, failed 1, unparsable lines 1" in result.stdout
    assert "line 2: invalid JSON" in result.stderr and "(not sent)" in result.stderr
    assert "line 5: obs-" in result.stderr and "kind: must not be 'bad'" in result.stderr
    assert "  - content: too short" in result.stderr
    assert "Traceback" not in result.output
    assert [o.kind for o in fake.received] == ["package.uploaded", "dup", "bad", "package.uploaded"]
    assert {o.namespace for o in fake.received} == {"ns2"}
    assert fake.calls == 2  # batches of two observations; the bad line does not count


def test_observe_retries_unavailable(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(call_policy, "RETRY_INITIAL_WAIT", 0.01)
    fake = FakeObservations(outages=2)
    address = observation_server(serve, fake)
    file = tmp_path / "obs.jsonl"
    file.write_text(observation_line() + "\n", encoding="utf-8")
    result = runner.invoke(app, ["--ingest-addr", address, "observe", "-f", str(file)])
    assert result.exit_code == 0, result.output
    assert fake.calls == 3
    assert "created 1, duplicate 0, failed 0" in result.stdout
    assert "retrying" in result.stderr


def test_observe_gives_up_when_unavailable_too_long(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(call_policy, "RETRY_INITIAL_WAIT", 0.01)
    monkeypatch.setattr(call_policy, "RETRY_MAX_SECONDS", 0.3)
    fake = FakeObservations(outages=10_000)
    address = observation_server(serve, fake)
    file = tmp_path / "obs.jsonl"
    file.write_text("\n".join([observation_line()] * 5) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["--ingest-addr", address, "observe", "-f", str(file), "--batch-size", "2"])
    assert result.exit_code == 1
    assert "lines 1-2: error: UNAVAILABLE: database unavailable" in result.stderr
    assert "giving up" in result.stderr
    assert "failed 2" in result.stdout and "lines not sent 3" in result.stdout
    assert fake.calls >= 2


class SlowObservations(FakeObservations):
    """Answers the first batches slowest (so later ones finish first) and records the calls in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.max_in_flight = 0

    def RecordObservations(
        self, request: observation_service_pb2.RecordObservationsRequest, context: grpc.ServicerContext
    ) -> observation_service_pb2.RecordObservationsResponse:
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            order = self.calls
        time.sleep(max(0.0, 0.2 - 0.04 * order))
        try:
            return super().RecordObservations(request, context)
        finally:
            with self.lock:
                self.in_flight -= 1


def test_observe_sends_lanes_concurrently_and_keeps_each_subject_in_order(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str], tmp_path: Path
) -> None:
    fake = SlowObservations()
    address = observation_server(serve, fake)
    file = tmp_path / "obs.jsonl"
    # Twelve subjects with two observations each; the first line of each subject is 'bad', the last 'dup'.
    lines = []
    for number in range(12):
        subject = {"type": "package", "id": f"p{number}"}
        lines.append(observation_line(subject=subject, kind="bad" if number == 0 else "package.uploaded"))
        lines.append(observation_line(subject=subject, kind="dup" if number == 11 else "package.uploaded"))
    file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = runner.invoke(
        app,
        ["--ingest-addr", address, "observe", "-f", str(file), "--batch-size", "2", "--concurrency", "3"],
    )
    assert result.exit_code == 1, result.output
    assert "created 22, duplicate 1, failed 1" in result.stdout
    assert "line 1: obs-" in result.stderr and "kind: must not be 'bad'" in result.stderr
    assert len(fake.received) == 24
    assert fake.max_in_flight == 3  # one call until the first answer, then one per lane
    # Within a subject the file order is kept.
    order = [(o.subject.id, o.kind) for o in fake.received]
    for number in range(12):
        mine = [kind for subject, kind in order if subject == f"p{number}"]
        assert mine[0] == ("bad" if number == 0 else "package.uploaded")
        assert mine[1] == ("dup" if number == 11 else "package.uploaded")


def test_record_observations_one_call_at_a_time_in_file_order_when_concurrency_is_one(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str],
) -> None:
    fake = SlowObservations()
    address = observation_server(serve, fake)
    lines = [observation_line(subject={"type": "package", "id": f"p{number}"}) for number in range(6)] + [
        "{broken"
    ]
    items = list(parse_observation_lines(lines))
    with grpc.insecure_channel(address) as channel:
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        outcomes = list(record_observations(stub, items, batch_size=2, concurrency=1))
    sent = [outcome for outcome in outcomes if outcome.parsed]
    assert [[item.line for item in outcome.parsed] for outcome in sent] == [[1, 2], [3, 4], [5, 6]]
    assert all(outcome.response is not None and outcome.error is None for outcome in sent)
    assert [outcome.batch for outcome in outcomes if not outcome.parsed] == [[items[-1]]]
    assert fake.max_in_flight == 1


def test_retain_sends_every_file_and_counts_missing_links(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str], tmp_path: Path
) -> None:
    fake = FakeDocuments()
    address = document_server(serve, fake)
    vault = tmp_path / "vault"
    (vault / "sub").mkdir(parents=True)
    (vault / "a.md").write_bytes(b"---\nlinks: [doc:sub/b, doc:nowhere]\n---\n# A\r\n")
    (vault / "sub" / "b.md").write_bytes("# B\n\nтекст\n".encode())
    (vault / "sub" / "reject.md").write_bytes(b"# rejected\n")
    (vault / "sub" / "broken.md").write_bytes(b"---\ntitle: [x\n---\n")
    result = runner.invoke(app, ["--ingest-addr", address, "retain", str(vault), "--namespace", "docs"])
    assert result.exit_code == 1, result.output
    sent = {r.natural_key: r for r in fake.received}
    assert set(sent) == {"doc:a", "doc:sub/b"}
    assert sent["doc:a"].content.encode() == (vault / "a.md").read_bytes()
    assert sent["doc:sub/b"].content == "# B\n\nтекст\n"
    assert sent["doc:sub/b"].source_path == "sub/b.md"
    assert "sub/broken.md: error: bad frontmatter" in result.stderr
    assert "sub/reject.md: error: INVALID_ARGUMENT: natural_key: rejected by the test" in result.stderr
    assert "  - natural_key: rejected by the test" not in result.stderr  # the message is that violation
    assert "2 failed" in result.stdout
    # Links to doc:nowhere and (order permitting) doc:sub/b were skipped by the server.
    assert "missing links" in result.stdout


def _source_server(serve: Callable[[Callable[[grpc.Server], list[str]]], str]) -> str:
    class Sources(source_service_pb2_grpc.SourceServiceServicer):  # type: ignore[misc]
        def GetSource(
            self, request: source_service_pb2.GetSourceRequest, context: grpc.ServicerContext
        ) -> source_service_pb2.GetSourceResponse:
            if request.natural_key == "doc:refused":
                raise InvalidArgument(
                    [
                        FieldViolation("namespace", "must not be empty"),
                        FieldViolation("natural_key", "bad [key]"),
                    ]
                )
            if request.natural_key == "doc:missing":
                raise NotFound("no node doc:missing")
            if request.natural_key == "doc:boom":
                raise RuntimeError("hidden detail")
            return source_service_pb2.GetSourceResponse(
                source=source_service_pb2.Source(
                    natural_key=request.natural_key,
                    title="T",
                    content="line 1\n[b]line 2[/b]",
                    content_source="original",
                )
            )

    def register(server: grpc.Server) -> list[str]:
        source_service_pb2_grpc.add_SourceServiceServicer_to_server(Sources(), server)
        return ["memory.v1.SourceService"]

    return serve(register)


def test_server_errors_print_code_message_and_violations(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str],
) -> None:
    address = _source_server(serve)
    result = runner.invoke(app, ["--query-addr", address, "source", "doc:refused", "--namespace", "ns"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: INVALID_ARGUMENT: namespace: must not be empty; natural_key: bad [key]",
        "  - namespace: must not be empty",
        "  - natural_key: bad [key]",
    ]
    result = runner.invoke(app, ["--query-addr", address, "source", "doc:missing", "-n", "ns"])
    assert result.exit_code == 1 and result.stderr.strip() == "error: NOT_FOUND: no node doc:missing"
    result = runner.invoke(app, ["--query-addr", address, "source", "doc:boom", "-n", "ns"])
    assert result.exit_code == 1 and result.stderr.startswith("error: INTERNAL: internal error (request id ")
    assert "Traceback" not in result.output and "hidden detail" not in result.output


def test_source_prints_content_or_json(serve: Callable[[Callable[[grpc.Server], list[str]]], str]) -> None:
    address = _source_server(serve)
    result = runner.invoke(app, ["--query-addr", address, "source", "doc:x", "-n", "ns"])
    assert result.exit_code == 0, result.output
    assert result.stdout == "line 1\n[b]line 2[/b]\n"
    result = runner.invoke(app, ["--query-addr", address, "source", "doc:x", "-n", "ns", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["source"]["contentSource"] == "original"


def test_unreachable_service_is_reported_without_traceback() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: connections are refused
        result = runner.invoke(app, ["--query-addr", f"127.0.0.1:{port}", "search", "q", "-n", "ns"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: UNAVAILABLE: ")
    assert "Traceback" not in result.output


def test_facts_follows_page_tokens(serve: Callable[[Callable[[grpc.Server], list[str]]], str]) -> None:
    seen: list[fact_query_service_pb2.ListFactsRequest] = []

    class Facts(fact_query_service_pb2_grpc.FactQueryServiceServicer):  # type: ignore[misc]
        def ListFacts(
            self, request: fact_query_service_pb2.ListFactsRequest, context: grpc.ServicerContext
        ) -> fact_query_service_pb2.ListFactsResponse:
            seen.append(request)
            page = int(request.page_token or "0")
            fact = knowledge_pb2.Fact(
                fact_id=f"fact-{page}",
                subject=request.subject,
                predicate="HAS_VERSION",
                object=f"version:{page}",
            )
            fact.valid_from.FromJsonString("2024-01-01T00:00:00Z")
            return fact_query_service_pb2.ListFactsResponse(
                facts=[fact], next_page_token=str(page + 1) if page < 2 else ""
            )

    def register(server: grpc.Server) -> list[str]:
        fact_query_service_pb2_grpc.add_FactQueryServiceServicer_to_server(Facts(), server)
        return ["memory.v1.FactQueryService"]

    address = serve(register)
    args = [
        "--query-addr",
        address,
        "facts",
        "-n",
        "ns",
        "--subject",
        "package:time",
        "--as-of",
        "2024-06-01",
    ]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    assert [f["factId"] for f in json.loads(result.stdout)["facts"]] == ["fact-0", "fact-1", "fact-2"]
    assert [r.page_token for r in seen] == ["", "1", "2"]
    assert seen[0].as_of.ToJsonString() == "2024-06-01T00:00:00Z" and not seen[0].include_history
    result = runner.invoke(app, [*args, "--history"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "3 facts" in result.stdout and "package:time" in result.stdout
    assert seen[-1].include_history

    bad = runner.invoke(app, ["--query-addr", address, "facts", "-n", "ns", "--as-of", "someday"])
    assert bad.exit_code == 2 and "ISO 8601" in bad.output


def test_token_create_then_list_round_trips_through_the_tokens_file(tmp_path: Path) -> None:
    """cb token create / list end to end (the commands import the tokens file and its writer lazily)."""
    from common.auth.tokens_file import hash_token
    from common.auth.tokens_file import load_tokens_file

    path = tmp_path / "tokens.yaml"
    created = runner.invoke(
        app,
        [
            "token",
            "create",
            "--principal",
            "ci-loader",
            "--namespace",
            "sales:write",
            "--scope",
            "workspace:x",
            "--tokens-file",
            str(path),
        ],
    )
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert token.startswith("cbt_") and token not in path.read_text("utf-8")
    assert hash_token(token) in path.read_text("utf-8")
    principal = load_tokens_file(path)[hash_token(token)]
    assert principal.name == "ci-loader"
    listed = runner.invoke(app, ["token", "list", "--tokens-file", str(path)])
    assert listed.exit_code == 0, listed.output
    assert "ci-loader" in listed.stdout and "sales" in listed.stdout and token not in listed.stdout


@pytest.mark.timeout(30)  # without the spooling the second open of the pipe waits for a writer forever
def test_observe_reads_a_pipe(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str], tmp_path: Path
) -> None:
    """``cb observe --file /dev/stdin`` and other pipes: the input is read once and every line is sent."""
    import os

    fake = FakeObservations()
    address = observation_server(serve, fake)
    pipe = tmp_path / "observations.pipe"
    os.mkfifo(pipe)
    lines = "".join(observation_line() + "\n" for _ in range(3))

    def write() -> None:
        with pipe.open("w", encoding="utf-8") as writer:
            writer.write(lines)

    writer = threading.Thread(target=write)
    writer.start()
    result = runner.invoke(app, ["--ingest-addr", address, "observe", "--file", str(pipe)])
    writer.join(10)
    assert result.exit_code == 0, result.output
    assert "created 3, duplicate 0, failed 0" in result.stdout
    assert len(fake.received) == 3


def test_facts_table_keeps_long_keys_whole_on_a_narrow_terminal(
    serve: Callable[[Callable[[grpc.Server], list[str]]], str],
) -> None:
    """Trial leftover: at 80 columns the table cut keys to ``…``; what a user copies is whole."""
    subject = "package:libreoffice-l10n-" + "x" * 40
    obj = "version:libreoffice-l10n-" + "x" * 40 + "@4:7.4.7-1+deb12u8"

    class Facts(fact_query_service_pb2_grpc.FactQueryServiceServicer):  # type: ignore[misc]
        def ListFacts(
            self, request: fact_query_service_pb2.ListFactsRequest, context: grpc.ServicerContext
        ) -> fact_query_service_pb2.ListFactsResponse:
            fact = knowledge_pb2.Fact(
                fact_id="fact-" + "0123456789abcdef" * 2,
                subject=subject,
                predicate="HAS_VERSION",
                object=obj,
                superseded_by="fact-" + "fedcba9876543210" * 2,
            )
            return fact_query_service_pb2.ListFactsResponse(facts=[fact])

    def register(server: grpc.Server) -> list[str]:
        fact_query_service_pb2_grpc.add_FactQueryServiceServicer_to_server(Facts(), server)
        return ["memory.v1.FactQueryService"]

    address = serve(register)
    result = runner.invoke(app, ["--query-addr", address, "facts", "-n", "ns"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "…" not in result.stdout
    for value in (subject, obj, "fact-" + "fedcba9876543210" * 2):
        assert any(value in line for line in result.stdout.splitlines()), value
    assert "1 facts" in result.stdout
