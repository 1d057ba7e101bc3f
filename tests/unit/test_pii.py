"""Detection and masking of personal data (`common.kernel.pii`; docs/how-to/personal-data.md).

Every number below is synthetic: INN, SNILS and card numbers were made with their check digits (the
invalid twins differ in the last digit), phones use unassigned or fictional subscriber numbers.
"""

from __future__ import annotations

import pytest

from common.kernel import pii

INN_10 = "5403219877"  # organisation, valid check digit
INN_10_BAD = "5403219870"
INN_12 = "772415839270"  # individual, two valid check digits
INN_12_BAD = "772415839271"
SNILS = "204-518-736 45"
SNILS_ZERO_CHECK = "157-834-290 00"  # checksum 100/101 -> 00
SNILS_BAD = "204-518-736 46"
CARD_VISA = "4276 3820 1945 7762"
CARD_MIR = "2200154839201745"
CARD_MASTERCARD = "5536-9104-8273-6156"
CARD_BAD = "4276 3820 1945 7761"  # Luhn fails


def categories(text: str) -> list[str]:
    return pii.detect(text)


# -- positives in realistic text -------------------------------------------------------------------

RU_LETTER = f"""Добрый день, Ольга!

Прошу оформить возврат по заказу ORD-2024-000123 от 30.11.2026. Мои данные для заявления:
паспорт 45 10 123456, выдан ОВД района Хамовники; ИНН {INN_12}; СНИЛС {SNILS}.
Деньги верните, пожалуйста, на карту {CARD_VISA}. Связаться со мной можно по телефону
+7 (916) 123-45-67 или написать на olga.smirnova@example.ru.

С уважением, Ольга Смирнова
"""

EN_TICKET = f"""Ticket SUP-4821 (priority: high)
Customer called from +44 20 7946 0958 about a double charge of $12,345.67 on card {CARD_MASTERCARD}.
Reply to john.doe@acme-corp.co.uk. The customer's Russian entity is registered with INN {INN_10},
the director's SNILS is {SNILS_ZERO_CHECK} and passport series 4510 number 654321.
"""

CRM_NOTE = f"""CRM, сделка 2026-11-30T12:34:56Z: контакт ООО «Ромашка», ИНН {INN_10}.
Моб.: 8 916 765-43-21, доп. 8 (495) 123-45-67; e-mail закупки: zakupki@romashka.рф.
Оплата картой Мир {CARD_MIR}, сумма 1 299,00 ₽.
"""


def test_russian_letter_finds_every_category() -> None:
    assert categories(RU_LETTER) == ["card", "email", "inn", "passport_rf", "phone", "snils"]
    masked = pii.mask(RU_LETTER)
    for secret in (
        "45 10 123456",
        INN_12,
        SNILS,
        CARD_VISA,
        "+7 (916) 123-45-67",
        "olga.smirnova@example.ru",
    ):
        assert secret not in masked
    assert "паспорт [passport_rf]" in masked and "телефону\n[phone]" in masked
    # What is not personal data stays: the order number, the date, the name (explicit marks only).
    assert "ORD-2024-000123" in masked and "30.11.2026" in masked and "Ольга Смирнова" in masked


def test_english_ticket_finds_every_category() -> None:
    assert categories(EN_TICKET) == ["card", "email", "inn", "passport_rf", "phone", "snils"]
    masked = pii.mask(EN_TICKET)
    assert "Customer called from [phone] about a double charge of $12,345.67 on card [card]." in masked
    assert "Reply to [email]." in masked
    assert "INN [inn]" in masked and "SNILS is [snils]" in masked and "series [passport_rf]" in masked
    assert "SUP-4821" in masked


def test_crm_note_phones_email_with_cyrillic_domain_and_mir_card() -> None:
    found = pii.find(CRM_NOTE)
    assert [(m.category, m.value) for m in found] == [
        ("inn", INN_10),
        ("phone", "8 916 765-43-21"),
        ("phone", "8 (495) 123-45-67"),
        ("email", "zakupki@romashka.рф"),
        ("card", CARD_MIR),
    ]
    assert "2026-11-30T12:34:56Z" in pii.mask(CRM_NOTE) and "1 299,00 ₽" in pii.mask(CRM_NOTE)


