"""Real mail: messages of CPython's own e-mail test data (Debian package libpython3.11-testsuite, PSF
licence), each retained as ``message/rfc822`` through the real service (a sandboxed conversion child, real
PostgreSQL). The subject, sender and date reach the converted text, the attachments are named, and a
forwarded message (``message/rfc822`` inside) comes out in full, not silently dropped.

.ci/run and ``make test-documents-data`` install the package when missing.
"""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from memory_service_grpc_client.memory.v1 import document_service_pb2
from memory_service_grpc_client.memory.v1 import document_service_pb2_grpc
from memory_service_grpc_client.memory.v1 import source_service_pb2
from memory_service_grpc_client.memory.v1 import source_service_pb2_grpc

DATA = Path("/usr/lib/python3.11/test/test_email/data")

# File -> what a reader of the raw message sees in it, read by hand from each file's headers and MIME
# parts (`grep -iE '^(Subject|From|Date|Content-Type|Content-Disposition):|filename=' msg_NN.txt` and the
# file itself). The date is written as the service writes it: RFC 5322 with a two-digit day.
MESSAGES: dict[str, dict[str, object]] = {
    # plain text, one part
    "msg_01.txt": {
        "subject": "This is a test message",
        "from": "bbb@ddd.com",
        "date": "Fri, 04 May 2001 14:05:44 -0400",
        "body": "Do you like this message?",
        "attachments": [],
    },
    # multipart/mixed: a text part and a GIF attachment
    "msg_07.txt": {
        "subject": "Here is your dingus fish",
        "from": "barry@digicool.com",
        "date": "Fri, 20 Apr 2001 19:35:02 -0400",
        "body": "This is the dingus fish.",
        "attachments": ["dingusfish.gif"],
    },
    # no Subject header; two JPEG attachments and a trailing text part without a file name
    "msg_22.txt": {
        "subject": "(no subject)",
        "from": "b@example.com",
        "date": "Tue, 16 Oct 2001 13:59:25 +0300",
        "body": "Text text text.",
        "attachments": ["wibble.JPG", "wibble2.JPG", "text/plain"],
    },
    # a RISC OS bitmap attachment (application/riscos)
    "msg_26.txt": {
        "subject": "IMAP file test",
        "from": "father.time@xcar.wooster.local",
        "date": "Sun, 12 May 2002 08:56:15 +0100",
        "body": "Simple email with attachment.",
        "attachments": ["clock.bmp"],
    },
    # an RFC 2231 charset parameter (charset*=ansi-x3.4-1968''us-ascii), a reply
    "msg_32.txt": {
        "subject": "Re: Limiting Perl CPU Utilization...",
        "from": "aperson@example.com",
        "date": "Tue, 26 Sep 2000 12:23:03 -0500",
        "body": "Some message.",
        "attachments": [],
    },
    # multipart/report: a bounce from a virus scanner, its delivery status and the bounced headers as
    # parts without file names
    "msg_43.txt": {
        "subject": "Banned file: auto__mail.python.bat in mail from you",
        "from": "MAILER DAEMON",
        "date": "Fri, 26 Nov 2004 19:41:44 -0800",
        "body": "BANNED FILENAME ALERT",
        "attachments": ["message/delivery-status", "text/rfc822-headers"],
    },
    # multipart/signed: the text and its PGP signature
    "msg_45.txt": {
        "subject": "test",
        "from": "foo@bar.baz",
        "date": None,
        "body": "This is the signed contents.",
        "attachments": ["signature.asc"],
    },
    # the whole message is a forward (Content-Type: message/rfc822) of one with subject "testing"
    "msg_06.txt": {
        "subject": "forwarded message from Barry A. Warsaw",
        "from": "barry@python.org",
        "date": "Thu, 13 Sep 2001 17:28:42 -0400",
        "body": None,
        "attachments": [],
        "enclosed": ["testing", "Thu, 13 Sep 2001 17:28:28 -0400"],
    },
    # a message enclosing another, whose body is the only text
    "msg_11.txt": {
        "subject": "The enclosing message",
        "from": None,
        "date": None,
        "body": None,
        "attachments": [],
        "enclosed": ["An enclosed message", "Here is the body of the message."],
    },
}


@pytest.fixture(scope="module")
def retained(ingest_channel: grpc.Channel, query_channel: grpc.Channel) -> dict[str, str]:
    """Each message retained as an .eml file; file name -> converted text (GetSource content)."""
    assert DATA.is_dir(), "install the Debian package libpython3.11-testsuite (make test-documents-data)"
    ingest = document_service_pb2_grpc.DocumentServiceStub(ingest_channel)
    source = source_service_pb2_grpc.SourceServiceStub(query_channel)
    namespace = "realmail-" + __import__("uuid").uuid4().hex[:10]
    out = {}
    for name in MESSAGES:
        key = f"doc:mail/{name.replace('.txt', '.eml')}"
        response = ingest.Retain(
            document_service_pb2.RetainRequest(
                namespace=namespace,
                natural_key=key,
                original=(DATA / name).read_bytes(),
                media_type="message/rfc822",
                source_path=f"mail/{name.replace('.txt', '.eml')}",
            ),
            timeout=120,
        )
        assert response.conversion.media_type == "message/rfc822"
        assert response.chunk_count >= 1
        out[name] = source.GetSource(
            source_service_pb2.GetSourceRequest(namespace=namespace, natural_key=key), timeout=30
        ).source.content
    return out


@pytest.mark.parametrize("name", list(MESSAGES))
def test_the_headers_body_and_attachments_reach_the_text(name: str, retained: dict[str, str]) -> None:
    text = retained[name]
    want = MESSAGES[name]
    assert text.startswith(f"## {want['subject']}\n"), text[:200]
    if want["from"]:
        assert any(line.startswith("From: ") and str(want["from"]) in line for line in text.splitlines())
    if want["date"]:
        assert f"Date: {want['date']}" in text
    if want["body"]:
        assert str(want["body"]) in text
    attachments = [line.rstrip() for line in text.splitlines() if line.startswith("Attachments: ")]
    if want["attachments"]:
        assert attachments == [f"Attachments: {', '.join(want['attachments'])}"]  # type: ignore[arg-type]
    else:
        assert attachments == []
    for enclosed in want.get("enclosed", []):  # type: ignore[attr-defined]
        assert str(enclosed) in text.split("Enclosed message:", 1)[1]
