"""Certificates made for a test (the ``cryptography`` package): a CA, a server certificate for
127.0.0.1 and localhost signed by it, client certificates, and a web config file that names
them, written as gpumon's files must be (owned by the user, writable by no one else)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: bcrypt's cheapest cost: the tests check behaviour, not bcrypt's speed.
TEST_COST = 4


@dataclass(frozen=True)
class Pair:
    """A PEM certificate and its (unencrypted) key, on disk."""

    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.NoEncryption()
        if password is None
        else serialization.BestAvailableEncryption(password)
    )
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
    )


class Authority:
    """A CA that signs server and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str = "gpumon test CA") -> None:
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        slug = name.replace(" ", "-")
        self.cert = _write(
            directory / f"{slug}.pem", self.certificate.public_bytes(serialization.Encoding.PEM)
        )

    def issue(
        self,
        name: str,
        *,
        server: bool,
        password: bytes | None = None,
        valid_from: datetime.timedelta = datetime.timedelta(minutes=-5),
    ) -> Pair:
        """A certificate valid from ``valid_from`` (from now) for about a day."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc) + valid_from
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        return Pair(
            _write(
                self.directory / f"{name}.crt", certificate.public_bytes(serialization.Encoding.PEM)
            ),
            _write(self.directory / f"{name}.key", _key_pem(key, password)),
        )


def write_config(directory: Path, text: str, name: str = "web.yml") -> Path:
    """A web config file as gpumon accepts one (mode 0600)."""
    return _write(directory / name, text.encode())