@pytest.mark.parametrize("category", sorted(pii.DETECTABLE))
def test_every_category_in_russian_and_english_context(category: str) -> None:
    samples = {
        "phone": ("Позвоните мне: +7 916 123-45-67.", "Call me at +1 415-555-2671 tomorrow."),
        "email": (
            "Пишите на ivan.petrov@example.ru, отвечу.",
            "Write to jane_roe+billing@example.com today.",
        ),
        "passport_rf": ("Паспорт: серия 4510 № 123456.", "Passport no. 4510 123456 was scanned."),
        "snils": (f"СНИЛС сотрудника {SNILS}.", f"Employee insurance number (SNILS): {SNILS}."),
        "card": (f"Номер карты {CARD_VISA}, срок 12/27.", f"Card number {CARD_VISA}, expires 12/27."),
        "inn": (f"ИНН организации {INN_10}.", f"Taxpayer id (INN) {INN_10} of the supplier."),
    }
    russian, english = samples[category]
    assert categories(russian) == [category], russian
    assert categories(english) == [category], english
    assert pii.placeholder(category) in pii.mask(russian) and pii.placeholder(category) in pii.mask(english)


@pytest.mark.parametrize(
    "text",
    [
        "+7 (916) 123-45-67",
        "+7 916 123 45 67",
        "+79161234567",
        "8 916 123-45-67",
        "89161234567",
        "8 (812) 555-12-34",
        "916 123 45 67",
        "+44 20 7946 0958",
        "+1 (415) 555-2671",
        "+49 30 901820",
        "тел. 9161234567",
    ],
)
def test_phone_formats(text: str) -> None:
    assert categories(f"Контакт: {text}, после 18:00") == ["phone"]


# -- checksums decide ------------------------------------------------------------------------------


def test_checksums_decide_inn_snils_and_card() -> None:
    assert categories(f"ИНН {INN_10}") == ["inn"]
    assert categories(f"ИНН {INN_10_BAD}") == []
    assert categories(f"ИНН {INN_12}") == ["inn"] and categories(f"номер {INN_12}") == ["inn"]
    assert categories(f"ИНН {INN_12_BAD}") == []
    assert categories(f"СНИЛС {SNILS}") == ["snils"] and categories(f"СНИЛС {SNILS_BAD}") == []
    assert categories(f"card {CARD_VISA}") == ["card"] and categories(f"card {CARD_BAD}") == []


def test_snils_checksum_rule() -> None:
    assert pii.snils_is_valid("112-233-445 95") and pii.snils_is_valid(SNILS_ZERO_CHECK)
    assert not pii.snils_is_valid("112-233-445 96")
    assert not pii.snils_is_valid("001-001-998 00")  # below the range that has checksums
    assert pii.snils_is_valid("11223344595") and not pii.snils_is_valid("1122334459")


def test_bare_numbers_need_context() -> None:
    # One in ten 10-digit numbers passes the INN check digit: without "ИНН"/"INN" it is not an INN.
    assert categories(f"request id {INN_10}") == []
    assert categories("ref 4510 123456") == [] and categories("паспорт 4510 123456") == ["passport_rf"]


def test_unseparated_snils_is_found_anywhere() -> None:
    # A SNILS without separators is personal data wherever it stands; the checksum decides.
    assert categories("СНИЛС 20451873645") == ["snils"] and categories("id 20451873645") == ["snils"]
    assert categories("insured 204518736 45") == ["snils"]
    assert pii.mask("client 20451873645, ok") == "client [snils], ok"
    assert categories("id 20451873646") == []  # wrong check number
    assert categories("id 204518736451") == [] and categories("v20451873645") == []  # 12 digits, glued
    # Inside natural keys and paths (hostile-tenant finding): the key form type:id, a dash, a path.
    assert pii.mask("snils:20451873645") == "snils:[snils]"
    assert pii.mask("doc:pii-20451873645") == "doc:pii-[snils]"
    assert pii.mask("/home/u/20451873645.md") == "/home/u/[snils].md"


# -- false positives -------------------------------------------------------------------------------

