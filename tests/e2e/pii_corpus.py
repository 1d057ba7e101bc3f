"""Synthetic Russian and English letters, tickets, CRM notes and a team with personal data (every number made
with its check digits, see ``tests/unit/test_pii.py``), written through the real ingest service, for
``test_pii.py`` and ``test_audit_listing.py``."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import knowledge_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2
from memory_service_grpc_client.memory.v1 import observation_service_pb2_grpc
from tests.e2e.query_service_data import put_chunks
from tests.e2e.query_service_data import retain
from tests.e2e.test_domain_packs import _observe

PHONE = "+7 (916) 123-45-67"


EMAIL = "olga.smirnova@example.ru"


INN_12 = "772415839270"


SNILS = "204-518-736 45"


CARD = "4276 3820 1945 7762"


PASSPORT = "45 10 123456"


EN_PHONE = "+44 20 7946 0958"


EN_EMAIL = "john.doe@acme-corp.co.uk"


FIO = "Смирнова Ольга Петровна"


SECRETS = (PHONE, EMAIL, INN_12, SNILS, CARD, PASSPORT, EN_PHONE, EN_EMAIL)


RU_LETTER = f"""# Заявление на возврат

Добрый день! Прошу оформить возврат по заказу ORD-2024-000123 от 30.11.2026 на сумму 1 299,00 ₽.
Паспорт {PASSPORT}, ИНН {INN_12}, СНИЛС {SNILS}. Деньги верните на карту {CARD}.
Связаться со мной можно по телефону {PHONE} или по почте {EMAIL}.
Версия приложения 2.36-9+deb12u4, обращение PROJ-1234.
"""


EN_TICKET = f"""# Support ticket SUP-4821

The customer called from {EN_PHONE} about a double charge of $12,345.67 (order ORD-2024-000124).
Reply to {EN_EMAIL}. Build 3b18e512dba79e4c8300dd08aeb37f8e728b8dad, host 192.168.100.200.
"""


CLIENT_CARD = f"""# Карточка клиента

Клиент: {FIO}. Адрес: г. Москва, ул. Ленина, д. 5, кв. 12. Предпочитает звонки после обеда.
"""


def observation(namespace: str, external_id: str, **fields: Any) -> knowledge_pb2.Observation:
    raw = {
        "namespace": namespace,
        "source": {"system": "crm", "stream": "calls", "external_id": external_id},
        "kind": "call-note",
        "occurred_at": "2026-11-01T10:00:00Z",
        "subject": {"type": "customer", "id": "c-1001"},
        **fields,
    }
    return json_format.ParseDict(raw, knowledge_pb2.Observation())


def write_corpus(channel: grpc.Channel, namespace: str) -> None:
    """Two documents with detectable data, one marked fio/address, a PutChunks ticket, and observations."""
    retain(channel, namespace, "doc:refund-letter", RU_LETTER, title="Заявление на возврат")
    card = {"title": f"Карточка клиента {FIO}", "pii": True, "pii_categories": ["fio", "address"]}
    retain(channel, namespace, "doc:client-card", CLIENT_CARD, **card)
    call = document_service_pb2.ChunkInput(chunk_order=0, heading="Call", text=EN_TICKET)
    put_chunks(channel, namespace, "ticket:SUP-4821", call, title="Support ticket SUP-4821")
    observations = observation_service_pb2_grpc.ObservationServiceStub(channel)
    response = observations.RecordObservations(
        observation_service_pb2.RecordObservationsRequest(
            observations=[
                observation(
                    namespace,
                    "call-1",
                    content=f"Клиентка перезвонила с номера {PHONE}, просит чек на {EMAIL}.",
                    data={"callback": PHONE, "order": "ORD-2024-000123", EMAIL: "receipt address"},
                    assertions=[
                        {
                            "fact": {
                                "subject": "customer:c-1001",
                                "predicate": "HAS_CONTACT",
                                "object": f"email:{EMAIL}",
                                "attributes": {"phone": PHONE, "order": "ORD-2024-000123", EN_EMAIL: "cc"},
                            }
                        },
                        {"text": {"text": f"Запасной телефон {EN_PHONE}", "title": "Контакты"}},
                    ],
                ),
                observation(
                    namespace,
                    "call-2",
                    content=f"Звонила {FIO}, просила перенести доставку.",
                    pii=True,
                    pii_categories=["fio"],
                ),
            ]
        ),
        timeout=120,
    )
    assert [r.status for r in response.results] == ["processed", "processed"], response


def write_team(channel: grpc.Channel, namespace: str) -> None:
    """A team, a member whose entity attributes hold an e-mail and a phone, and a member whose node was
    written with an explicit fio mark, under the delivery pack."""
    document_service_pb2_grpc.DocumentServiceStub(channel).Retain(
        document_service_pb2.RetainRequest(
            namespace=namespace,
            natural_key="person:p-2002",
            type="person",
            title=FIO,
            content=f"{FIO}, инженер дежурной смены.",
            pii_categories=["fio"],
        ),
        timeout=120,
    )
    results = _observe(
        channel,
        [
            {
                "namespace": namespace,
                "source": {"system": "hr", "stream": "org", "external_id": "org-1"},
                "kind": "org.snapshot",
                "occurred_at": "2026-11-01T00:00:00Z",
                "assertions": [
                    {"entity": {"key": "team:core", "title": "Core team"}},
                    {
                        "entity": {
                            "key": "person:alice",
                            "title": "Alice W.",
                            "attributes": {"email": EN_EMAIL, "phone": EN_PHONE, "role": "on-call"},
                        }
                    },
                    {"fact": {"subject": "person:alice", "predicate": "MEMBER_OF", "object": "team:core"}},
                    {"fact": {"subject": "person:p-2002", "predicate": "MEMBER_OF", "object": "team:core"}},
                ],
            }
        ],
    )
    assert [r.status for r in results] == ["processed"], [r.error for r in results]
