"""A test certificate authority made by the tests (PyPI `cryptography`): server and client certificates, an
expired one, one from another CA, and an RFC 3820 proxy, as grid services and CMSWEB use them.

Everything is written under one folder: <name>.pem (certificate) and <name>.key (key, 0600); `ca_dir` is an
OpenSSL hashed CA directory (as X509_CERT_DIR) holding the test CA only.
"""
from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

PROXY_CERT_INFO = ObjectIdentifier("1.3.6.1.5.5.7.1.14")  # RFC 3820 proxyCertInfo
# ProxyCertInfo ::= SEQUENCE { pCPathLenConstraint absent, proxyPolicy SEQUENCE { id-ppl-inheritAll } }
PROXY_INHERIT_ALL = bytes.fromhex("300c300a06082b06010505071501")
DAY = datetime.timedelta(days=1)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "test"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "MSUnmerged tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


@dataclass
class Issued:
    cert: Path
    key: Path


class TestCA:
    """One CA; `issue` makes certificates signed by it."""

    __test__ = False  # not a pytest class

    def __init__(self, folder: Path, name: str = "MSUnmerged Test CA", rsa_keys: bool = False) -> None:
        """`rsa_keys`: RSA instead of EC keys throughout (xrootd's GSI protocol needs RSA)."""
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.rsa_keys = rsa_keys
        self.key = self.new_key()
        now = datetime.datetime.now(datetime.timezone.utc)
        self.name = _name(name)
        self.cert = (x509.CertificateBuilder().subject_name(self.name).issuer_name(self.name)
                     .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
                     .not_valid_before(now - DAY).not_valid_after(now + 30 * DAY)
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                                    critical=True)
                     .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
                     .sign(self.key, hashes.SHA256()))
        slug = name.replace(" ", "-").lower()
        self.ca_file = self.folder / f"{slug}.pem"
        self.ca_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.ca_dir = self.folder / f"{slug}-certificates"
        shutil.rmtree(self.ca_dir, ignore_errors=True)
        self.ca_dir.mkdir()
        shutil.copy(self.ca_file, self.ca_dir / "ca.pem")
        subprocess.run(["openssl", "rehash", str(self.ca_dir)], check=True, capture_output=True)

    def new_key(self) -> Any:
        return rsa.generate_private_key(65537, 2048) if self.rsa_keys else ec.generate_private_key(ec.SECP256R1())

    def issue(self, cn: str, server: bool = False, days: float = 10, expired: bool = False,
              out: Optional[str] = None) -> Issued:
        """A certificate for a server (SAN 127.0.0.1, localhost) or a client; `expired`: it ended yesterday."""
        key = self.new_key()
        now = datetime.datetime.now(datetime.timezone.utc)
        start, end = (now - 3 * DAY, now - DAY) if expired else (now - DAY, now + datetime.timedelta(days=days))
        builder = (x509.CertificateBuilder().subject_name(_name(cn)).issuer_name(self.name)
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start).not_valid_after(end)
                   .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                   .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server
                                                         else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
        if server:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return self._write(out or cn.replace(" ", "-"), cert, key)

    def proxy(self, user: Issued, hours: float = 12, out: str = "proxy") -> Path:
        """An RFC 3820 proxy of `user`, as voms-proxy-init writes it: proxy certificate, its key, the user's
        certificate, in one 0600 file."""
        user_cert = x509.load_pem_x509_certificate(user.cert.read_bytes())
        user_key = serialization.load_pem_private_key(user.key.read_bytes(), None)
        key = self.new_key()
        serial = x509.random_serial_number() >> 96
        subject = x509.Name(list(user_cert.subject) + [x509.NameAttribute(NameOID.COMMON_NAME, str(serial))])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(user_cert.subject)
                .public_key(key.public_key()).serial_number(serial)
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(hours=hours))
                .add_extension(x509.KeyUsage(True, False, True, False, False, False, False, False, False),
                               critical=True)
                .add_extension(x509.UnrecognizedExtension(PROXY_CERT_INFO, PROXY_INHERIT_ALL), critical=True)
                .sign(user_key, hashes.SHA256()))  # type: ignore[arg-type]
        path = self.folder / f"{out}.pem"
        _private(path, cert.public_bytes(serialization.Encoding.PEM) + _key_bytes(key) + user.cert.read_bytes())
        return path

    def _write(self, name: str, cert: x509.Certificate, key: Any) -> Issued:
        issued = Issued(self.folder / f"{name}.pem", self.folder / f"{name}.key")
        issued.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _private(issued.key, _key_bytes(key))
        return issued


def _key_bytes(key: Any) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
