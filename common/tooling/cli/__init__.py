"""The ``cb`` command line (DESIGN §2 "CLI").

Commands:

* ``cb db up|down|status``: the embedded development database (`common.embedded_db`).
* ``cb init-db``: create or upgrade the schema explicitly (`common.db.Database.migrate`).
* ``cb serve ingest|query``: run one service in the foreground.
* ``cb up``: database, both services as child processes, wait for SERVING, stop all on Ctrl-C/SIGTERM.
* ``cb observe --file F.jsonl``: send observations (proto3 JSON lines) with RecordObservations.
* ``cb retain DIR --namespace NS``: send every Markdown file of a vault with DocumentService.Retain.
* ``cb reconcile --file S.jsonl``: stream a snapshot (header line, then item lines) with
  SnapshotService.ReconcileStream, with a progress bar.
* ``cb search``, ``cb facts``, ``cb source``, ``cb context``: read-side queries; ``--json`` prints
  the proto3 JSON of the response.

* ``cb token create|list``: bearer tokens of the tokens file (hashes only; the token is printed once).

Global options ``--ingest-addr`` / ``--query-addr`` default to ``CB_INGEST_ADDR`` / ``CB_QUERY_ADDR``;
``--token`` (default ``CB_TOKEN``) is sent as ``authorization: Bearer <token>`` on every call, and TLS
files come from ``CB_TLS_CA_FILE`` / ``CB_TLS_CLIENT_CERT_FILE`` / ``CB_TLS_CLIENT_KEY_FILE`` (every
command opens its channels through `_State.channel`, i.e. `common.client.make_channel`).
Server errors print as ``error: CODE: message`` plus one line per field violation, exit code 1.
Heavy modules (database, services, embedded database) are imported inside the commands that use them.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime as dt
import functools
import hashlib
import json
import logging
import signal
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import grpc
import tenacity
import typer
from google.protobuf import json_format, struct_pb2, timestamp_pb2
from google.protobuf.message import Message
from memory.v1 import (
    context_service_pb2,
    context_service_pb2_grpc,
    document_service_pb2,
    document_service_pb2_grpc,
    domain_pack_service_pb2,
    domain_pack_service_pb2_grpc,
    fact_query_service_pb2,
    fact_query_service_pb2_grpc,
    knowledge_pb2,
    observation_service_pb2,
    observation_service_pb2_grpc,
    retrieval_service_pb2,
    retrieval_service_pb2_grpc,
    source_service_pb2,
    source_service_pb2_grpc,
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from common.tooling.client import ClientSecurity, health_status, is_unavailable, make_channel, rpc_failure
from common.kernel.config import EMBEDDED_DATABASE_URL, Settings
from common.kernel.errors import DomainError, InvalidArgument
from common.kernel.identifiers import integral_numbers
from common.grpc.proto_mapping import explain_parse_error

__all__ = [
    "DocumentError",
    "LineError",
    "ParsedObservation",
    "app",
    "default_natural_key",
    "find_documents",
    "parse_instant",
    "parse_namespace_grant",
    "parse_observation_lines",
    "read_document",
]

app = typer.Typer(
    name="cb",
    help="memory-service: run the services and talk to them.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
db_app = typer.Typer(
    help="The embedded development database (PostgreSQL 17 + AGE + pgvector).", no_args_is_help=True
)
app.add_typer(db_app, name="db")
token_app = typer.Typer(
    help="Bearer tokens: the tokens file holds their sha256 hashes only.", no_args_is_help=True
)
app.add_typer(token_app, name="token")
pack_app = typer.Typer(
    help="Domain packs: register a versioned pack, enable packs in a namespace.", no_args_is_help=True
)
app.add_typer(pack_app, name="pack")

out = Console(highlight=False, soft_wrap=False)
err = Console(stderr=True, highlight=False)

# Retries of idempotent writes on UNAVAILABLE: exponential backoff, given up after RETRY_MAX_SECONDS.
RETRY_MAX_SECONDS = 120.0
RETRY_INITIAL_WAIT = 0.5
RETRY_MAX_WAIT = 10.0
WRITE_TIMEOUT_SECONDS = 600.0
READ_TIMEOUT_SECONDS = 120.0
MAX_BATCH = 1000

T = TypeVar("T")


# --------------------------------------------------------------------------------------------------
# Global options and error reporting


@dataclasses.dataclass
class _State:
    ingest_addr: str | None = None
    query_addr: str | None = None
    token: str | None = None
    _settings: Settings | None = None

    def settings(self) -> Settings:
        """Settings from the environment, with the addresses given on the command line applied."""
        if self._settings is None:
            try:
                settings = Settings()
            except ValueError as exc:  # pydantic.ValidationError
                _fail([f"error: invalid settings: {exc}"])
            update = {}
            if self.ingest_addr:
                update["ingest_addr"] = self.ingest_addr
            if self.query_addr:
                update["query_addr"] = self.query_addr
            self._settings = settings.model_copy(update=update) if update else settings
        return self._settings

    def ingest(self) -> str:
        return self.ingest_addr or self.settings().ingest_addr

    def query(self) -> str:
        return self.query_addr or self.settings().query_addr

    def security(self) -> ClientSecurity:
        """Token (``--token`` or ``CB_TOKEN``) and TLS files every channel of the CLI uses."""
        return ClientSecurity.from_settings(self.settings(), token=self.token)

    def channel(self, address: str) -> grpc.Channel:
        """A channel to ``address`` with the CLI's token and TLS settings (exits 1 on bad TLS files)."""
        try:
            return make_channel(address, security=self.security())
        except ValueError as exc:
            _fail([f"error: {exc}"])


def _state(ctx: typer.Context) -> _State:
    state = ctx.find_root().obj
    if not isinstance(state, _State):
        state = _State()
        ctx.find_root().obj = state
    return state


@app.callback()
def _main(
    ctx: typer.Context,
    ingest_addr: Annotated[
        str | None,
        typer.Option(
            "--ingest-addr", help="ingest_service host:port (default: CB_INGEST_ADDR or 127.0.0.1:50051)"
        ),
    ] = None,
    query_addr: Annotated[
        str | None,
        typer.Option(
            "--query-addr", help="query_service host:port (default: CB_QUERY_ADDR or 127.0.0.1:50052)"
        ),
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            help="bearer token sent with every call (default: CB_TOKEN)",
            show_default=False,
        ),
    ] = None,
) -> None:
    ctx.obj = _State(ingest_addr=ingest_addr, query_addr=query_addr, token=token)


def _fail(lines: Sequence[str], code: int = 1) -> NoReturn:
    for line in lines:
        err.print(escape(line), soft_wrap=True)
    raise typer.Exit(code)


def _error_lines(exc: BaseException) -> list[str]:
    """``error: CODE: message`` and the field violations of a failed call or a local domain error."""
    if isinstance(exc, grpc.RpcError):
        return rpc_failure(exc).lines()
    if isinstance(exc, InvalidArgument):
        return [f"error: {exc.reason}: {exc.message}", *(f"  - {v}" for v in exc.violations)]
    if isinstance(exc, DomainError):
        return [f"error: {exc.reason}: {exc.message}"]
    return [f"error: {exc}"]


@contextlib.contextmanager
def _reported_errors() -> Iterator[None]:
    """Turns server and domain errors into ``error: ...`` lines on stderr and exit code 1."""
    try:
        yield
    except (grpc.RpcError, DomainError) as exc:
        _fail(_error_lines(exc))


