"""Limits and field shapes of the write side, in one place (docs/explanation/knowledge-model.md).

Every request limit of the ingest service (sizes, counts, batch sizes) and the patterns several write
paths check (node types, predicates, fact ids) live here, with the two field checks that observation
removal, node deletion and CloseFact share (`check_reason`, `check_trace_id`). Limits of the identifiers
themselves (`MAX_KEY_LENGTH`, `MAX_SCOPES`, `NAMESPACE_PATTERN`, `SCOPE_PATTERN`) are in
`common.kernel.identifiers`, as the query side checks them too.
"""

from __future__ import annotations

import re

from common.kernel.field_checks import Violations
from common.kernel.field_checks import check_text
from common.kernel.identifiers import MAX_PREDICATE_LENGTH
from common.kernel.identifiers import MAX_TYPE_LENGTH
from common.kernel.value_sizes import MAX_META_BYTES  # noqa: F401 - shared with the read side
from common.kernel.value_sizes import json_bytes  # noqa: F401 - shared with the read side
from common.storage.audit_store import AUDIT_EVENT_TYPE
from common.storage.audit_store import TRACE_EDGE
from common.storage.audit_store import TRACE_TYPE

# -- shapes --------------------------------------------------------------------------------------------

KIND_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]{0,127}$")  # observation kinds
PREDICATE_PATTERN = re.compile(rf"^[A-Za-z_][A-Za-z0-9_]{{0,{MAX_PREDICATE_LENGTH - 1}}}$")
TYPE_PATTERN = re.compile(
    rf"^[A-Za-z_][A-Za-z0-9_.-]{{0,{MAX_TYPE_LENGTH - 1}}}$"
)  # node (entity, document) types
FACT_ID_PATTERN = re.compile(r"^fact-[0-9a-f]{24}$")
# Evidence classes of a fact and their rank (docs/explanation/knowledge-model.md).
EVIDENCE_CLASSES = {"asserted": 3, "extracted": 2, "inferred": 1, "derived": 1}
# Audit trail nodes (docs/explanation/knowledge-model.md): no document write creates or overwrites them and
# DeleteNode refuses them.
PROTECTED_TYPES = frozenset({AUDIT_EVENT_TYPE, TRACE_TYPE})
# Their keys (audit_event:<id>, pc_trace:<trace_id>) and the edge between them are the audit trail's
# alone on every write path: observations, AssertFacts, Reconcile, Retain and PutChunks.
PROTECTED_KEY_PREFIXES = tuple(f"{protected}:" for protected in sorted(PROTECTED_TYPES))
PROTECTED_PREDICATES = frozenset({TRACE_EDGE})
RESERVED_KEY_MESSAGE = "the prefixes audit_event: and pc_trace: are reserved for the audit trail"

# -- shared by several write paths ---------------------------------------------------------------------

MAX_REASON_CHARS = 4096  # the reason of a redaction, purge, DeleteNode or CloseFact
MAX_TRACE_ID_CHARS = 256  # a trace id given by the caller (Retain, redaction, purge, DeleteNode)
MAX_NAME_CHARS = 256  # an observation's source system and stream; a snapshot's source, scope and id
# Free-form maps and titles on every write path, in line with the 1 MiB of content:
MAX_TITLE_CHARS = (
    1024  # an entity's or document's title, a text assertion's title and heading, a chunk's heading
)
MAX_ATTRIBUTES_BYTES = 256 * 1024  # an entity's or a fact's attributes, as compact JSON
MAX_PROVENANCE_BYTES = 64 * 1024  # an observation's or a document's provenance, as compact JSON

# -- observations (RecordObservations) -----------------------------------------------------------------

MAX_OBSERVATIONS_PER_CALL = 1000
MAX_OBSERVATION_CONTENT_BYTES = 1024 * 1024  # an observation's content, and each text assertion
MAX_OBSERVATION_DATA_BYTES = 1024 * 1024  # an observation's data as compact JSON
MAX_EXTERNAL_ID_CHARS = 1024
MAX_ASSERTIONS = 200  # assertions of one observation

# -- agent facts (AssertFacts) -------------------------------------------------------------------------

MAX_FACTS_PER_CALL = 200
MAX_FACT_SOURCE_PATH_CHARS = 1024

# -- documents (Retain, PutChunks) ---------------------------------------------------------------------

MAX_DOCUMENT_CONTENT_BYTES = 8 * 1024 * 1024
MAX_DOCUMENT_SOURCE_PATH_CHARS = 4096
MAX_LINKS = 1000
MAX_CHUNKS_PER_CALL = 10000
# PutChunks keeps the client's cut, so an oversized chunk is refused rather than split (full-text vectors
# are limited to 1 MB; embedders read a few hundred tokens anyway).
MAX_CHUNK_TEXT_BYTES = 256 * 1024

# -- snapshots (Reconcile, ReconcileStream) ------------------------------------------------------------

SNAPSHOT_BATCH = 1000  # items validated, journaled and written per statement group
MAX_SNAPSHOT_ITEMS = 200_000  # entities + facts of one unary ReconcileRequest
MAX_STREAM_ITEMS = 5_000_000  # entities + facts of one streamed snapshot (one transaction)
MAX_SNAPSHOT_VIOLATIONS = 100  # field violations reported before a run stops reading


def check_reason(check: Violations, reason: str, path: str = "reason") -> None:
    """Adds a violation to ``check`` when ``reason`` is longer than `MAX_REASON_CHARS` or holds a NUL."""
    check_text(check, path, reason, MAX_REASON_CHARS)


def check_trace_id(check: Violations, trace_id: str, path: str = "trace_id") -> None:
    """Adds a violation to ``check`` when ``trace_id`` is longer than `MAX_TRACE_ID_CHARS` or holds a NUL,
    tab or line break (it is printed in log lines and audit trails)."""
    if len(trace_id) > MAX_TRACE_ID_CHARS or any(ch in trace_id for ch in "\x00\r\n\t"):
        check.add(path, f"at most {MAX_TRACE_ID_CHARS} characters, no NUL, tab or line break")
