"""A PostgreSQL of its own that serves TLS, for the tests of `db_sslmode: verify-full` with
`db_ca_cert`: a CA and a server certificate for `localhost` (not for 127.0.0.1, the same
server by another name) made here, and a second CA that signed nothing (the wrong one). The lab's own code makes its cluster, role, password and
tables (lab/postgres.py), on a free loopback port in a directory of its own: the shared
lab's server, which other tests and engineers use, is never reconfigured or restarted.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lab import labctl
from lab.postgres import clone_database, drop_database, ensure_databases, init_postgres_cluster
from tests.integration.ports import free_port

# The name the clients connect to, as a site's config names its database host.
SERVER_NAME = "localhost"
VALIDITY = datetime.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class CertificateAuthority:
    name: str
    key: ec.EllipticCurvePrivateKey
    certificate: x509.Certificate

    @classmethod
    def create(cls, name: str) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        certificate = (
            _builder(subject, subject, key.public_key())
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
            .sign(key, hashes.SHA256())
        )
        return cls(name, key, certificate)

    def issue_server_certificate(self, host: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        """A server certificate naming `host` alone in its subjectAltName: not its address."""
        key = ec.generate_private_key(ec.SECP256R1())
        certificate = (
            _builder(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]), self.certificate.subject, key.public_key()
            )
            .add_extension(
                x509.SubjectAlternativeName([x509.DNSName(host)]),
                critical=False,
            )
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        return key, certificate

    def write_certificate(self, path: Path) -> Path:
        path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        return path


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    # A minute back: the server's clock and this one are the same, but not to the second.
    now = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=1)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
    )


@dataclasses.dataclass(frozen=True)
class TlsPostgres:
    """The server's lab settings (port, role, password, template database), the CA file that
    verifies it and one that does not."""

    settings: labctl.LabSettings
    ca_cert: Path
    wrong_ca_cert: Path

    @contextlib.contextmanager
    def database(self, name: str) -> Iterator[str]:
        """A clone of the template, dropped afterwards."""
        clone_database(self.settings, name)
        try:
            yield name
        finally:
            drop_database(self.settings, name)


@contextlib.contextmanager
def tls_postgres() -> Iterator[TlsPostgres]:
    lab_dir = Path(tempfile.mkdtemp(prefix="arvlab-tls-", dir="/tmp"))
    lab_dir.chmod(0o755)
    settings = labctl.lab_settings(environ={"LAB_DIR": str(lab_dir), "LAB_PG_PORT": str(free_port())})
    record = None
    try:
        labctl.prepare_directories(settings)
        init_postgres_cluster(settings)
        site_ca = CertificateAuthority.create("arvados-ops test site CA")
        _serve_tls(settings, site_ca)
        record = labctl.start_postgres(settings)
        ensure_databases(settings)
        yield TlsPostgres(
            settings,
            ca_cert=site_ca.write_certificate(lab_dir / "site-ca.crt"),
            wrong_ca_cert=CertificateAuthority.create("arvados-ops test other CA").write_certificate(
                lab_dir / "other-ca.crt"
            ),
        )
    finally:
        if record is not None:
            labctl.stop_postgres(settings, record)
        shutil.rmtree(settings.socket_dir, ignore_errors=True)
        shutil.rmtree(lab_dir, ignore_errors=True)


def _serve_tls(settings: labctl.LabSettings, ca: CertificateAuthority) -> None:
    """The server's key and certificate beside its data, and ssl on in its postgresql.conf."""
    key, certificate = ca.issue_server_certificate(SERVER_NAME)
    key_file, cert_file = settings.pg_dir / "server.key", settings.pg_dir / "server.crt"
    # PostgreSQL refuses a key that others may read; it runs as postgres.
    postgres = pwd.getpwnam("postgres")
    for path, content, mode in (
        (
            key_file,
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
            0o600,
        ),
        (cert_file, certificate.public_bytes(serialization.Encoding.PEM), 0o644),
    ):
        path.write_bytes(content)
        os.chown(path, postgres.pw_uid, postgres.pw_gid)
        path.chmod(mode)
    with open(settings.pg_data / "postgresql.conf", "a", encoding="utf-8") as conf:
        conf.write(f"ssl = on\nssl_cert_file = '{cert_file}'\nssl_key_file = '{key_file}'\n")
