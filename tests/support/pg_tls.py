"""A private PostgreSQL server on 127.0.0.1 with TLS, for the connection-conformance tests
(tests/test_pg_conformance.py): cafleet must accept or refuse a database URL exactly as
``psql`` (the system's libpq) does.

:func:`tls_server` starts one :class:`tests.support.postgres.Cluster` listening on
127.0.0.1 (a free port) with ``ssl=on``, and a small PKI made with ``openssl`` in a folder
of its own:

- ``ca.crt`` (its key stays in that folder), the test CA that signed ``server.crt``, the
  certificate the server presents: CN ``localhost``, SAN ``DNS:localhost`` and
  ``IP:127.0.0.1``, so ``verify-full`` accepts ``host=localhost`` and ``host=127.0.0.1``
  and refuses any other name (``host=wrong.invalid hostaddr=127.0.0.1``);
- ``other-ca.crt``, a CA that signed nothing the server has (a root certificate that
  does not match);
- ``empty.crl``, the CA's CRL revoking nothing, and ``revoked.crl``, the CA's CRL revoking
  ``server.crt``.

Logins, each with a database of its own name that it owns (where cafleet makes its
schema), all ahead of initdb's trust lines in ``pg_hba.conf`` (the Unix socket stays
``trust`` for the administrator):

======== ==================================================== ===============================
role     what it may do over 127.0.0.1                         password
======== ==================================================== ===============================
alice    TLS or not, SCRAM                                     :data:`PASSWORD`
tlsonly  TLS only (``hostnossl`` rejects), SCRAM               :data:`PASSWORD`
plain    without TLS only (``hostssl`` rejects), SCRAM         :data:`PASSWORD`
trusty   TLS only, ``trust`` (no password, no SCRAM at all)    none
ro       like alice; ``default_transaction_read_only = on``    :data:`PASSWORD`
fi       like alice                                            ``'ﬁle'`` (U+FB01 LIGATURE FI)
nbsp     like alice                                            ``'no\\u00a0break'`` (NBSP)
======== ==================================================== ===============================

The server stores a SCRAM secret of the SASLprep'd password (NFKC: ``ﬁle`` -> ``file``,
NO-BREAK SPACE -> SPACE), and libpq SASLpreps what it sends, so either spelling logs in.

``ro``'s database holds cafleet's schema, made before the role became read-only, so a
read-only session can still list fleets. The server is stopped (``pg_ctl -m immediate``)
and its folder removed when the context ends; the PKI folder is the caller's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from tests.support import postgres
from tests.support.environ import isolated_environ
from tests.support.sshd import free_port

PASSWORD = "Kq7-canary-s3cret"  # distinctive, so a leak in any output is found by a plain search
FI_PASSWORD = "\ufb01le"  # 'ﬁle': SASLprep (NFKC) makes it 'file'
NBSP_PASSWORD = "no\u00a0break"  # SASLprep maps NO-BREAK SPACE to SPACE: 'no break'
PSQL = "/usr/bin/psql"
ROLES = {
    "alice": PASSWORD,
    "tlsonly": PASSWORD,
    "plain": PASSWORD,
    "trusty": None,
    "ro": PASSWORD,
    "fi": FI_PASSWORD,
    "nbsp": NBSP_PASSWORD,
}
HBA = """\
hostssl   all trusty  127.0.0.1/32 trust
hostnossl all trusty  127.0.0.1/32 reject
hostnossl all tlsonly 127.0.0.1/32 reject
hostssl   all plain   127.0.0.1/32 reject
hostssl   all all     127.0.0.1/32 scram-sha-256
host      all all     127.0.0.1/32 scram-sha-256
"""
# Variables of libpq (and Kerberos) a run must not inherit from whoever runs the tests.
LIBPQ_PREFIXES = ("PG", "KRB5")

OPENSSL_CNF = """\
[ req ]
distinguished_name = dn
prompt = no
[ dn ]
CN = unused
[ ca_ext ]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[ server_ext ]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[ ca ]
default_ca = test_ca
[ test_ca ]
dir = {root}
database = $dir/index.txt
new_certs_dir = $dir
certificate = $dir/ca.crt
private_key = $dir/ca.key
serial = $dir/serial
crlnumber = $dir/crlnumber
default_md = sha256
default_crl_days = 30
policy = any
[ any ]
commonName = supplied
"""


def missing_reason() -> str | None:
    """Why the server cannot run here (a tool is missing), or None when it can."""
    reason = postgres.missing_reason()
    if reason:
        return reason
    if shutil.which("openssl") is None:
        return "openssl is not installed (Debian package openssl)"
    if not os.access(PSQL, os.X_OK):
        return f"{PSQL} is missing (Debian package postgresql-client)"
    return None


def _openssl(root: Path, *argv: str) -> None:
    subprocess.run(["openssl", *argv], cwd=root, check=True, capture_output=True, timeout=60)


def make_pki(root: Path) -> None:
    """The CA, the other CA, the server's key and certificate and the two CRLs, in ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    cnf = root / "openssl.cnf"
    cnf.write_text(OPENSSL_CNF.replace("{root}", str(root)), encoding="utf-8")
    (root / "index.txt").write_text("", encoding="utf-8")
    (root / "serial").write_text("1000\n", encoding="utf-8")
    (root / "crlnumber").write_text("1000\n", encoding="utf-8")
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    for name, subject in (("ca", "/CN=cafleet test CA"), ("other-ca", "/CN=cafleet other CA")):
        _openssl(
            root,
            "req",
            "-config",
            str(cnf),
            "-x509",
            *new_key,
            "-days",
            "3",
            "-subj",
            subject,
            "-extensions",
            "ca_ext",
            "-keyout",
            f"{name}.key",
            "-out",
            f"{name}.crt",
        )
    _openssl(
        root,
        "req",
        "-config",
        str(cnf),
        "-new",
        *new_key,
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    )
    _openssl(
        root,
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-set_serial",
        "0x2001",
        "-days",
        "3",
        "-extfile",
        str(cnf),
        "-extensions",
        "server_ext",
        "-out",
        "server.crt",
    )
    _openssl(root, "ca", "-config", str(cnf), "-batch", "-gencrl", "-out", "empty.crl")
    _openssl(root, "ca", "-config", str(cnf), "-batch", "-revoke", "server.crt")
    _openssl(root, "ca", "-config", str(cnf), "-batch", "-gencrl", "-out", "revoked.crl")