def _retrying(call: Callable[[], T], *, on_retry: Callable[[str], None] | None = None) -> T:
    """Runs ``call``, retrying on UNAVAILABLE with exponential backoff for up to RETRY_MAX_SECONDS."""

    def before_sleep(retry_state: tenacity.RetryCallState) -> None:
        if on_retry is not None and retry_state.next_action is not None:
            on_retry(f"service unavailable, retrying in {retry_state.next_action.sleep:.1f} s")

    retrying = tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_unavailable),
        wait=tenacity.wait_exponential(multiplier=RETRY_INITIAL_WAIT, max=RETRY_MAX_WAIT),
        stop=tenacity.stop_after_delay(RETRY_MAX_SECONDS),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(call)


def _print_json(message: Message) -> None:
    typer.echo(json_format.MessageToJson(message, indent=2, ensure_ascii=False))


def _progress() -> Progress:
    return Progress(
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
    )


# --------------------------------------------------------------------------------------------------
# Pure helpers (tested in tests/unit/test_cli.py)


def parse_instant(text: str) -> timestamp_pb2.Timestamp:
    """Parses an ISO 8601 instant (``2024-05-01``, ``2024-05-01T10:00:00Z``, ``...+03:00``) to a Timestamp.

    A value without a zone is UTC.

    Raises:
        ValueError: not an ISO 8601 date or date-time.
    """
    value = text.strip()
    if value[-1:] in ("Z", "z"):
        value = value[:-1] + "+00:00"
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError as exc:
        raise ValueError(f"{text!r} is not an ISO 8601 instant (e.g. 2024-05-01T10:00:00Z)") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(parsed.astimezone(dt.UTC))
    return stamp


def _instant_option(text: str | None) -> timestamp_pb2.Timestamp | None:
    if text is None or not text.strip():
        return None
    try:
        return parse_instant(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--as-of") from exc


def _format_instant(stamp: timestamp_pb2.Timestamp) -> str:
    moment = stamp.ToDatetime(tzinfo=dt.UTC)
    if moment.microsecond:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True)
class ParsedObservation:
    """One observation read from a JSONL file; ``line`` is 1-based."""

    line: int
    observation: knowledge_pb2.Observation


@dataclasses.dataclass(frozen=True)
class LineError:
    """A line that could not be parsed (it is reported and not sent); ``line`` is 1-based."""

    line: int
    error: str


def parse_observation_lines(
    lines: Iterable[bytes | str], *, namespace: str | None = None
) -> Iterator[ParsedObservation | LineError]:
    """Parses JSONL: each non-blank line is the proto3 JSON of one `memory.v1.Observation`.

    A line holding a `RecordObservationsRequest` (``{"observations": [...]}``) is accepted too and
    yields each of its observations with that line number.

    Args:
        lines: raw lines (bytes are decoded as UTF-8), in file order.
        namespace: when given, replaces the namespace of every observation.

    Yields:
        A `ParsedObservation` per observation, or a `LineError` (line number and reason) per bad line.
        Blank lines yield nothing.
    """
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
        except UnicodeDecodeError as exc:
            yield LineError(number, f"not UTF-8: {exc}")
            continue
        if not text.strip():
            continue
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            yield LineError(number, f"invalid JSON: {exc.msg} (column {exc.colno})")
            continue
        if not isinstance(document, dict):
            yield LineError(number, f"expected a JSON object, got {type(document).__name__}")
            continue
        try:
            if set(document) == {"observations"}:
                request = observation_service_pb2.RecordObservationsRequest()
                json_format.ParseDict(document, request)
                observations = list(request.observations)
            else:
                observation = knowledge_pb2.Observation()
                json_format.ParseDict(document, observation)
                observations = [observation]
        except json_format.ParseError as exc:
            yield LineError(number, "not a memory.v1.Observation: " + explain_parse_error(exc))
            continue
        for observation in observations:
            if namespace:
                observation.namespace = namespace
            yield ParsedObservation(number, observation)


class DocumentError(ValueError):
    """A Markdown file that cannot be sent (unreadable, not UTF-8, bad frontmatter)."""


_CONSUMED_FRONTMATTER = frozenset(
    {"natural_key", "title", "type", "links", "scopes", "meta", "pii", "pii_categories"}
)


def default_natural_key(relative_path: str | Path) -> str:
    """``doc:<path relative to the vault, POSIX separators, without .md>``, e.g. ``doc:apt/README``."""
    posix = Path(relative_path).as_posix()
    if posix.lower().endswith(".md"):
        posix = posix[: -len(".md")]
    return f"doc:{posix}"