NEGATIVES = [
    "libc6 2.36-9+deb12u4 and openssl 3.0.15-1~deb12u1",
    "apt 1:2.3.4-1ubuntu0.1, kernel 6.1.0-28-amd64, python3.11 3.11.2-6+deb12u5",
    "Срок: 2026-11-30, продлён до 30.11.2026 23:59; instant 2026-11-30T12:34:56.123456Z",
    "Цена 1 299,00 ₽, со скидкой 12 345 678 руб.; total $12,345.67 (USD 1,234,567.89)",
    "Заказ ORD-2024-000123 и счёт № 123456 по задаче PROJ-1234, INC0012345, RFC 9110",
    "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "sha1 3b18e512dba79e4c8300dd08aeb37f8e728b8dad, short 3b18e51 and 9425448945 (all-digit short hash)",
    "uuid 123e4567-e89b-12d3-a456-426614174000, obs-4d1f0c2a9b8e7d6c5b4a3f21",
    "hosts 192.168.100.200, 10.0.0.1:5432, 2001:db8::1 and 172.16.254.1/24",
    "epoch 1732960496, millis 1732960496123, build 20261130123456, crc 4150509955",
    "Buffer <ab 90 78 56 34 12>, float 773,200.4995493788",
    "port 55432, pid 123456, 2 cores, 16 GiB, v1.85.1",
]


@pytest.mark.parametrize("text", NEGATIVES)
def test_not_personal_data(text: str) -> None:
    assert pii.find(text) == []
    assert pii.mask(text) == text


def test_changelog_with_maintainer_masks_only_the_email() -> None:
    entry = (
        "openssl (3.0.15-1~deb12u1) bookworm-security; urgency=medium\n"
        "  * New upstream release, fixes CVE-2024-5535 (Closes: #1074487)\n"
        " -- Sebastian Andrzej Siewior <sebastian@breakpoint.example>  Sat, 30 Nov 2026 12:34:56 +0100"
    )
    masked = pii.mask(entry)
    assert "<[email]>" in masked
    assert masked.replace("<[email]>", "<sebastian@breakpoint.example>") == entry


# -- API -------------------------------------------------------------------------------------------


def test_mask_is_idempotent_and_keeps_other_text() -> None:
    once = pii.mask(RU_LETTER)
    assert pii.mask(once) == once
    assert pii.detect(once) == []


def test_mask_value_walks_json_like_values() -> None:
    value = {
        "customer": {"email": "anna@example.org", "phones": ["+7 916 123-45-67", "8 800 555-35-35"]},
        "order": "ORD-2024-000123",
        "total": 1299.0,
        "paid": True,
        "anna@example.org": None,
    }
    masked = pii.mask_value(value)
    assert masked == {
        "customer": {"email": "[email]", "phones": ["[phone]", "[phone]"]},
        "order": "ORD-2024-000123",
        "total": 1299.0,
        "paid": True,
        "[email]": None,  # keys are masked too
    }
    assert pii.detect_value(value) == ["email", "phone"]
    assert pii.detect_value({"anna@example.org": 1}) == ["email"]
    colliding = pii.mask_value({"anna@example.org": 1, "bob@example.org": 2, "[email]": 3})
    assert colliding == {"[email]": 1, "[email] #2": 2, "[email] #3": 3}  # no value is lost
    assert value["customer"]["email"] == "anna@example.org"  # the input is not changed


def test_empty_and_digitless_text() -> None:
    assert (
        pii.find("") == []
        and pii.mask("Иванов Иван Иванович, ул. Ленина") == "Иванов Иван Иванович, ул. Ленина"
    )


@pytest.mark.parametrize(
    ("text", "category", "masked"),
    [
        ("СНИЛС 204\u200b518\u200b736 45 в анкете", "snils", "СНИЛС [snils] в анкете"),
        ("snils 2045187\u200b3645", "snils", "snils [snils]"),
        ("тел. +7 916\u2060123-45-67", "phone", "тел. [phone]"),
        ("write to a\u00adnna@example.com", "email", "write to [email]"),
        ("card 4111 11\ufeff11 1111 1111", "card", "card [card]"),
    ],
)
def test_invisible_characters_inside_a_value_do_not_hide_it(text: str, category: str, masked: str) -> None:
    """Zero-width and other invisible format characters (Unicode Cf) render as nothing, so a value split
    by them is still found, and masking removes the whole original span, invisible characters included."""
    assert pii.detect(text) == [category]
    assert pii.mask(text) == masked
    assert pii.mask(pii.mask(text)) == masked


def test_invisible_characters_alone_change_nothing() -> None:
    text = "build 2.36-9+deb12u4\u200b of 2024-05-01"
    assert pii.find(text) == []
    assert pii.mask(text) == text