class TlsServer:
    """The running server: ``url(role, ...)`` names one of its databases over TCP."""

    def __init__(self, cluster: postgres.Cluster, port: int, pki: Path) -> None:
        self.cluster = cluster
        self.port = port
        self.pki = pki
        self.ca = pki / "ca.crt"
        self.other_ca = pki / "other-ca.crt"
        self.empty_crl = pki / "empty.crl"
        self.revoked_crl = pki / "revoked.crl"

    def url(self, role: str = "alice", password: str | None = None, dbname: str | None = None, **params: str) -> str:
        """``postgresql://role[:password]@127.0.0.1:PORT/dbname?params`` (each percent-encoded);
        ``password`` defaults to the role's, "" leaves it out; ``host``/``port`` in ``params``
        replace the authority's."""
        secret = ROLES.get(role) if password is None else password
        userinfo = quote(role, safe="") + (":" + quote(secret, safe="") if secret else "")
        host = params.pop("host", "127.0.0.1")
        port = params.pop("port", str(self.port))
        authority = f"{userinfo}@{quote(host, safe='')}:{port}" if host else f"{userinfo}@"
        query = "&".join(f"{quote(k, safe='%')}={quote(v, safe='/')}" for k, v in params.items())
        return f"postgresql://{authority}/{quote(dbname or role, safe='')}" + (f"?{query}" if query else "")

    def admin_url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@/{dbname}?host={self.cluster.socket_dir}&port={self.port}"

    def admin(self, sql: str, dbname: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.admin_url(dbname), autocommit=True) as conn:
            conn.execute(sql)


def client_environ(home: Path, **extra: str) -> dict[str, str]:
    """An environment for cafleet and psql alike: :func:`isolated_environ` in ``home``
    without any libpq or Kerberos variable of the caller's, no system service file
    (``PGSYSCONFDIR`` an empty folder) and no Kerberos credentials, then ``extra``."""
    environ = {k: v for k, v in isolated_environ(home).items() if not k.startswith(LIBPQ_PREFIXES)}
    sysconf = home / "pgsysconf"
    sysconf.mkdir(exist_ok=True)
    environ.update(PGSYSCONFDIR=str(sysconf), KRB5CCNAME=f"FILE:{home / 'krb5cc-none'}", KRB5_CONFIG=os.devnull)
    environ.update(extra)
    return environ


def _make_schema(server: TlsServer, role: str, home: Path) -> None:
    """Run ``cafleet fleet list`` once as ``role``, so its database holds cafleet's schema."""
    environ = client_environ(home, CAFLEET_DATABASE_URL=server.url(role, sslmode="require"))
    done = subprocess.run(
        [sys.executable, "-m", "cafleet", "fleet", "list"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, f"cafleet could not make its schema as {role}: {done.stderr}"


@contextmanager
def tls_server(pki: Path) -> Iterator[TlsServer]:
    """Start the server (the module's text says what it has); stop it on exit."""
    make_pki(pki)
    cluster = postgres.Cluster()
    try:
        cluster.start()
        for name in ("server.crt", "server.key"):
            target = Path(cluster.data) / name
            shutil.copy(pki / name, target)
            os.chmod(target, 0o600)
            if cluster.user:
                shutil.chown(target, user=cluster.user)
        hba = Path(cluster.data) / "pg_hba.conf"
        hba.write_text(HBA + hba.read_text(encoding="utf-8"), encoding="utf-8")
        port = free_port()
        cluster.pause()
        cluster.options = f"-c listen_addresses=127.0.0.1 -c port={port} -c ssl=on"
        cluster.resume()
        server = TlsServer(cluster, port, pki)
        for role, password in ROLES.items():
            spelled = "" if password is None else " PASSWORD '" + password.replace("'", "''") + "'"
            server.admin(f"CREATE ROLE {role} LOGIN{spelled}")
            server.admin(f"CREATE DATABASE {role} OWNER {role} TEMPLATE template0")
        _make_schema(server, "ro", pki / "setup-home")
        server.admin("ALTER ROLE ro SET default_transaction_read_only = on")  # for new sessions
        yield server
    finally:
        cluster.stop()
