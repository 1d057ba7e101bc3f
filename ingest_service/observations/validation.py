"""Validation of observations against the limits of docs/explanation/knowledge-model.md, on the proto3-JSON
form.

Input is the dict of one observation as produced by ``json_format.MessageToDict(...,
preserving_proto_field_name=True)`` (the same shape as the lines of the debian corpus). Output is a
normalised `ObservationInput` or the list of field violations, with paths relative to the request
(``observations[3].assertions[0].fact.valid_from``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from typing import Any

from common.kernel.errors import FieldViolation
from common.kernel.identifiers import MAX_KEY_LENGTH
from common.kernel.identifiers import NAMESPACE_PATTERN
from common.kernel.identifiers import NAMESPACE_VIOLATION
from common.kernel.identifiers import canonical_instant
from common.kernel.identifiers import content_identity
from common.kernel.identifiers import observation_id
from common.kernel.identifiers import parse_instant
from common.kernel.pii import check_pii_categories
from ingest_service.facts.engine import FactInput
from ingest_service.facts.validation import validate_fact_assertion
from ingest_service.validation.fields import FieldChecker
from ingest_service.validation.fields import validate_scopes
from ingest_service.validation.limits import KIND_PATTERN
from ingest_service.validation.limits import MAX_ASSERTIONS
from ingest_service.validation.limits import MAX_ATTRIBUTES_BYTES
from ingest_service.validation.limits import MAX_EXTERNAL_ID_CHARS
from ingest_service.validation.limits import MAX_NAME_CHARS
from ingest_service.validation.limits import MAX_OBSERVATION_CONTENT_BYTES
from ingest_service.validation.limits import MAX_OBSERVATION_DATA_BYTES
from ingest_service.validation.limits import MAX_PROVENANCE_BYTES
from ingest_service.validation.limits import MAX_TITLE_CHARS
from ingest_service.validation.limits import TYPE_PATTERN
from ingest_service.validation.limits import json_bytes


@dataclass
class EntityInput:
    index: int
    key: str
    node_type: str
    title: str
    attributes: dict[str, Any]


@dataclass
class TextInput:
    index: int
    text: str
    title: str
    heading: str


@dataclass
class ObservationInput:
    """A valid observation, normalised (instants aware UTC, keys ``type:id``)."""

    observation_id: str
    namespace: str
    system: str
    stream: str
    external_id: str
    kind: str
    occurred_at: datetime
    actor: dict[str, str] | None
    subject: dict[str, str] | None
    scopes: list[str]
    content: str
    data: dict[str, Any]
    provenance: dict[str, Any]
    assertions: list[dict[str, Any]]
    entities: list[EntityInput] = field(default_factory=list)
    facts: list[FactInput] = field(default_factory=list)
    texts: list[TextInput] = field(default_factory=list)
    # Explicit personal data marks (docs/how-to/personal-data.md); not part of the identity.
    pii: bool = False
    pii_categories: list[str] = field(default_factory=list)


def _participant(checker: FieldChecker, value: Any, path: str) -> dict[str, str] | None:
    if value in (None, {}):
        return None
    if not isinstance(value, dict) or not value.get("type") or not value.get("id"):
        checker.add(path, "must be {type, id} with both set")
        return None
    if not TYPE_PATTERN.match(str(value["type"])):
        checker.add(f"{path}.type", "pattern [A-Za-z_][A-Za-z0-9_.-]{0,63}")
        return None
    if len(str(value["id"])) > MAX_KEY_LENGTH:
        checker.add(f"{path}.id", f"at most {MAX_KEY_LENGTH} characters")
        return None
    return {"type": str(value["type"]), "id": str(value["id"])}


def _canonical_assertions(assertions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assertions with their instants canonical (for the content identity)."""
    result = []
    for assertion in assertions:
        copy = json.loads(json.dumps(assertion))
        fact = copy.get("fact")
        if isinstance(fact, dict):
            for name in ("valid_from", "valid_to"):
                if isinstance(fact.get(name), str):
                    fact[name] = canonical_instant(parse_instant(fact[name]))
        result.append(copy)
    return result


