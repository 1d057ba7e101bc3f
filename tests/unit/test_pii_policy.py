"""Personal data marks on write and the output policy (`common.kernel.pii.PiiMarks`, `query_service.pii_output`).

Pure: no database. The end-to-end behaviour over gRPC is in ``tests/e2e/test_pii.py``.
"""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest

from common.auth.principals import Principal
from common.auth.principals import development_principal
from common.kernel.config import Settings
from common.kernel.errors import InvalidArgument
from common.kernel.pii import PiiMarks
from common.storage.chunks.rows import StoredChunk
from common.storage.fact_rows import FactRow
from ingest_service.documents.validation import ChunkInput
from ingest_service.documents.validation import PutChunksInput
from ingest_service.documents.validation import RetainInput
from ingest_service.documents.validation import validate_put_chunks
from ingest_service.documents.validation import validate_retain
from ingest_service.observations.validation import validate_observation
from query_service.pii_output import NO_PII_POLICY
from query_service.pii_output import PiiDisclosure
from query_service.pii_output import PiiPolicy
from query_service.pii_output import withheld_text
from query_service.provenance import Provenance
from query_service.readers.facts import disclose_fact
from query_service.retrieval.hybrid_search import SearchHit
from query_service.retrieval.hybrid_search import disclose_chunk
from query_service.retrieval.hybrid_search import disclose_hit

PHONE = "+7 916 123-45-67"
EMAIL = "anna.k@example.org"
MASKING = PiiPolicy(protection=True, clearance=False, principal="reader", method="/m")
CLEARED = PiiPolicy(protection=True, clearance=True, principal="officer", method="/m")
OFF = PiiPolicy(protection=False, clearance=False)


# -- marks on write --------------------------------------------------------------------------------


def test_marks_with_protection_join_explicit_and_detected() -> None:
    marks = PiiMarks.of(
        pii=False,
        categories=["fio"],
        values=[f"Звоните {PHONE}", {"contact": {"email": EMAIL}}, ["ORD-2024-000123"]],
        protection=True,
    )
    assert marks == PiiMarks(pii=True, categories=("email", "fio", "phone"))
    assert marks.as_props() == {"pii": True, "pii_categories": ["email", "fio", "phone"]}
    assert (
        PiiMarks.of(pii=False, categories=[], values=["версия 2.36-9+deb12u4"], protection=True) == PiiMarks()
    )


def test_marks_without_protection_are_stored_as_given() -> None:
    assert PiiMarks.of(pii=False, categories=["fio", "fio"], values=[PHONE], protection=False) == PiiMarks(
        pii=False, categories=("fio",)
    )
    assert PiiMarks.of(pii=True, categories=[], values=[PHONE], protection=False) == PiiMarks(pii=True)


def test_undetectable_categories_decide_withholding() -> None:
    assert PiiMarks(pii=True, categories=("email", "phone")).undetectable == ()
    assert PiiMarks(pii=True, categories=("address", "fio", "phone")).undetectable == ("address", "fio")
    assert PiiMarks(pii=True).undetectable == ("pii",)  # marked without a category
    assert PiiMarks().undetectable == ()
    assert PiiMarks.from_props({"pii": "yes", "pii_categories": "fio"}) == PiiMarks()  # malformed: none
    assert PiiMarks(True, ("fio",)).union(PiiMarks(False, ("email",))) == PiiMarks(True, ("email", "fio"))


def test_explicit_categories_are_validated_on_every_write_path() -> None:
    with pytest.raises(InvalidArgument) as raised:
        validate_retain(
            RetainInput(
                namespace="ns",
                natural_key="doc:a",
                content="x",
                pii_categories=("FIO", "ok"),
                meta={"pii": 1},
            )
        )
    assert {v.field for v in raised.value.violations} == {"pii_categories[0]", "meta.pii"}
    with pytest.raises(InvalidArgument) as raised:
        validate_put_chunks(
            PutChunksInput(
                namespace="ns",
                natural_key="doc:a",
                chunks=(ChunkInput(0, "", "text", meta={"pii_categories": ["fio"]}),),
                pii_categories=tuple(f"c{i}" for i in range(21)),
            )
        )
    assert {v.field for v in raised.value.violations} == {"pii_categories", "chunks[0].meta.pii_categories"}
    base = {
        "namespace": "ns",
        "source": {"system": "crm", "stream": "calls"},
        "kind": "note",
        "occurred_at": "2026-11-01T10:00:00Z",
        "content": "hello",
    }
    item, violations = validate_observation(
        {**base, "pii": True, "pii_categories": ["fio"]}, "observations[0]"
    )
    assert item is not None and not violations and item.pii and item.pii_categories == ["fio"]
    item, violations = validate_observation({**base, "pii_categories": ["Фамилия"]}, "observations[0]")
    assert item is None and [v.field for v in violations] == ["observations[0].pii_categories[0]"]
    plain, _ = validate_observation(base, "observations[0]")
    marked, _ = validate_observation({**base, "pii": True}, "observations[0]")
    assert plain is not None and marked is not None
    assert plain.observation_id == marked.observation_id  # marks are not part of the identity


