"""The framing of the client-streaming write RPCs (ReconcileStream, IngestVault): a header message (read
by `stream_header`), then any number of part messages, then one end message, then the close of the stream.

`ClientStream.parts` yields the part of messages 2.. and returns normally only after the end message and
the close, so a run commits or sweeps only then; the end message is what tells a complete stream from a
broken one (when a client cancels, the server's request iterator may simply stop, like a normal close).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc

from common.kernel.errors import FieldViolation
from common.kernel.errors import InvalidArgument
from common.kernel.errors import Unavailable

__all__ = ["ClientStream", "stream_header"]


def stream_header(messages: Iterator[Any]) -> Any:
    """The ``header`` of the stream's first message (the oneof ``part``), which `ClientStream` then
    follows with the rest of ``messages``.

    Raises:
        InvalidArgument: the stream is empty or its first message carries no header (field ``header``).
    """
    first = next(messages, None)
    if first is None or first.WhichOneof("part") != "header":
        raise InvalidArgument(
            [FieldViolation("header", "the first message of the stream must carry the header")]
        )
    return first.header


class ClientStream:
    """Messages 2.. of a client stream whose oneof ``part`` holds ``part_field`` or ``end``.

    Args:
        messages: the request iterator after the header.
        part_field: the oneof member of the part messages (``"items"``, ``"documents"``).
        consequence: what the client is told happened on a broken or unfinished stream, e.g.
            ``"nothing was written"``.

    After `parts` is exhausted, ``end`` holds the end message.
    """

    def __init__(self, messages: Iterator[Any], part_field: str, *, consequence: str) -> None:
        self._messages = messages
        self._part_field = part_field
        self._consequence = consequence
        self.end: Any = None

    def parts(self) -> Iterator[Any]:
        """The ``part_field`` message of each part message, in order.

        Raises:
            InvalidArgument: a later message carries a header or nothing, a message follows the end
                message, or the stream closed without the end message.
            Unavailable: the stream broke (cancelled, deadline exceeded, connection lost), reason
                ``STREAM_BROKEN``.
        """
        index = 0
        try:
            for index, message in enumerate(self._messages, start=1):
                which = message.WhichOneof("part")
                if self.end is not None:
                    raise InvalidArgument(
                        [FieldViolation("end", f"message {index} of the stream follows the end message")]
                    )
                if which == "end":
                    self.end = message.end
                    continue
                if which != self._part_field:
                    description = (
                        "only the first message carries the header"
                        if which
                        else f"{self._part_field} or end required"
                    )
                    raise InvalidArgument(
                        [FieldViolation(self._part_field, f"message {index} of the stream: {description}")]
                    )
                yield getattr(message, self._part_field)
        except grpc.RpcError as error:
            raise Unavailable(
                f"the stream broke after {index} messages, before the client closed it; {self._consequence}",
                reason="STREAM_BROKEN",
            ) from error
        if self.end is None:
            raise InvalidArgument(
                [
                    FieldViolation(
                        "end",
                        f"the stream closed after {index + 1} messages without the end message; "
                        f"{self._consequence}",
                    )
                ]
            )