def find_documents(root: Path) -> list[Path]:
    """Every ``*.md`` file under ``root`` sorted by relative path; hidden folders (``.git``, ...) skipped."""
    found = []
    for path in root.rglob("*.md"):
        relative = path.relative_to(root)
        if any(part.startswith(".") for part in relative.parts[:-1]):
            continue
        if path.is_file():
            found.append(path)
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _string_list(value: Any, name: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value.strip() else []
    if isinstance(value, (list, tuple)):
        items = []
        for item in value:
            if isinstance(item, (dict, list)):
                raise DocumentError(f"frontmatter {name}: expected strings, got {type(item).__name__}")
            if item is not None and str(item).strip():
                items.append(str(item))
        return items
    raise DocumentError(f"frontmatter {name}: expected a string or a list of strings")


def _jsonable(value: Any) -> Any:
    """YAML values as JSON values (dates become ISO strings); raises TypeError for anything else."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    raise TypeError(type(value).__name__)


def _struct(mapping: dict[str, Any]) -> struct_pb2.Struct:
    result = struct_pb2.Struct()
    result.update(mapping)
    return result


def read_document(path: Path, root: Path, *, namespace: str) -> document_service_pb2.RetainRequest:
    """Builds the RetainRequest of one Markdown file of a vault.

    The content is the file byte-for-byte (decoded as UTF-8, newlines untouched, frontmatter included:
    the server strips it for chunking). Frontmatter (YAML) gives ``natural_key`` (default
    `default_natural_key`), ``title``, ``type``, ``links`` (string or list of natural keys), ``scopes``,
    ``pii``, ``pii_categories`` and ``meta`` (a mapping); any other scalar or list key (``project``,
    ``license``, ...) is added to ``meta``. ``source_path`` is the path relative to ``root``;
    ``provenance`` is ``{"path": <relative path>, "sha256": <hex of the bytes>}``.

    Raises:
        DocumentError: the file cannot be read, is not UTF-8, or its frontmatter is malformed.
    """
    import frontmatter  # python-frontmatter; imported here to keep `cb --help` fast

    relative = path.relative_to(root).as_posix()
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DocumentError(f"cannot read: {exc.strerror or exc}") from exc
    try:
        content = data.decode("utf-8")  # same text as open(path, encoding="utf-8", newline="")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8: {exc}") from exc
    try:
        metadata = dict(frontmatter.loads(content).metadata)
    except Exception as exc:  # yaml errors and non-mapping frontmatter
        raise DocumentError(
            f"bad frontmatter: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
        ) from exc

    def text(key: str) -> str:
        value = metadata.get(key)
        if value is None:
            return ""
        if isinstance(value, (dict, list)):
            raise DocumentError(f"frontmatter {key}: expected a string")
        return str(value).strip()

    meta_value = metadata.get("meta") or {}
    if not isinstance(meta_value, dict):
        raise DocumentError("frontmatter meta: expected a mapping")
    meta: dict[str, Any] = {}
    leftovers = [(k, v) for k, v in metadata.items() if k not in _CONSUMED_FRONTMATTER]
    for key, value in [*leftovers, *meta_value.items()]:  # an explicit `meta` entry wins
        if value is None:
            continue
        try:
            meta[str(key)] = _jsonable(value)
        except TypeError:
            continue
    pii = metadata.get("pii", False)
    if isinstance(pii, str):
        pii = pii.strip().lower() in ("true", "yes", "1", "on")
    request = document_service_pb2.RetainRequest(
        namespace=namespace,
        natural_key=text("natural_key") or default_natural_key(relative),
        type=text("type"),
        title=text("title"),
        content=content,
        links=_string_list(metadata.get("links"), "links"),
        source_path=relative,
        provenance=_struct({"path": relative, "sha256": hashlib.sha256(data).hexdigest()}),
        scopes=_string_list(metadata.get("scopes"), "scopes"),
        pii=bool(pii),
        pii_categories=_string_list(metadata.get("pii_categories"), "pii_categories"),
    )
    if meta:
        request.meta.CopyFrom(_struct(meta))
    return request


# --------------------------------------------------------------------------------------------------
# Database and services


@db_app.command("up")
def db_up() -> None:
    """Build (first time), initialise and start the embedded database; prints its DSN."""
    from common.tooling.embedded_db import EmbeddedDatabaseError, database_up

    try:
        dsn = database_up()
    except (EmbeddedDatabaseError, OSError) as exc:
        _fail([f"error: {exc}"])
    typer.echo(dsn)


@db_app.command("down")
def db_down() -> None:
    """Stop the embedded database (nothing to do when it is not running)."""
    from common.tooling.embedded_db import EmbeddedDatabaseError, database_down

    try:
        database_down()
    except (EmbeddedDatabaseError, OSError) as exc:
        _fail([f"error: {exc}"])
    typer.echo("embedded database stopped")


@db_app.command("status")
def db_status() -> None:
    """Show the embedded database's state and DSN; exit code 1 when it is not running."""
    from common.tooling.embedded_db import EmbeddedDatabaseError, database_status

    try:
        status = database_status()
    except (EmbeddedDatabaseError, OSError) as exc:
        _fail([f"error: {exc}"])
    if dataclasses.is_dataclass(status) and not isinstance(status, type):
        for key, value in dataclasses.asdict(status).items():
            typer.echo(f"{key + ':':<14}{value}")
    else:
        typer.echo(str(status))
    if not getattr(status, "running", True):
        raise typer.Exit(1)


@app.command("init-db")
def init_db(ctx: typer.Context) -> None:
    """Create or upgrade the schema (extensions, graph, tables, indexes) of CB_DATABASE_URL now."""
    from common.storage.database import Database

    database = Database(_state(ctx).settings())
    try:
        applied = database.migrate()
    except (DomainError, OSError) as exc:
        _fail(_error_lines(exc))
    finally:
        database.close()
    if applied:
        for name in applied:
            typer.echo(f"applied {name}")
    else:
        typer.echo("schema up to date: no migration applied")


class ServiceKind(str, Enum):
    ingest = "ingest"
    query = "query"


def _configure_logging(level: str) -> None:
    from common.grpc.interceptors import RequestIdLogFilter

    handler = logging.StreamHandler()
    handler.addFilter(RequestIdLogFilter())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


@app.command()
def serve(
    ctx: typer.Context,
    service: Annotated[ServiceKind, typer.Argument(help="which service to run")],
    log_level: Annotated[str, typer.Option("--log-level", help="DEBUG, INFO, WARNING, ERROR")] = "INFO",
) -> None:
    """Run ingest_service or query_service in the foreground until SIGTERM/Ctrl-C.

    Without CB_TOKENS_FILE the service runs in development mode (no authentication), which is refused
    unless its address is a loopback one; see README "Security".
    """
    from common.grpc.security import ServerSetupError, build_authenticator, server_credentials

    state = _state(ctx)
    settings = state.settings()
    _configure_logging(log_level)
    address = state.ingest() if service is ServiceKind.ingest else state.query()
    try:  # refuse an insecure or broken configuration before loading the embedding model
        build_authenticator(settings, address=address, service_name=f"{service.value}_service")
        server_credentials(settings)
        if service is ServiceKind.ingest:
            from ingest_service.main import serve as serve_ingest

            serve_ingest(settings)
        else:
            from query_service.main import serve as serve_query

            serve_query(settings)
    except (ServerSetupError, ValueError) as exc:  # ValueError: embedding provider/dimension, tokenizer
        _fail([f"error: {exc}"])


class _Shutdown(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the child gets SIGTERM when `cb up` dies without cleaning up (e.g. SIGKILL)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _stop_children(children: dict[str, subprocess.Popen[bytes]], timeout: float = 30.0) -> None:
    for name, child in children.items():
        if child.poll() is None:
            err.print(f"stopping {name} (pid {child.pid})")
            child.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for name, child in children.items():
        try:
            child.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            err.print(f"{name} did not stop in {timeout:.0f} s; killing it")
            child.kill()
            child.wait()


@app.command()
def up(
    ctx: typer.Context,
    timeout: Annotated[float, typer.Option(help="seconds to wait for both services to be SERVING")] = 120.0,
) -> None:
    """Start the embedded database and both services; stop them on Ctrl-C or SIGTERM.

    The database is stopped on exit only when this command started it.

    The services run as child processes (``cb serve ingest`` / ``cb serve query``). When
    CB_DATABASE_URL points to another database, the embedded one is neither started nor stopped.
    If a service exits, everything is stopped and the exit code is 1.
    """
    state = _state(ctx)
    settings = state.settings()
    ingest_addr, query_addr = state.ingest(), state.query()
    embedded = settings.database_url == EMBEDDED_DATABASE_URL
    children: dict[str, subprocess.Popen[bytes]] = {}
    database_started = False
    exit_code = 0

    def on_signal(signum: int, _frame: object) -> None:
        raise _Shutdown(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if embedded:
            from common.tooling.embedded_db import database_status, database_up

            already_running = database_status().running
            err.print("starting the embedded database ..." if not already_running else "the embedded database is running")
            dsn = database_up()
            # Stop on exit only what this command started: a database that was already up (other
            # shells, tests) stays up.
            database_started = not already_running
            err.print(f"database: {dsn}")
        else:
            err.print("using CB_DATABASE_URL (the embedded database is not managed)")
        base = [sys.executable, "-m", "common.tooling.cli", "--ingest-addr", ingest_addr, "--query-addr", query_addr]
        for name, kind in (("ingest_service", "ingest"), ("query_service", "query")):
            children[name] = subprocess.Popen(
                [*base, "serve", kind],
                start_new_session=True,  # Ctrl-C reaches `cb up` only; it stops the children in order
                # No other thread runs yet, so preexec_fn is safe here.
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
            )
            err.print(f"started {name} (pid {children[name].pid})")
        _wait_serving(
            children,
            {"ingest_service": ingest_addr, "query_service": query_addr},
            timeout,
            security=state.security(),
        )
        out.print(f"ingest_service: {ingest_addr}")
        out.print(f"query_service:  {query_addr}")
        out.print("ready; Ctrl-C stops the services" + (" and the database" if database_started else ""))
        while True:
            for name, child in children.items():
                if child.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {child.returncode}")
            time.sleep(0.5)
    except _Shutdown as exc:
        err.print(f"received {exc}; shutting down")
    except Exception as exc:  # noqa: BLE001 - a child died, timeout, embedded database errors: all stop
        err.print(f"error: {escape(str(exc))}")
        exit_code = 1
    finally:
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)  # no second interruption of the clean-up
        try:
            _stop_children(children)
            if database_started:
                from common.tooling.embedded_db import database_down

                err.print("stopping the embedded database ...")
                try:
                    database_down()
                except Exception as exc:  # noqa: BLE001 - reported, exit code 1
                    err.print(f"error: stopping the database: {escape(str(exc))}")
                    exit_code = 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    raise typer.Exit(exit_code)


def _wait_serving(
    children: dict[str, subprocess.Popen[bytes]],
    addresses: dict[str, str],
    timeout: float,
    *,
    security: ClientSecurity | None = None,
) -> None:
    """Polls grpc health of each address until SERVING; raises when a child dies or on timeout."""
    started = time.monotonic()
    pending = dict(addresses)
    last: dict[str, str] = {}
    channels = {name: make_channel(address, security=security) for name, address in addresses.items()}
    try:
        while pending:
            for name, child in children.items():
                if child.poll() is not None:
                    raise RuntimeError(f"{name} exited with code {child.returncode} before it was SERVING")
            for name in list(pending):
                status = health_status(channels[name], timeout=1.0)
                if status != last.get(name):
                    elapsed = time.monotonic() - started
                    err.print(f"[{elapsed:5.1f} s] {name} at {pending[name]}: {status}")
                    last[name] = status
                if status == "SERVING":
                    del pending[name]
            if not pending:
                return
            if time.monotonic() - started > timeout:
                waiting = ", ".join(f"{n} ({last.get(n, '?')})" for n in pending)
                raise TimeoutError(f"not SERVING after {timeout:.0f} s: {waiting}")
            time.sleep(0.5)
    finally:
        for channel in channels.values():
            channel.close()


# --------------------------------------------------------------------------------------------------
# Writes


@dataclasses.dataclass
class _ObserveTally:
    created: int = 0
    duplicate: int = 0
    failed: int = 0
    bad_lines: int = 0
    not_sent: int = 0


def _count_nonblank(path: Path) -> int:
    with path.open("rb") as handle:
        return sum(1 for line in handle if line.strip())


DEFAULT_OBSERVE_CONCURRENCY = 4  # RecordObservations calls in flight; see record_observations


@dataclasses.dataclass(frozen=True)
class BatchOutcome:
    """One unit of `record_observations`: its file items, the observations sent, and either the response
    or the RPC error (both None for an unparsable line, which is never sent)."""

    batch: list[ParsedObservation | LineError]
    parsed: list[ParsedObservation]
    response: observation_service_pb2.RecordObservationsResponse | None = None
    error: grpc.RpcError | None = None


def observation_lane(observation: knowledge_pb2.Observation, lanes: int) -> int:
    """The lane (0..lanes-1) of an observation: a hash of its namespace and subject (``type:id``), or of
    its source stream when it has no subject, so one subject's observations stay in file order."""
    if observation.subject.id:
        key = f"{observation.namespace}\x1f{observation.subject.type}:{observation.subject.id}"
    else:
        key = f"{observation.namespace}\x1f{observation.source.system}\x1f{observation.source.stream}"
    return zlib.crc32(key.encode()) % lanes


def record_observations(
    stub: observation_service_pb2_grpc.ObservationServiceStub,
    items: Iterable[ParsedObservation | LineError],
    *,
    batch_size: int = 200,
    concurrency: int = DEFAULT_OBSERVE_CONCURRENCY,
    on_retry: Callable[[str], None] = lambda text: None,
    stop: threading.Event | None = None,
) -> Iterator[BatchOutcome]:
    """Sends observations with RecordObservations in batches of ``batch_size``, up to ``concurrency``
    calls in flight, and yields each outcome when it arrives.

    Observations are split into ``concurrency`` lanes by subject (`observation_lane`); each lane sends
    its batches one after another, in file order, and the lanes run side by side. Batches of different
    lanes share no subject, so they rarely wait for each other on the server (a batch locks the nodes
    it writes, `common.storage.key_locks`); contiguous batches of a file sorted by subject would share
    a subject at every boundary and run one after another. Reordering across subjects changes no
    result (supersession is order independent: tests/e2e/test_shuffled_corpus.py). Until the first
    call succeeds only one is in flight, so an unreachable service costs one batch. Each call is
    retried on UNAVAILABLE for up to ``RETRY_MAX_SECONDS`` (the RPC is idempotent). Items are read
    lazily: at most about ``2 * concurrency`` batches are held in memory.

    Args:
        stub: the ObservationService stub (its channel is shared by the worker threads).
        items: parsed file items in file order (`parse_observation_lines`).
        batch_size: observations per call, >= 1.
        concurrency: lanes and calls in flight, >= 1 (1: one call at a time, in file order).
        on_retry: receives a line per retry (``lines A-B: retrying ...``).
        stop: when set, no further batch is sent; the calls in flight are still awaited and yielded.

    Yields:
        A `BatchOutcome` per call as it completes, and one per unparsable line (``parsed`` empty) as it
        is read. Batches not sent after ``stop`` are not yielded.
    """
    if concurrency < 1 or batch_size < 1:
        raise ValueError("concurrency and batch_size must be >= 1")

    def send(
        parsed: list[ParsedObservation],
    ) -> observation_service_pb2.RecordObservationsResponse | grpc.RpcError:
        request = observation_service_pb2.RecordObservationsRequest(
            observations=[item.observation for item in parsed]
        )
        where = f"lines {parsed[0].line}-{parsed[-1].line}"
        try:
            response: observation_service_pb2.RecordObservationsResponse = _retrying(
                functools.partial(stub.RecordObservations, request, timeout=WRITE_TIMEOUT_SECONDS),
                on_retry=lambda text: on_retry(f"{where}: {text}"),
            )
        except grpc.RpcError as exc:
            return exc
        return response

    filling: list[list[ParsedObservation]] = [[] for _ in range(concurrency)]
    ready: list[collections.deque[list[ParsedObservation]]] = [
        collections.deque() for _ in range(concurrency)
    ]
    running: dict[Future[Any], tuple[int, list[ParsedObservation]]] = {}
    busy = [False] * concurrency
    source = iter(items)
    exhausted = succeeded = False

    def stopped() -> bool:
        return stop is not None and stop.is_set()

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="cb-observe") as pool:
        try:
            while True:
                # Read until every lane has a batch waiting or the input ends (bounded look-ahead).
                while not exhausted and not stopped() and sum(map(len, ready)) < 2 * concurrency:
                    item = next(source, None)
                    if item is None:
                        exhausted = True
                        for lane, batch in enumerate(filling):
                            if batch:
                                ready[lane].append(batch)
                        break
                    if isinstance(item, LineError):
                        yield BatchOutcome([item], [])
                        continue
                    lane = observation_lane(item.observation, concurrency)
                    filling[lane].append(item)
                    if len(filling[lane]) >= batch_size:
                        ready[lane].append(filling[lane])
                        filling[lane] = []
                        if all(ready[other] or busy[other] for other in range(concurrency)):
                            break
                limit = concurrency if succeeded else 1
                for lane in range(concurrency):
                    if len(running) >= limit or stopped():
                        break
                    if ready[lane] and not busy[lane]:
                        batch = ready[lane].popleft()
                        busy[lane] = True
                        running[pool.submit(send, batch)] = (lane, batch)
                if not running:
                    if exhausted or stopped():
                        return
                    continue
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in sorted(done, key=lambda f: running[f][1][0].line):
                    lane, batch = running.pop(future)
                    busy[lane] = False
                    outcome = future.result()
                    if isinstance(outcome, grpc.RpcError):
                        yield BatchOutcome(list(batch), batch, error=outcome)
                    else:
                        succeeded = True
                        yield BatchOutcome(list(batch), batch, response=outcome)
        finally:
            for future in running:  # the consumer stopped early: wait for the calls it will not see
                future.result()


@app.command()
def observe(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Option(
            "--file", "-f", exists=True, dir_okay=False, readable=True, help="JSONL of Observations"
        ),
    ],
    batch_size: Annotated[int, typer.Option(min=1, max=MAX_BATCH, help="observations per RPC")] = 200,
    namespace: Annotated[str | None, typer.Option(help="override the namespace of every observation")] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            "--workers",
            min=1,
            max=32,
            help="RecordObservations calls in flight (1: sequential)",
        ),
    ] = DEFAULT_OBSERVE_CONCURRENCY,
) -> None:
    """Record observations from a JSONL file (one proto3 JSON Observation per line).

    Sends RecordObservations in batches, ``--concurrency`` of them in flight (lanes by subject, see
    `record_observations`; each call retried on UNAVAILABLE: the RPC is idempotent), prints every
    failed item with its line number, and exits 1 if any line or item failed. Safe to re-run: recorded
    observations are duplicates.
    """
    address = _state(ctx).ingest()
    tally = _ObserveTally()
    total_lines = _count_nonblank(file)
    lines_done = 0
    # Observations read per line and not yet answered: a line is done when all of its are.
    open_lines: collections.Counter[int] = collections.Counter()
    with _state(ctx).channel(address) as channel, _progress() as progress:
        stub = observation_service_pb2_grpc.ObservationServiceStub(channel)
        task = progress.add_task("lines", total=total_lines)

        def report(text: str) -> None:
            progress.console.print(escape(text), soft_wrap=True)

        def counted(
            items: Iterable[ParsedObservation | LineError],
        ) -> Iterator[ParsedObservation | LineError]:
            for item in items:
                open_lines[item.line] += 1
                yield item

        def advance(batch: list[ParsedObservation | LineError]) -> None:
            nonlocal lines_done
            for item in batch:
                open_lines[item.line] -= 1
                if open_lines[item.line] <= 0:
                    del open_lines[item.line]
                    lines_done += 1
            progress.update(task, completed=min(lines_done, total_lines))

        give_up = threading.Event()
        with file.open("rb") as handle:
            items = counted(parse_observation_lines(handle, namespace=namespace))
            for outcome in record_observations(
                stub, items, batch_size=batch_size, concurrency=concurrency, on_retry=report, stop=give_up
            ):
                batch, parsed = outcome.batch, outcome.parsed
                for item in batch:
                    if isinstance(item, LineError):
                        tally.bad_lines += 1
                        report(f"line {item.line}: {item.error} (not sent)")
                if outcome.error is not None:
                    where = f"lines {parsed[0].line}-{parsed[-1].line}"
                    for text in rpc_failure(outcome.error).lines():
                        report(f"{where}: {text}")
                    tally.failed += len(parsed)
                    if is_unavailable(outcome.error) and not give_up.is_set():
                        give_up.set()
                        report(f"giving up: the service stayed unavailable for {RETRY_MAX_SECONDS:.0f} s")
                elif outcome.response is not None:
                    _tally_results(parsed, outcome.response, tally, report)
                advance(batch)
        if give_up.is_set():
            tally.not_sent = total_lines - lines_done
    summary = f"created {tally.created}, duplicate {tally.duplicate}, failed {tally.failed}"
    if tally.bad_lines:
        summary += f", unparsable lines {tally.bad_lines}"
    if tally.not_sent:
        summary += f", lines not sent {tally.not_sent}"
    out.print(summary)
    if tally.failed or tally.bad_lines or tally.not_sent:
        raise typer.Exit(1)