# -- policy ----------------------------------------------------------------------------------------


def test_policy_for_caller() -> None:
    on, off = Settings(pii_protection=True), Settings(pii_protection=False)
    officer = Principal(name="officer", pii_clearance=True)
    reader = Principal(name="reader")
    assert (
        PiiPolicy.for_caller(officer, on, "/m").audits and not PiiPolicy.for_caller(officer, on, "/m").masks
    )
    assert PiiPolicy.for_caller(reader, on, "/m").masks
    assert PiiPolicy.for_caller(development_principal(), on, "/m").masks  # development mode has no clearance
    assert PiiPolicy.for_caller(None, on, "/m").masks
    assert (
        not PiiPolicy.for_caller(reader, off, "/m").masks
        and not PiiPolicy.for_caller(officer, off, "/m").audits
    )
    assert not NO_PII_POLICY.masks and not NO_PII_POLICY.audits


# -- disclosure ------------------------------------------------------------------------------------


def _chunk(text: str, **meta: object) -> StoredChunk:
    return StoredChunk(
        node_key="doc:card",
        chunk_order=0,
        node_type="document",
        source_path="crm/cards/c-1001.md",
        title="Карточка клиента",
        heading="Контакты",
        text=text,
        meta={"observation_id": "obs-1", **meta},
    )


def test_masking_caller_gets_masked_or_withheld_chunks() -> None:
    text = f"Телефон {PHONE}, почта {EMAIL}, заказ ORD-2024-000123"
    shown = disclose_chunk(PiiDisclosure(MASKING), _chunk(text))
    assert shown.text == "Телефон [phone], почта [email], заказ ORD-2024-000123"
    assert shown.title == "Карточка клиента" and shown.heading == "Контакты"
    withheld = disclose_chunk(PiiDisclosure(MASKING), _chunk("Иванов Иван", pii=True, pii_categories=["fio"]))
    assert withheld.text == withheld.title == withheld.heading == "[withheld: fio]"
    assert withheld.node_key == "doc:card"  # keys stay addressable
    assert withheld_text(PiiMarks(pii=True)) == "[withheld: pii]"


def test_off_and_cleared_callers_get_unmasked_output_and_cleared_ones_are_noted() -> None:
    text = f"Телефон {PHONE}"
    assert disclose_chunk(PiiDisclosure(OFF), _chunk(text)).text == text
    cleared = PiiDisclosure(CLEARED)
    assert disclose_chunk(cleared, _chunk(text)).text == text
    assert (
        disclose_chunk(cleared, _chunk("Иванов Иван", pii=True, pii_categories=["fio"])).text == "Иванов Иван"
    )
    disclose_chunk(cleared, _chunk("нет данных"))
    assert cleared.categories == {"phone", "fio"}
    assert cleared.natural_keys == ["doc:card"] and cleared.observation_ids == ["obs-1"]
    nothing = PiiDisclosure(CLEARED)
    disclose_chunk(nothing, _chunk("версия 2.36-9+deb12u4, 30.11.2026"))
    assert not nothing.categories and not nothing.natural_keys


def test_hits_and_facts_are_masked_everywhere_they_carry_text() -> None:
    hit = SearchHit(
        chunk=_chunk(f"mail {EMAIL}"),
        score=0.5,
        vector_score=0.4,
        text_score=0.1,
        trigram_score=0.0,
        ranks={"vector": 1},
        provenance=Provenance(
            node_key="doc:card",
            source_path="crm",
            chunk_order=0,
            metadata={"author": f"Anna <{EMAIL}>"},
            citation=f"{EMAIL}.pdf, p. 2",
        ),
    )
    shown = disclose_hit(PiiDisclosure(MASKING), hit)
    assert shown.chunk.text == "mail [email]" and shown.provenance.metadata == {"author": "Anna <[email]>"}
    assert EMAIL not in shown.provenance.citation  # a file named after a person is masked too
    assert shown.score == hit.score and shown.ranks == hit.ranks
    now = datetime(2026, 11, 1, tzinfo=UTC)
    row = FactRow(
        fact_id="fact-" + "0" * 24,
        namespace="ns",
        subject_key="customer:c-1001",
        predicate="HAS_CONTACT",
        object_key=f"email:{EMAIL}",
        valid_from=now,
        valid_to=None,
        observed_at=now,
        evidence="asserted",
        confidence=1.0,
        attributes={"phone": PHONE, "order": "ORD-2024-000123"},
    )
    fact = disclose_fact(PiiDisclosure(MASKING), row)
    assert fact.object_key == "email:[email]" and fact.subject_key == "customer:c-1001"
    assert fact.attributes == {"phone": "[phone]", "order": "ORD-2024-000123"}
    assert fact.fact_id == row.fact_id and row.object_key == f"email:{EMAIL}"
