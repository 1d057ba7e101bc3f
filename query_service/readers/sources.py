"""Source views (docs/explanation/knowledge-model.md): the original text of a node, byte for byte,
or — when the node holds no original (PutChunks, entities, episodes) — its chunks joined in order.

`disclose_source` passes a view's personal data through the caller's disclosure. Transport free;
`query_service.servicers.source_servicer.SourceServicer` maps it onto memory.v1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from typing import Any

from common.kernel.errors import NotFound
from common.kernel.errors import ViolationCollector
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.pii import PiiMarks
from common.storage.chunks.store import ChunkStore
from common.storage.database import Database
from common.storage.document_original_store import DocumentFile
from common.storage.document_original_store import DocumentOriginalStore
from common.storage.graph.store import GraphStore
from common.storage.memories.liveness import gone_memories
from common.storage.visibility import EVERYTHING
from common.storage.visibility import Visibility
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiGuard
from query_service.pii_output import PiiPolicy

ORIGINAL = "original"
CHUNKS = "chunks"
# Chunks re-assembled into one text are separated by one blank line (Markdown paragraph break).
CHUNK_SEPARATOR = "\n\n"


@dataclass(frozen=True)
class SourceView:
    """A node's text with provenance. ``content_source`` is ``"original"`` or ``"chunks"``."""

    natural_key: str
    title: str
    node_type: str
    content: str
    content_source: str
    source_path: str
    chunk_count: int
    provenance: Mapping[str, Any] = field(default_factory=dict)
    observation_ids: tuple[str, ...] = ()
    # For a document retained from a file: what it was converted from, and (when asked) its bytes.
    original: DocumentFile | None = None
    original_data: bytes | None = None


class SourceReader:
    """Reads source views of nodes."""

    def __init__(self, database: Database) -> None:
        self.database = database
        self.graph = GraphStore(database)
        self.chunks = ChunkStore(database.settings)
        self.pii = PiiGuard(database)
        self.originals = DocumentOriginalStore(database.settings)

    def get_source(
        self,
        namespace: str,
        natural_key: str,
        *,
        visibility: Visibility = EVERYTHING,
        pii: PiiPolicy = NO_PII_POLICY,
        include_original: bool = False,
    ) -> SourceView:
        """The source view of ``natural_key`` in ``namespace``.

        A node ``visibility`` may not see is reported exactly like an absent one (NotFound). ``pii`` is
        the caller's personal data policy: the view is masked, withheld (by the node's marks) or audited
        (`disclose_source`). ``include_original``: also read the bytes of the file the document was
        converted from (withheld, like the text, from a caller the node's personal data marks hide it from).

        Raises:
            InvalidArgument: empty ``namespace`` or ``natural_key``, a key longer than `MAX_KEY_LENGTH`
                (fields named as in GetSourceRequest).
            NotFound: no such node in the namespace (or a memory hidden by a lossy summary or expired).
            PermissionDenied: ``natural_key`` holds personal data and ``pii`` masks the caller's output
                (reason PII_CLEARANCE_REQUIRED; `PiiPolicy.refuse_personal_data_lookups`).
            Unavailable: the database cannot be reached.
        """
        check = ViolationCollector()
        if not namespace.strip():
            check.add("namespace", "required")
        if not natural_key.strip():
            check.add("natural_key", "required")
        elif len(natural_key) > MAX_KEY_LENGTH:
            check.add("natural_key", f"at most {MAX_KEY_LENGTH} characters")
        check.raise_if_any()
        pii.refuse_personal_data_lookups({"natural_key": natural_key})
        with self.database.connection() as conn:
            node = self.graph.get_node(conn, namespace, natural_key, visibility=visibility)
            if node is None or gone_memories(conn, namespace, [natural_key]):  # hidden or expired memory
                raise NotFound(f"no node {natural_key!r} in namespace {namespace!r}", reason="NODE_NOT_FOUND")
            props = node.get("props") or {}
            props = props if isinstance(props, dict) else {}
            chunk_count = self.chunks.count_chunks(conn, namespace, natural_key, visibility=visibility)
            content = props.get("content")
            if isinstance(content, str):
                text, origin = content, ORIGINAL
            else:
                stored = self.chunks.list_chunks(conn, namespace, natural_key, visibility=visibility)
                text, origin = CHUNK_SEPARATOR.join(chunk.text for chunk in stored), CHUNKS
            original = self.originals.file(conn, namespace, natural_key)
            data = (
                self.originals.data(conn, namespace, original.sha256)
                if original is not None and include_original
                else None
            )
        raw_provenance = props.get("provenance")
        provenance: dict[str, Any] = raw_provenance if isinstance(raw_provenance, dict) else {}
        observation_ids: list[str] = []
        for candidate in (props.get("observation_id"), provenance.get("observation_id")):
            if isinstance(candidate, str) and candidate and candidate not in observation_ids:
                observation_ids.append(candidate)
        view = SourceView(
            natural_key=natural_key,
            title=str(node.get("title") or natural_key),
            node_type=str(node.get("type") or ""),
            content=text,
            content_source=origin,
            source_path=str(node.get("source_path") or ""),
            chunk_count=chunk_count,
            provenance=provenance,
            observation_ids=tuple(observation_ids),
            original=original,
            original_data=data,
        )
        marks = PiiMarks.from_props(props)
        return self.pii.disclose(namespace, pii, lambda disclosure: disclose_source(disclosure, view, marks))


def disclose_source(disclosure: PiiDisclosure, view: SourceView, marks: PiiMarks) -> SourceView:
    """A source view as ``disclosure``'s caller may see it (`query_service.pii_output`): title and content
    masked, or withheld by the node's ``marks``; natural key, source path and provenance masked."""
    if not disclosure.policy.protection:
        return view
    key, ids = view.natural_key, view.observation_ids
    content = disclosure.text(view.content, marks=marks, key=key, observation_ids=ids)
    # The file's bytes cannot be masked: shown only when the converted text is shown unmasked.
    data = view.original_data if content == view.content else None
    return replace(
        view,
        natural_key=disclosure.text(view.natural_key, key=key),
        title=disclosure.text(view.title, marks=marks, key=key, observation_ids=ids),
        content=content,
        original_data=data,
        source_path=disclosure.text(view.source_path, key=key),
        provenance=disclosure.value(view.provenance, key=key, observation_ids=ids),
    )