def _tally_results(
    parsed: list[ParsedObservation],
    response: observation_service_pb2.RecordObservationsResponse,
    tally: _ObserveTally,
    report: Callable[[str], None],
) -> None:
    results = list(response.results)
    if len(results) != len(parsed):
        report(
            f"lines {parsed[0].line}-{parsed[-1].line}: error: the service returned {len(results)} results "
            f"for {len(parsed)} observations"
        )
        tally.failed += len(parsed)
        return
    for item, result in zip(parsed, results):
        if result.status == "failed" or result.error:
            tally.failed += 1
            where = f"line {item.line}: {result.observation_id}" if result.observation_id else f"line {item.line}"
            report(f"{where}: {result.error or result.status}")
            for violation in result.field_violations:
                if violation != result.error:
                    report(f"  - {violation}")
        elif result.created:
            tally.created += 1
        else:
            tally.duplicate += 1


@app.command()
def reconcile(
    ctx: typer.Context,
    file: Annotated[
        Path,
        typer.Option(
            "--file",
            "-f",
            exists=True,
            dir_okay=False,
            readable=True,
            help='JSONL: {"header": {...}} first, then {"items": {"entities": [...], "facts": [...]}} lines',
        ),
    ],
    namespace: Annotated[str | None, typer.Option(help="override the header's namespace")] = None,
    part_items: Annotated[int, typer.Option(min=1, max=10_000, help="entities + facts per message")] = 1000,
    timeout: Annotated[float, typer.Option(min=1.0, help="seconds for the whole stream")] = 3600.0,
    as_json: Annotated[bool, typer.Option("--json", help="print the response as proto3 JSON")] = False,
) -> None:
    """Reconcile a snapshot from a JSONL file with SnapshotService.ReconcileStream (`common.snapshot_file`).

    The file is read and sent as it streams (never whole in memory), with a progress bar over its lines.
    Atomic on the server: if the stream breaks, nothing is written and the same command can simply be
    run again. Exits 1 on a bad line or a refused snapshot (field violations name each item's position).
    """
    from memory.v1 import snapshot_service_pb2_grpc

    from common.tooling.snapshot_file import SnapshotFileError, stream_requests

    address = _state(ctx).ingest()
    bad_line: list[SnapshotFileError] = []
    logging.getLogger("grpc._channel").setLevel(logging.CRITICAL)  # a bad line is reported below

    def messages(lines: Iterable[bytes], advance: Callable[[int], None]) -> Iterator[Message]:
        try:
            yield from stream_requests(lines, namespace=namespace, part_items=part_items, on_line=advance)
        except SnapshotFileError as error:
            bad_line.append(error)
            raise  # cancels the stream: the server rolls the run back

    with _state(ctx).channel(address) as channel, _progress() as progress, file.open("rb") as handle:
        task = progress.add_task("lines", total=_count_nonblank(file))
        stub = snapshot_service_pb2_grpc.SnapshotServiceStub(channel)
        try:
            response = stub.ReconcileStream(
                messages(handle, lambda line: progress.update(task, completed=line)), timeout=timeout
            )
        except grpc.RpcError as exc:
            lines = [f"{file}:{bad_line[0]} (nothing was reconciled)"] if bad_line else rpc_failure(exc).lines()
            _fail(lines)
    if as_json:
        _print_json(response)
        return
    counts = json_format.MessageToDict(response.counts, preserving_proto_field_name=True)
    summary = ", ".join(f"{name.replace('_', ' ')} {value}" for name, value in counts.items()) or "no changes"
    state = "already reconciled (nothing changed)" if response.unchanged else "reconciled"
    after = f" after {response.previous_snapshot_id}" if response.previous_snapshot_id else ""
    out.print(escape(f"{response.snapshot_id}: {state}{after}: {summary}"))


