"""Iterators over paged RPCs (AIP-158): ``page_size`` / ``page_token`` in, ``next_page_token`` out.

`iter_pages` runs any paged call page after page; `MemoryClient.iter_facts` and
`MemoryClient.iter_packages` are it applied to ListFacts and ListPackages.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
from typing import Any
from typing import TypeVar

from google.protobuf.message import Message

__all__ = ["iter_pages"]

RequestT = TypeVar("RequestT", bound=Message)
ItemT = TypeVar("ItemT")


def iter_pages(
    fetch: Callable[[RequestT], Any],
    request: RequestT,
    items: Callable[[Any], Iterable[ItemT]],
    *,
    limit: int | None = None,
) -> Iterator[ItemT]:
    """The items of every page of a paged call, following ``next_page_token`` until it is empty.

    Args:
        fetch: one page: takes the request (with ``page_token`` set) and returns the response.
        request: the first page's request (its ``page_size`` applies to every page); not changed.
        items: the items of a response, e.g. ``lambda page: page.facts``.
        limit: stop after this many items (None: all of them).

    Yields:
        The items in the order the pages give them. A ``next_page_token`` equal to the one just sent
        ends the iteration too (a server that repeats itself cannot loop the client).
    """
    page_request = type(request)()
    page_request.CopyFrom(request)
    yielded = 0
    while True:
        page = fetch(page_request)
        for item in items(page):
            if limit is not None and yielded >= limit:
                return
            yield item
            yielded += 1
        token = page.next_page_token
        if not token or token == page_request.page_token:  # type: ignore[attr-defined]
            return
        page_request.page_token = token  # type: ignore[attr-defined]