def validate_observation(
    raw: dict[str, Any], prefix: str
) -> tuple[ObservationInput | None, list[FieldViolation]]:
    """Checks one observation; returns (normalised input, []) or (None, violations)."""
    checker = FieldChecker(prefix)
    # Facts check their own values (validate_fact_assertion); entity and text assertions are checked below.
    checker.storable({name: value for name, value in raw.items() if name != "assertions"}, "")
    namespace = raw.get("namespace", "")
    if not isinstance(namespace, str) or not NAMESPACE_PATTERN.match(namespace):
        checker.add("namespace", NAMESPACE_VIOLATION)
    source = raw.get("source") or {}
    system = source.get("system", "") if isinstance(source, dict) else ""
    stream = source.get("stream", "") if isinstance(source, dict) else ""
    external_id = source.get("external_id", "") if isinstance(source, dict) else ""
    for name, value in (("system", system), ("stream", stream)):
        if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
            checker.add(f"source.{name}", f"required, 1..{MAX_NAME_CHARS} characters")
    if not isinstance(external_id, str) or len(external_id) > MAX_EXTERNAL_ID_CHARS:
        checker.add("source.external_id", f"at most {MAX_EXTERNAL_ID_CHARS} characters")
    kind = raw.get("kind", "")
    if not isinstance(kind, str) or not KIND_PATTERN.match(kind):
        checker.add("kind", "required, pattern [a-z0-9][a-z0-9._-]{0,127}")
    occurred_at = checker.instant(raw.get("occurred_at"), "occurred_at", required=True)
    actor = _participant(checker, raw.get("actor"), "actor")
    subject = _participant(checker, raw.get("subject"), "subject")
    scopes = validate_scopes(checker, raw.get("scopes"), "scopes")
    content = raw.get("content", "") or ""
    if len(content.encode("utf-8")) > MAX_OBSERVATION_CONTENT_BYTES:
        checker.add("content", f"larger than {MAX_OBSERVATION_CONTENT_BYTES} bytes (1 MiB)")
    data = raw.get("data") or {}
    if json_bytes(data) > MAX_OBSERVATION_DATA_BYTES:
        checker.add("data", f"larger than {MAX_OBSERVATION_DATA_BYTES} bytes (1 MiB) as JSON")
    provenance = raw.get("provenance") or {}
    checker.json_size(provenance, "provenance", MAX_PROVENANCE_BYTES)
    pii = raw.get("pii", False)
    if not isinstance(pii, bool):
        checker.add("pii", "must be true or false")
    pii_categories = raw.get("pii_categories") or []
    if not isinstance(pii_categories, list):
        checker.add("pii_categories", "must be a list of lower-case names")
        pii_categories = []
    check_pii_categories(checker, "pii_categories", pii_categories)
    assertions = raw.get("assertions") or []
    if len(assertions) > MAX_ASSERTIONS:
        checker.add("assertions", f"at most {MAX_ASSERTIONS} assertions, got {len(assertions)}")
        assertions = []

    entities: list[EntityInput] = []
    facts: list[FactInput] = []
    texts: list[TextInput] = []
    for index, assertion in enumerate(assertions):
        path = f"assertions[{index}]"
        if not isinstance(assertion, dict) or len(assertion) != 1:
            checker.add(path, "must hold exactly one of entity, fact, text")
            continue
        if "entity" in assertion:
            entity = assertion["entity"] or {}
            checker.storable(entity, f"{path}.entity")
            checker.text(entity.get("title"), f"{path}.entity.title", MAX_TITLE_CHARS)
            checker.json_size(
                entity.get("attributes") or {}, f"{path}.entity.attributes", MAX_ATTRIBUTES_BYTES
            )
            key = checker.entity_key(entity.get("key"), f"{path}.entity.key")
            node_type = checker.node_type(entity.get("type"), f"{path}.entity.type")
            if key is not None and (node_type or not entity.get("type")):
                implied = key.partition(":")[0] if ":" in key else "entity"
                entities.append(
                    EntityInput(
                        index=index,
                        key=key,
                        node_type=node_type or implied,
                        title=str(entity.get("title") or key),
                        attributes=dict(entity.get("attributes") or {}),
                    )
                )
        elif "fact" in assertion:
            fact_input = validate_fact_assertion(
                checker, assertion["fact"], f"{path}.fact", index=index, default_valid_from=occurred_at
            )
            if fact_input is not None:
                facts.append(fact_input)
        elif "text" in assertion:
            text = assertion["text"] or {}
            checker.storable(text, f"{path}.text")
            checker.text(text.get("title"), f"{path}.text.title", MAX_TITLE_CHARS)
            checker.text(text.get("heading"), f"{path}.text.heading", MAX_TITLE_CHARS)
            body = text.get("text", "")
            if not isinstance(body, str) or not body.strip():
                checker.add(f"{path}.text.text", "required, non-empty")
            elif len(body.encode("utf-8")) > MAX_OBSERVATION_CONTENT_BYTES:
                checker.add(f"{path}.text.text", f"larger than {MAX_OBSERVATION_CONTENT_BYTES} bytes (1 MiB)")
            else:
                texts.append(
                    TextInput(
                        index=index,
                        text=body,
                        title=str(text.get("title") or ""),
                        heading=str(text.get("heading") or ""),
                    )
                )
        else:
            checker.add(path, "must hold exactly one of entity, fact, text")

    if checker.violations or occurred_at is None:
        return None, checker.violations
    identity = external_id or content_identity(
        {
            "kind": kind,
            "occurred_at": canonical_instant(occurred_at),
            "actor": actor,
            "subject": subject,
            "content": content,
            "data": data,
            "assertions": _canonical_assertions(assertions),
        }
    )
    return (
        ObservationInput(
            observation_id=observation_id(namespace, system, stream, identity),
            namespace=namespace,
            system=system,
            stream=stream,
            external_id=external_id,
            kind=kind,
            occurred_at=occurred_at,
            actor=actor,
            subject=subject,
            scopes=scopes,
            content=content,
            data=data,
            provenance=dict(provenance),
            assertions=assertions,
            entities=entities,
            facts=facts,
            texts=texts,
            pii=pii is True,
            pii_categories=list(dict.fromkeys(pii_categories)),
        ),
        [],
    )
