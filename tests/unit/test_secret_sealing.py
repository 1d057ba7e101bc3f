"""`SecretSealer` (common/storage/change_feed/secret_sealing.py): webhook secrets sealed at rest."""

import pytest
from cryptography.fernet import Fernet

from common.kernel.errors import FailedPrecondition
from common.storage.change_feed.secret_sealing import SEALED_PREFIX
from common.storage.change_feed.secret_sealing import SecretSealer


def test_a_secret_is_sealed_and_opened_and_never_stored_as_it_is() -> None:
    sealer = SecretSealer(Fernet.generate_key().decode())
    stored = sealer.seal("whsec-abc")
    assert sealer.sealing and stored.startswith(SEALED_PREFIX) and "whsec-abc" not in stored
    assert sealer.open(stored) == "whsec-abc"
    assert sealer.seal("whsec-abc") != stored  # a fresh token each time


def test_a_new_key_in_front_still_opens_what_the_old_one_sealed() -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    stored_under_old = SecretSealer(old).seal("s1")
    rotated = SecretSealer(f"{new}, {old}")
    assert rotated.open(stored_under_old) == "s1"
    assert SecretSealer(new).open(rotated.seal("s2")) == "s2"  # the first key seals


def test_without_the_key_a_sealed_secret_is_refused_and_a_plain_one_passes() -> None:
    stored = SecretSealer(Fernet.generate_key().decode()).seal("s1")
    for sealer in (SecretSealer(""), SecretSealer(Fernet.generate_key().decode())):
        with pytest.raises(FailedPrecondition) as refused:
            sealer.open(stored)
        assert refused.value.reason == "WEBHOOK_SECRET_KEY_MISSING"
    keyless = SecretSealer("")
    assert not keyless.sealing and keyless.seal("plain") == "plain" and keyless.open("plain") == "plain"


def test_a_key_that_is_not_a_fernet_key_is_refused_at_once() -> None:
    with pytest.raises(ValueError):
        SecretSealer("not-a-key")
