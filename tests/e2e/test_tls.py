"""TLS and mutual TLS on the real query service over real channels.

A CA, a server certificate (``localhost`` / ``127.0.0.1``) and client certificates are generated in a
temporary folder with `cryptography`; the server gets them through the ``CB_TLS_*`` settings and the
client through `ClientSecurity` (what the CLI builds from the same variables).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from common.grpc.security import ServerSetupError
from common.grpc.server import ServiceHost
from common.kernel.config import Settings
from memory_service_grpc_client import ClientSecurity
from memory_service_grpc_client import health_status
from memory_service_grpc_client import make_channel
from memory_service_grpc_client import wait_for_serving
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2
from memory_service_grpc_client.memory.v1 import fact_query_service_pb2_grpc
from memory_service_tools.cli import app
from query_service.main import create_query_host

pytestmark = pytest.mark.e2e


# --------------------------------------------------------------------------------------------------
# Certificates


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


class CertificateAuthority:
    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self.name = _name(name)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = folder / f"{name}.pem"
        self.cert_path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(self, name: str, *, server: bool) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if server:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
        certificate = builder.sign(self.key, hashes.SHA256())
        issued = Issued(cert=self.folder / f"{name}.crt", key=self.folder / f"{name}.key")
        issued.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        _write_key(key, issued.key)
        return issued


@dataclass(frozen=True)
class Pki:
    ca: CertificateAuthority
    server: Issued
    client: Issued
    rogue_ca: CertificateAuthority
    rogue_client: Issued


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    folder = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(folder, "test-ca")
    rogue = CertificateAuthority(folder, "rogue-ca")
    return Pki(
        ca=ca,
        server=ca.issue("server", server=True),
        client=ca.issue("client", server=False),
        rogue_ca=rogue,
        rogue_client=rogue.issue("rogue-client", server=False),
    )


# --------------------------------------------------------------------------------------------------
# Servers


def _start(settings: Settings, **tls: str) -> ServiceHost:
    host = create_query_host(settings.model_copy(update=tls), "127.0.0.1:0", metrics_port=0)
    host.start()
    return host


@pytest.fixture(scope="module")
def tls_host(settings: Settings, pki: Pki) -> Iterator[ServiceHost]:
    host = _start(settings, tls_cert_file=str(pki.server.cert), tls_key_file=str(pki.server.key))
    yield host
    host.stop(5)


@pytest.fixture(scope="module")
def mtls_host(settings: Settings, pki: Pki) -> Iterator[ServiceHost]:
    host = _start(
        settings,
        tls_cert_file=str(pki.server.cert),
        tls_key_file=str(pki.server.key),
        tls_client_ca_file=str(pki.ca.cert_path),
    )
    yield host
    host.stop(5)


def _list_facts(channel: grpc.Channel, namespace: str) -> fact_query_service_pb2.ListFactsResponse:
    stub = fact_query_service_pb2_grpc.FactQueryServiceStub(channel)
    return stub.ListFacts(
        fact_query_service_pb2.ListFactsRequest(namespace=namespace, subject="package:openssl"), timeout=30
    )


def _fails(address: str, security: ClientSecurity | None, namespace: str) -> grpc.StatusCode:
    with make_channel(address, security=security) as channel:
        with pytest.raises(grpc.RpcError) as raised:
            _list_facts(channel, namespace)
        assert health_status(channel, timeout=5) == "UNREACHABLE"
    return raised.value.code()


# --------------------------------------------------------------------------------------------------
# Tests


def test_tls_plain_client_fails_tls_client_works(tls_host: ServiceHost, pki: Pki, namespace: str) -> None:
    assert tls_host.tls
    address = f"127.0.0.1:{tls_host.port}"
    trusted = ClientSecurity(ca_file=str(pki.ca.cert_path))
    assert wait_for_serving(address, timeout=60, security=trusted)
    with make_channel(address, security=trusted) as channel:
        assert list(_list_facts(channel, namespace).facts) == []
    with make_channel(f"localhost:{tls_host.port}", security=trusted) as channel:  # the DNS name of the cert
        assert list(_list_facts(channel, namespace).facts) == []
    assert _fails(address, None, namespace) == grpc.StatusCode.UNAVAILABLE  # plaintext client
    # A client that trusts another CA refuses the server's certificate.
    assert _fails(address, ClientSecurity(ca_file=str(pki.rogue_ca.cert_path)), namespace) == (
        grpc.StatusCode.UNAVAILABLE
    )


def test_mtls_requires_a_client_certificate_from_the_ca(
    mtls_host: ServiceHost, pki: Pki, namespace: str
) -> None:
    address = f"127.0.0.1:{mtls_host.port}"
    with_cert = ClientSecurity(
        ca_file=str(pki.ca.cert_path), cert_file=str(pki.client.cert), key_file=str(pki.client.key)
    )
    assert wait_for_serving(address, timeout=60, security=with_cert)
    with make_channel(address, security=with_cert) as channel:
        assert list(_list_facts(channel, namespace).facts) == []
    assert (
        _fails(address, ClientSecurity(ca_file=str(pki.ca.cert_path)), namespace)
        == grpc.StatusCode.UNAVAILABLE
    )
    rogue = ClientSecurity(
        ca_file=str(pki.ca.cert_path),
        cert_file=str(pki.rogue_client.cert),
        key_file=str(pki.rogue_client.key),
    )
    assert _fails(address, rogue, namespace) == grpc.StatusCode.UNAVAILABLE
    assert _fails(address, None, namespace) == grpc.StatusCode.UNAVAILABLE


def test_cli_uses_the_tls_settings(mtls_host: ServiceHost, pki: Pki, namespace: str) -> None:
    runner = CliRunner()
    args = [
        "--query-addr",
        f"127.0.0.1:{mtls_host.port}",
        "facts",
        "-n",
        namespace,
        "--subject",
        "x:y",
        "--json",
    ]
    env = {
        "CB_TLS_CA_FILE": str(pki.ca.cert_path),
        "CB_TLS_CLIENT_CERT_FILE": str(pki.client.cert),
        "CB_TLS_CLIENT_KEY_FILE": str(pki.client.key),
    }
    ok = runner.invoke(app, args, env=env)
    # The call went through over mTLS: the server answered that this (fresh) namespace holds nothing
    # (exit 3, docs/how-to/first-steps-cli.md), with the empty JSON answer on stdout.
    assert ok.exit_code == 3 and "holds nothing you can see" in ok.output, ok.output
    refused = runner.invoke(
        app, args, env={**env, "CB_TLS_CLIENT_CERT_FILE": "", "CB_TLS_CLIENT_KEY_FILE": ""}
    )
    assert refused.exit_code == 1 and "UNAVAILABLE" in refused.output
    missing = runner.invoke(app, args, env={**env, "CB_TLS_CA_FILE": str(pki.ca.folder / "none.pem")})
    assert missing.exit_code == 1 and "CB_TLS_CA_FILE" in missing.output


def test_tls_misconfiguration_refuses_to_start(settings: Settings, pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ServerSetupError, match="both CB_TLS_CERT_FILE and CB_TLS_KEY_FILE"):
        _start(settings, tls_cert_file=str(pki.server.cert))
    with pytest.raises(ServerSetupError, match="CB_TLS_CLIENT_CA_FILE needs"):
        _start(settings, tls_client_ca_file=str(pki.ca.cert_path))
    with pytest.raises(ServerSetupError, match="CB_TLS_KEY_FILE=.*cannot be read"):
        _start(settings, tls_cert_file=str(pki.server.cert), tls_key_file=str(tmp_path / "missing.key"))