@app.command()
def retain(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(exists=True, file_okay=False, help="folder of Markdown files")],
    namespace: Annotated[str, typer.Option(help="namespace to write into")],
    workers: Annotated[int, typer.Option(min=1, max=16, help="concurrent Retain calls")] = 2,
) -> None:
    """Retain every ``*.md`` file under DIRECTORY (sorted) as a document; safe to re-run (upsert).

    Frontmatter gives natural_key (default ``doc:<relative path without .md>``), title, type, links.
    Links to documents not yet stored are skipped by the server and counted at the end.
    """
    address = _state(ctx).ingest()
    paths = find_documents(directory)
    if not paths:
        _fail([f"error: no *.md files under {directory}"])
    failures = 0
    created = updated = chunks = 0
    missing: list[tuple[str, str]] = []
    keys: set[str] = set()
    with _state(ctx).channel(address) as channel, _progress() as progress:
        stub = document_service_pb2_grpc.DocumentServiceStub(channel)
        task = progress.add_task("documents", total=len(paths))

        def report(text: str) -> None:
            progress.console.print(escape(text), soft_wrap=True)

        def send(request: document_service_pb2.RetainRequest) -> document_service_pb2.RetainResponse:
            response: document_service_pb2.RetainResponse = _retrying(
                lambda: stub.Retain(request, timeout=WRITE_TIMEOUT_SECONDS),
                on_retry=lambda text: report(f"{request.source_path}: {text}"),
            )
            return response

        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="cb-retain") as pool:
            futures = {}
            for path in paths:  # submitted in order: a link to an earlier document finds it
                relative = path.relative_to(directory).as_posix()
                try:
                    request = read_document(path, directory, namespace=namespace)
                except DocumentError as exc:
                    failures += 1
                    report(f"{relative}: error: {exc}")
                    progress.advance(task)
                    continue
                if request.natural_key in keys:
                    report(
                        f"{relative}: warning: natural key {request.natural_key} is used by an earlier file"
                    )
                keys.add(request.natural_key)
                futures[pool.submit(send, request)] = relative
            for future in as_completed(futures):
                relative = futures[future]
                try:
                    response = future.result()
                except grpc.RpcError as exc:
                    failures += 1
                    for text in rpc_failure(exc).lines():
                        report(f"{relative}: {text}")
                else:
                    created += int(response.created)
                    updated += int(not response.created)
                    chunks += response.chunk_count
                    missing.extend((response.natural_key, link) for link in response.missing_links)
                progress.advance(task)
    out.print(
        f"documents: {created} created, {updated} updated, {failures} failed; {chunks} chunks; "
        f"{len(missing)} missing links"
    )
    later = sum(1 for _, target in missing if target in keys)
    if later:
        out.print(
            f"{later} of the missing links point to documents of this folder: run `cb retain` again to link them"
        )
    if failures:
        raise typer.Exit(1)


