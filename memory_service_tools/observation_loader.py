"""The concurrent observation loader behind ``cb observe`` (and the benchmark, bench/run_bench.py).

`record_observations` sends parsed observations with RecordObservations in batches, several calls in
flight: observations are split into lanes by subject (`observation_lane`), each lane sends its batches
in file order, the lanes run side by side, and every call is retried while the service is UNAVAILABLE
(`memory_service_grpc_client.call_policy`).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import zlib
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait
from typing import Any

import grpc

from memory_service_grpc_client import call_policy
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from memory_service_tools.observation_file import LineError
from memory_service_tools.observation_file import ParsedObservation

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
        call = functools.partial(stub.RecordObservations, request, timeout=call_policy.WRITE_TIMEOUT_SECONDS)
        try:
            response: observation_service_pb2.RecordObservationsResponse = (
                call_policy.retry_while_unavailable(call, on_retry=lambda text: on_retry(f"{where}: {text}"))
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