# --------------------------------------------------------------------------------------------------
# Tokens


def _tokens_path(ctx: typer.Context, tokens_file: Path | None) -> Path:
    if tokens_file is not None:
        return tokens_file
    configured = _state(ctx).settings().tokens_file
    if not configured:
        _fail(["error: no tokens file: pass --tokens-file or set CB_TOKENS_FILE"])
    return Path(configured)


def parse_namespace_grant(text: str) -> tuple[str, list[str]]:
    """``"NS:read,write"`` -> ``("NS", ["read", "write"])`` (the last ``:`` separates the rights).

    Raises:
        ValueError: no ``:``, an empty namespace, no right, or an unknown right.
    """
    from common.auth.principals import Right

    namespace, sep, rights_text = text.rpartition(":")
    if not sep or not namespace.strip():
        raise ValueError(f"{text!r}: expected NAMESPACE:RIGHT[,RIGHT...], e.g. debian:read,write")
    rights = [r.strip() for r in rights_text.split(",") if r.strip()]
    if not rights:
        raise ValueError(f"{text!r}: list at least one right (read, write, admin)")
    return namespace.strip(), [Right.parse(r).label for r in rights]


TokensFileOption = Annotated[
    Path | None,
    typer.Option("--tokens-file", help="tokens file (default: CB_TOKENS_FILE)", dir_okay=False),
]


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    principal: Annotated[str, typer.Option(help="who the token stands for, e.g. ci-loader")],
    namespaces: Annotated[
        list[str],
        typer.Option(
            "--namespace",
            "-n",
            help="NS:read,write,admin (repeatable; admin implies write implies read; '*' = every namespace)",
        ),
    ],
    scopes: Annotated[
        list[str] | None,
        typer.Option("--scope", help="visibility scope the caller may see: workspace:x or principal:y"),
    ] = None,
    pii_clearance: Annotated[
        bool, typer.Option("--pii-clearance", help="may receive personal data unmasked")
    ] = False,
    note: Annotated[str | None, typer.Option(help="free text kept next to the hash")] = None,
    tokens_file: TokensFileOption = None,
) -> None:
    """Create a token: prints it once on stdout and appends only its sha256 to the tokens file.

    The file is created with mode 0600 when missing. Running services pick the new token up within
    a second, without a restart.
    """
    from common.auth.principals import Right
    from common.auth.tokens_file import TokensFileError
    from common.tooling.token_writer import add_token

    path = _tokens_path(ctx, tokens_file)
    grants: dict[str, list[Right]] = {}
    for text in namespaces:
        try:
            namespace, rights = parse_namespace_grant(text)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--namespace") from exc
        grants.setdefault(namespace, []).extend(Right.parse(r) for r in rights)
    try:
        token, entry = add_token(
            path,
            principal=principal,
            namespaces=grants,
            scopes=scopes or [],
            pii_clearance=pii_clearance,
            note=note,
        )
    except (TokensFileError, OSError) as exc:
        _fail([f"error: {exc}"])
    granted = ", ".join(f"{ns}:{','.join(rights)}" for ns, rights in entry.namespaces.items())
    err.print(
        escape(f"token for {entry.principal} ({granted}) added to {path}; it is shown only once:"),
        soft_wrap=True,
    )
    typer.echo(token)


@token_app.command("list")
def token_list(ctx: typer.Context, tokens_file: TokensFileOption = None) -> None:
    """List the principals of the tokens file with their rights, scopes and PII clearance."""
    from common.auth.tokens_file import TokensFileError, read_tokens_file

    path = _tokens_path(ctx, tokens_file)
    try:
        parsed = read_tokens_file(path)
    except TokensFileError as exc:
        _fail([f"error: {exc}"])
    if not parsed.tokens:
        out.print(f"no tokens in {escape(str(path))}")
        return
    table = Table()
    for name in ("principal", "namespaces", "scopes", "pii", "created", "note"):
        table.add_column(name)
    for entry in parsed.tokens:
        table.add_row(
            escape(entry.principal),
            escape("\n".join(f"{ns}: {', '.join(rights)}" for ns, rights in entry.namespaces.items())),
            escape("\n".join(entry.scopes)),
            "cleared" if entry.pii_clearance else "",
            escape(entry.created or ""),
            escape(entry.note or ""),
        )
    out.print(table)
    out.print(f"{len(parsed.tokens)} tokens in {escape(str(path))}")


# --------------------------------------------------------------------------------------------------
# Reads


def _excerpt(text: str, limit: int = 160) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _meta_filters(values: list[str] | None) -> dict[str, str]:
    result: dict[str, str] = {}
    for value in values or []:
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{value!r}: expected key=value", param_hint="--meta")
        result[key] = item
    return result


NamespaceOption = Annotated[str, typer.Option("--namespace", "-n", help="namespace to read")]
JsonOption = Annotated[bool, typer.Option("--json", help="print the response as proto3 JSON")]


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="what to look for")],
    namespace: NamespaceOption,
    top_k: Annotated[int, typer.Option("--top-k", min=1, max=100)] = 10,
    types: Annotated[list[str] | None, typer.Option("--type", help="node type to keep (repeatable)")] = None,
    meta: Annotated[
        list[str] | None, typer.Option("--meta", help="chunk meta filter key=value (repeatable)")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Hybrid search (vector + full text + trigram) over the chunks of a namespace."""
    request = retrieval_service_pb2.SearchRequest(
        namespace=namespace, query=query, top_k=top_k, types=types or []
    )
    filters = _meta_filters(meta)
    if filters:
        request.meta.CopyFrom(_struct(filters))
    with _reported_errors(), _state(ctx).channel(_state(ctx).query()) as channel:
        response = retrieval_service_pb2_grpc.RetrievalServiceStub(channel).Search(
            request, timeout=READ_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    if not response.hits:
        out.print("no hits")
        return
    table = Table(show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    table.add_column("document")
    table.add_column("text")
    for rank, hit in enumerate(response.hits, start=1):
        where = f"{hit.node_key}#{hit.chunk_order}"
        if hit.title and hit.title != hit.node_key:
            where += f"\n{hit.title}"
        if hit.heading:
            where += f"\n§ {hit.heading}"
        if hit.source_path:
            where += f"\n{hit.source_path}"
        scores = (
            f"{hit.score:.4f}\nv {hit.vector_score:.3f}\nt {hit.text_score:.3f}\ng {hit.trigram_score:.3f}"
        )
        table.add_row(str(rank), scores, escape(where), escape(_excerpt(hit.text, 300)))
    out.print(table)


@app.command()
def facts(
    ctx: typer.Context,
    namespace: NamespaceOption,
    subject: Annotated[str | None, typer.Option(help="subject natural key, e.g. package:openssl")] = None,
    predicate: Annotated[str | None, typer.Option(help="edge type, e.g. HAS_VERSION")] = None,
    object_: Annotated[str | None, typer.Option("--object", help="object natural key")] = None,
    as_of: Annotated[str | None, typer.Option("--as-of", help="ISO 8601 instant; default now")] = None,
    history: Annotated[bool, typer.Option("--history", help="include superseded and closed facts")] = False,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=1000)] = 500,
    as_json: JsonOption = False,
) -> None:
    """List facts by subject / predicate / object, valid at an instant or with their history."""
    request = fact_query_service_pb2.ListFactsRequest(
        namespace=namespace,
        subject=subject or "",
        predicate=predicate or "",
        object=object_ or "",
        include_history=history,
        page_size=page_size,
    )
    stamp = _instant_option(as_of)
    if stamp is not None:
        request.as_of.CopyFrom(stamp)
    collected = fact_query_service_pb2.ListFactsResponse()
    with _reported_errors(), _state(ctx).channel(_state(ctx).query()) as channel:
        stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
        while True:
            page = stub.ListFacts(request, timeout=READ_TIMEOUT_SECONDS)
            collected.facts.extend(page.facts)
            if not page.next_page_token or page.next_page_token == request.page_token:
                break
            request.page_token = page.next_page_token
    if as_json:
        _print_json(collected)
        return
    if not collected.facts:
        out.print("no facts")
        return
    table = Table()
    for name in ("subject", "predicate", "object", "valid", "evidence", "flags"):
        table.add_column(name)
    for fact in collected.facts:
        flags = [
            flag
            for flag, on in (
                ("conflict", fact.conflict),
                ("evidence lost", fact.evidence_lost),
                (f"superseded by {fact.superseded_by}", bool(fact.superseded_by)),
            )
            if on
        ]
        valid_from = _format_instant(fact.valid_from) if fact.HasField("valid_from") else "?"
        valid_to = _format_instant(fact.valid_to) if fact.HasField("valid_to") else "now"
        table.add_row(
            escape(fact.subject),
            escape(fact.predicate),
            escape(fact.object),
            f"{valid_from} → {valid_to}",
            escape(f"{fact.evidence} {fact.confidence:.2f}".strip()),
            escape(", ".join(flags)),
        )
    out.print(table)
    out.print(f"{len(collected.facts)} facts")


@app.command()
def source(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="natural key of the node, e.g. doc:apt/README")],
    namespace: NamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Print the original text of a node (or its chunks re-assembled) with its provenance."""
    request = source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key)
    with _reported_errors(), _state(ctx).channel(_state(ctx).query()) as channel:
        response = source_service_pb2_grpc.SourceServiceStub(channel).GetSource(
            request, timeout=READ_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    found = response.source
    err.print(f"[bold]{escape(found.title or found.natural_key)}[/bold]  ({escape(found.natural_key)})")
    details = [f"content: {found.content_source}"]
    if found.type:
        details.append(f"type: {found.type}")
    if found.provenance.source_path:
        details.append(f"source: {found.provenance.source_path}")
    if found.chunk_count:
        details.append(f"chunks: {found.chunk_count}")
    err.print(escape("; ".join(details)))
    if found.provenance.HasField("metadata") and found.provenance.metadata.fields:
        err.print(escape("provenance: " + json.dumps(json_format.MessageToDict(found.provenance.metadata))))
    sys.stdout.write(found.content)
    if found.content and not found.content.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


def _print_pack_text(pack: Any) -> None:
    """The end of `context` and `typed-context`: dropped count and trace id on stderr, the pack text on
    stdout."""
    if pack.dropped_count:
        err.print(f"{pack.dropped_count} candidates did not fit the budget")
    if pack.trace_id:
        err.print(f"trace: {escape(pack.trace_id)}")
    sys.stdout.write(pack.text)
    if pack.text and not pack.text.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


@app.command()
def context(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="the task or question")],
    namespace: NamespaceOption,
    anchors: Annotated[
        list[str] | None, typer.Option("--anchor", help="natural key the task is about (repeatable)")
    ] = None,
    budget: Annotated[int, typer.Option("--budget", min=1, max=100000, help="token budget")] = 2000,
    as_of: Annotated[str | None, typer.Option("--as-of", help="ISO 8601 instant; default now")] = None,
    trace_id: Annotated[str | None, typer.Option("--trace-id")] = None,
    as_json: JsonOption = False,
) -> None:
    """Compile a context pack for a task: ranked chunks and facts fitted to a token budget."""
    request = context_service_pb2.CompileContextRequest(
        namespace=namespace, query=query, anchors=anchors or [], token_budget=budget, trace_id=trace_id or ""
    )
    stamp = _instant_option(as_of)
    if stamp is not None:
        request.as_of.CopyFrom(stamp)
    with _reported_errors(), _state(ctx).channel(_state(ctx).query()) as channel:
        response = context_service_pb2_grpc.ContextServiceStub(channel).CompileContext(
            request, timeout=READ_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    pack = response.pack
    table = Table(title=f"{len(pack.items)} items, {pack.token_count}/{pack.token_budget or budget} tokens")
    for name in ("#", "kind", "score", "tokens", "from"):
        table.add_column(name, justify="right" if name in ("#", "score", "tokens") else "left")
    for number, item in enumerate(pack.items, start=1):
        origin = item.provenance.fact_id or item.provenance.node_key
        if item.provenance.source_path:
            origin += f" ({item.provenance.source_path})"
        if item.conflict:
            origin += " [conflict]"
        table.add_row(str(number), item.kind, f"{item.score:.4f}", str(item.token_count), escape(origin))
    err.print(table)
    _print_pack_text(pack)


@app.command("typed-context")
def typed_context(
    ctx: typer.Context,
    namespace: NamespaceOption,
    query: Annotated[
        str, typer.Argument(help="the task; identifiers in it (the packs' idPatterns) become anchors")
    ] = "",
    anchors: Annotated[
        list[str] | None,
        typer.Option("--anchor", help="natural key to start from; kind and id aliases resolve (repeatable)"),
    ] = None,
    depth: Annotated[int, typer.Option("--depth", min=0, max=4, help="steps from an anchor (0: 2)")] = 0,
    relations: Annotated[
        list[str] | None, typer.Option("--relation", help="follow only this relation (repeatable)")
    ] = None,
    budget: Annotated[int, typer.Option("--budget", min=1, max=100000, help="token budget")] = 2000,
    as_of: Annotated[str | None, typer.Option("--as-of", help="ISO 8601 instant; default now")] = None,
    trace_id: Annotated[str | None, typer.Option("--trace-id")] = None,
    as_json: JsonOption = False,
) -> None:
    """Compile a typed context pack: traversal from anchors along the namespace's domain-pack relations."""
    request = context_service_pb2.CompileTypedContextRequest(
        namespace=namespace,
        query=query,
        anchors=anchors or [],
        max_depth=depth,
        relations=relations or [],
        token_budget=budget,
        trace_id=trace_id or "",
    )
    stamp = _instant_option(as_of)
    if stamp is not None:
        request.as_of.CopyFrom(stamp)
    with _reported_errors(), _state(ctx).channel(_state(ctx).query()) as channel:
        response = context_service_pb2_grpc.ContextServiceStub(channel).CompileTypedContext(
            request, timeout=READ_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    pack = response.pack
    for anchor in pack.anchors:
        state = "found" if anchor.found else "not found"
        err.print(escape(f"anchor {anchor.input} -> {anchor.natural_key} ({anchor.source}, {state})"))
    table = Table(title=f"{len(pack.items)} items, {pack.token_count}/{pack.token_budget or budget} tokens")
    for name in ("#", "kind", "depth", "score", "item", "path"):
        table.add_column(name, justify="right" if name in ("#", "depth", "score") else "left")
    for number, item in enumerate(pack.items, start=1):
        label = item.provenance.fact_id if item.kind == "fact" else f"{item.natural_key} [{item.node_type}]"
        path = " > ".join(f"{step.relation}({step.direction})" for step in item.path)
        table.add_row(
            str(number), item.kind, str(item.depth), f"{item.score:.4f}", escape(label), escape(path)
        )
    err.print(table)
    if pack.truncated:
        err.print("the walk stopped at its row limit")
    _print_pack_text(pack)


@app.command("delete")
def delete_node(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help="natural key of the node to delete, e.g. doc:apt/README")],
    namespace: NamespaceOption,
    reason: Annotated[str, typer.Option("--reason", help="why; kept in the audit event")] = "",
    trace_id: Annotated[str | None, typer.Option("--trace-id", help="trace of the audit event")] = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a node with its chunks, edges and facts (DocumentService.DeleteNode); the deletion is
    audited (read it back with `cb trace`). Audit nodes are protected; a missing key is NOT_FOUND."""
    request = document_service_pb2.DeleteNodeRequest(
        namespace=namespace, natural_key=key, reason=reason, trace_id=trace_id or ""
    )
    with _reported_errors(), _state(ctx).channel(_state(ctx).ingest()) as channel:
        response = document_service_pb2_grpc.DocumentServiceStub(channel).DeleteNode(
            request, timeout=WRITE_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    err.print(
        escape(
            f"deleted {response.natural_key} ({response.type}): {response.chunks_deleted} chunks, "
            f"{response.facts_deleted} facts, {response.edges_deleted} other edges"
        )
    )
    err.print(escape(f"audit event {response.audit_event_id} in trace {response.trace_id}"))


@app.command("trace")
def trace(
    ctx: typer.Context,
    trace_id: Annotated[str, typer.Argument(help="the trace id (a CompileContext trace_id, a request id)")],
    namespace: NamespaceOption,
    as_json: JsonOption = False,
) -> None:
    """Print the trail of a trace (TraceService.GetTrace): audit events and context compilations, by time."""
    request = trace_service_pb2.GetTraceRequest(namespace=namespace, trace_id=trace_id)
    with _reported_errors(), _state(ctx).channel(_state(ctx).query()) as channel:
        response = trace_service_pb2_grpc.TraceServiceStub(channel).GetTrace(
            request, timeout=READ_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    table = Table(title=f"trace {trace_id}: {len(response.trace.entries)} entries")
    for name in ("time", "entry", "who / request", "what"):
        table.add_column(name)
    for entry in response.trace.entries:
        when = _format_instant(entry.time)
        if entry.HasField("audit_event"):
            event = entry.audit_event
            details = json.dumps(integral_numbers(json_format.MessageToDict(event.details)), ensure_ascii=False)
            what = _excerpt(f"{event.target_key} {details}")
            table.add_row(when, f"audit: {event.action}", escape(event.principal), escape(what))
        else:
            compilation = entry.context_compilation
            asked = json_format.MessageToDict(compilation.request)
            kept = sum(1 for d in compilation.decisions if d.fields["decision"].string_value == "kept")
            table.add_row(
                when,
                "context compilation",
                escape(_excerpt(str(asked.get("query", "")))),
                f"{kept} kept of {len(compilation.decisions)} shown ({compilation.hidden_decision_count} hidden)",
            )
    err.print(table)


@pack_app.command("register")
def pack_register(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Option("--file", "-f", exists=True, dir_okay=False, help="the pack as JSON {name, version, kinds, relations}")
    ],
    as_json: JsonOption = False,
) -> None:
    """Register a domain pack (DomainPackService.RegisterPackage). A version is immutable: the same content
    again is a no-op, other content under the same version is ALREADY_EXISTS."""
    try:
        package = json_format.Parse(file.read_text("utf-8"), domain_pack_service_pb2.DomainPackage())
    except (json_format.ParseError, UnicodeDecodeError) as exc:
        raise typer.BadParameter(f"{file}: not a domain pack in proto3 JSON: {exc}", param_hint="--file") from exc
    with _reported_errors(), _state(ctx).channel(_state(ctx).ingest()) as channel:
        response = domain_pack_service_pb2_grpc.DomainPackServiceStub(channel).RegisterPackage(
            domain_pack_service_pb2.RegisterPackageRequest(package=package), timeout=WRITE_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    state = "registered" if response.created else "already registered with this content"
    err.print(escape(f"{package.name}@{package.version}: {state}"))


@pack_app.command("enable")
def pack_enable(
    ctx: typer.Context,
    packages: Annotated[list[str], typer.Argument(help="packs as name@version, e.g. software-delivery@1.0.0")],
    namespace: NamespaceOption,
    strict: Annotated[bool, typer.Option("--strict/--no-strict", help="reject writes outside the packs")] = False,
    as_json: JsonOption = False,
) -> None:
    """Set the packs of a namespace (DomainPackService.SetNamespaceKinds); replaces the previous set."""
    refs = []
    for text in packages:
        name, separator, version = text.partition("@")
        if not separator or not name or not version:
            raise typer.BadParameter(f"{text!r} is not name@version (e.g. software-delivery@1.0.0)", param_hint="PACKAGES")
        refs.append(domain_pack_service_pb2.PackageRef(name=name, version=version))
    request = domain_pack_service_pb2.SetNamespaceKindsRequest(namespace=namespace, packages=refs, strict=strict)
    with _reported_errors(), _state(ctx).channel(_state(ctx).ingest()) as channel:
        response = domain_pack_service_pb2_grpc.DomainPackServiceStub(channel).SetNamespaceKinds(
            request, timeout=WRITE_TIMEOUT_SECONDS
        )
    if as_json:
        _print_json(response)
        return
    mode = "strict" if strict else "non-strict"
    err.print(escape(f"{namespace}: {', '.join(packages)} enabled ({mode})"))

