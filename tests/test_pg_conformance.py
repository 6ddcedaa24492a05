"""cafleet reaches a PostgreSQL server exactly when ``psql`` (the system's libpq) does.

Each case runs ``python -m cafleet fleet list`` (a real subprocess, the URL in
``CAFLEET_DATABASE_URL``) beside ``psql -X -w URL -c 'select 1'`` with the same URL and the
same environment, against one private server with TLS per module
(tests/support/pg_tls.py: its CA, certificates, CRLs, roles and ``pg_hba.conf`` lines).
What each case asserts:

- psql's outcome is the one libpq documents for the case (so the case tests what it says);
- cafleet's outcome is psql's: both succeed (cafleet prints ``no live fleets`` and nothing
  on stderr, exit 0) or both fail, and then cafleet prints exactly one stderr line,
  starting ``Error: ``, nothing on stdout, and exits 1 (after the one warning libpq itself
  writes, as psql shows it, when it ignores a passfile others can read);
- no password of the case (as written, percent-encoded or decoded) appears anywhere in
  cafleet's output.

Nothing here reads cafleet's client code: the cases hold whatever speaks to the server.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support import pg_tls
from tests.support.pg_tls import FI_PASSWORD, NBSP_PASSWORD, PASSWORD, PSQL
from tests.support.sshd import free_port

OK, REFUSED = True, False


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    reason = pg_tls.missing_reason()
    if reason:
        pytest.skip(reason)
    with pg_tls.tls_server(tmp_path_factory.mktemp("pki")) as running:
        yield running


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def environ(home) -> dict[str, str]:
    return pg_tls.client_environ(home)


class Run:
    def __init__(self, argv: list[str], environ: dict[str, str], timeout: float = 60) -> None:
        started = time.monotonic()
        done = subprocess.run(
            argv, env=environ, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        self.seconds = time.monotonic() - started
        self.code, self.out, self.err = done.returncode, done.stdout, done.stderr

    def __repr__(self) -> str:
        return f"<exit {self.code} after {self.seconds:.1f}s, stdout {self.out!r}, stderr {self.err!r}>"


def cafleet(url: str, environ: dict[str, str], *args: str) -> Run:
    return Run(
        [sys.executable, "-m", "cafleet", *(args or ("fleet", "list"))], {**environ, "CAFLEET_DATABASE_URL": url}
    )


def psql(url: str, environ: dict[str, str]) -> Run:
    return Run([PSQL, "-X", "-w", url, "-c", "select 1"], environ)


def spellings(*secrets: str) -> set[str]:
    """Each secret as written, percent-encoded (as a URL carries it) and lower-case encoded."""
    found = set()
    for secret in secrets:
        encoded = quote(secret, safe="")
        found |= {secret, encoded, encoded.lower()}
    return {s for s in found if s}


def assert_no_secret(run: Run, secrets: set[str]) -> None:
    for secret in secrets:
        assert secret not in run.out and secret not in run.err, f"the password {secret!r} was printed: {run!r}"


def conforms(
    url: str, environ: dict[str, str], expected: bool, secrets: tuple[str, ...] = (PASSWORD,)
) -> tuple[Run, Run]:
    """Run both; assert psql's outcome is ``expected`` and cafleet's is psql's (see the
    module's text for what each outcome must look like). Returns (psql, cafleet)."""
    reference = psql(url, environ)
    assert (reference.code == 0) is expected, f"psql itself: {reference!r} on {url}"
    ours = cafleet(url, environ)
    context = f"\n  psql:    {reference!r}\n  cafleet: {ours!r}\n  url:     {url}"
    if expected:
        assert (ours.code, ours.out, ours.err) == (0, "no live fleets\n", ""), "cafleet refused" + context
    else:
        assert ours.code == 1, "cafleet did not refuse with exit 1" + context
        assert ours.out == "", context
        lines = ours.err.splitlines()
        # libpq itself writes one warning to stderr, as psql shows it: a passfile others can
        # read, which it ignored (the reason the login then fails); cafleet leaves it be.
        if lines and lines[0].startswith("WARNING: password file ") and lines[0] in reference.err:
            lines = lines[1:]
        assert len(lines) == 1 and lines[0].startswith("Error: "), "not one 'Error: ' line" + context
    assert_no_secret(ours, spellings(*secrets))
    return reference, ours


# --- sslmode --------------------------------------------------------------------------------
# alice may log in with or without TLS, tlsonly only with, plain only without. libpq's
# "allow" tries without TLS first and again with TLS when the server refuses; "prefer"
# tries TLS first and again without when the server refuses.
SSLMODES = [
    ("alice", "disable", OK),
    ("alice", "allow", OK),
    ("alice", "prefer", OK),
    ("alice", "require", OK),
    ("alice", "verify-ca", OK),
    ("alice", "verify-full", OK),  # host=127.0.0.1: the certificate names IP 127.0.0.1
    ("tlsonly", "disable", REFUSED),
    ("tlsonly", "allow", OK),
    ("tlsonly", "prefer", OK),
    ("tlsonly", "require", OK),
    ("plain", "disable", OK),
    ("plain", "allow", OK),
    ("plain", "prefer", OK),
    ("plain", "require", REFUSED),
    ("plain", "verify-full", REFUSED),
]


@pytest.mark.parametrize(("role", "sslmode", "expected"), SSLMODES, ids=[f"{r}-{m}" for r, m, _ in SSLMODES])
def test_each_sslmode_with_the_ca_as_sslrootcert(server, environ, role, sslmode, expected):
    conforms(server.url(role, sslmode=sslmode, sslrootcert=str(server.ca)), environ, expected)


ROOTCERTS = [
    ("verify-ca", "other-ca", REFUSED),  # a CA that did not sign the server's certificate
    ("verify-full", "other-ca", REFUSED),
    ("require", "other-ca", REFUSED),  # require with an sslrootcert that exists verifies, as verify-ca
    ("verify-ca", "missing", REFUSED),  # libpq: "root certificate file ... does not exist"
    ("require", "missing", OK),  # require verifies only against a root certificate that exists
]


@pytest.mark.parametrize(("sslmode", "which", "expected"), ROOTCERTS, ids=[f"{m}-{w}" for m, w, _ in ROOTCERTS])
def test_a_root_certificate_that_does_not_match_is_refused(server, environ, home, sslmode, which, expected):
    path = server.other_ca if which == "other-ca" else home / "no-such-root.crt"
    conforms(server.url(sslmode=sslmode, sslrootcert=str(path)), environ, expected)


# verify-full checks the certificate against host= (the name), never against hostaddr=
# (the address actually reached); verify-ca checks no name at all.
NAMES = [
    ("localhost", "127.0.0.1", "verify-full", OK),
    ("wrong.invalid", "127.0.0.1", "verify-full", REFUSED),
    ("wrong.invalid", "127.0.0.1", "verify-ca", OK),
    ("wrong.invalid", "127.0.0.1", "require", OK),
    ("127.0.0.1", None, "verify-full", OK),
]


@pytest.mark.parametrize(
    ("host", "hostaddr", "sslmode", "expected"), NAMES, ids=[f"{h}-{a}-{m}" for h, a, m, _ in NAMES]
)
def test_verify_full_checks_the_certificate_against_host_not_hostaddr(
    server, environ, host, hostaddr, sslmode, expected
):
    params = {"hostaddr": hostaddr} if hostaddr else {}
    conforms(server.url(host=host, sslmode=sslmode, sslrootcert=str(server.ca), **params), environ, expected)


# With no sslrootcert, libpq reads ~/.postgresql/root.crt when it exists, and then even
# sslmode=require verifies the server's certificate against it; ~/.postgresql/root.crl
# (when it exists) is the default sslcrl.
HOME_FILES = [
    ("alice", "ca", None, "require", OK),
    ("alice", "other-ca", None, "require", REFUSED),
    ("alice", "other-ca", None, "verify-ca", REFUSED),
    ("tlsonly", "other-ca", None, "prefer", REFUSED),  # verified, refused; then without TLS: rejected
    ("alice", "other-ca", None, "prefer", OK),  # verified, refused; then without TLS: accepted
    ("alice", "ca", "revoked", "require", REFUSED),
    ("alice", "ca", "empty", "require", OK),
    ("alice", None, None, "require", OK),  # nothing to verify against: require only encrypts
    ("alice", None, None, "verify-ca", REFUSED),
]


@pytest.mark.parametrize(
    ("role", "root", "crl", "sslmode", "expected"),
    HOME_FILES,
    ids=[f"{who}-{r}-{c}-{m}" for who, r, c, m, _ in HOME_FILES],
)
def test_the_root_certificate_and_crl_in_home_are_read_as_libpq_reads_them(
    server, environ, home, role, root, crl, sslmode, expected
):
    folder = home / ".postgresql"
    folder.mkdir(parents=True)
    if root:
        (folder / "root.crt").write_bytes((server.ca if root == "ca" else server.other_ca).read_bytes())
    if crl:
        (folder / "root.crl").write_bytes((server.revoked_crl if crl == "revoked" else server.empty_crl).read_bytes())
    conforms(server.url(role, sslmode=sslmode), environ, expected)


# --- certificate revocation -----------------------------------------------------------------
@pytest.mark.parametrize(("crl", "expected"), [("empty", OK), ("revoked", REFUSED)])
@pytest.mark.parametrize("sslmode", ["verify-ca", "verify-full"])
def test_sslcrl_revoking_the_server_certificate_is_refused(server, environ, crl, expected, sslmode):
    path = server.revoked_crl if crl == "revoked" else server.empty_crl
    conforms(server.url(sslmode=sslmode, sslrootcert=str(server.ca), sslcrl=str(path)), environ, expected)


@pytest.mark.parametrize(("crl", "expected"), [("empty", OK), ("revoked", REFUSED)])
def test_sslcrldir_revoking_the_server_certificate_is_refused(server, environ, tmp_path, crl, expected):
    folder = tmp_path / "crls"
    folder.mkdir()
    (folder / "ca.crl").write_bytes((server.revoked_crl if crl == "revoked" else server.empty_crl).read_bytes())
    subprocess.run(["openssl", "rehash", str(folder)], check=True, capture_output=True, timeout=60)
    conforms(server.url(sslmode="verify-full", sslrootcert=str(server.ca), sslcrldir=str(folder)), environ, expected)


# --- channel binding, GSSAPI --------------------------------------------------------------
CHANNEL_BINDING = [
    ("alice", "disable", "require", REFUSED),  # no TLS, nothing to bind to
    ("alice", "require", "require", OK),  # TLS + SCRAM-SHA-256-PLUS
    ("alice", "verify-full", "require", OK),
    ("alice", "prefer", "require", OK),
    ("alice", "require", "disable", OK),
    ("alice", "disable", "prefer", OK),
    ("trusty", "require", "require", REFUSED),  # trust: the server never authenticated with SCRAM
    ("trusty", "require", "prefer", OK),
    ("plain", "prefer", "require", REFUSED),  # TLS refused by the server, then SCRAM without it
]


@pytest.mark.parametrize(
    ("role", "sslmode", "binding", "expected"),
    CHANNEL_BINDING,
    ids=[f"{r}-{m}-{b}" for r, m, b, _ in CHANNEL_BINDING],
)
def test_channel_binding(server, environ, role, sslmode, binding, expected):
    url = server.url(role, sslmode=sslmode, channel_binding=binding, sslrootcert=str(server.ca))
    conforms(url, environ, expected)


@pytest.mark.parametrize(("mode", "expected"), [("require", REFUSED), ("prefer", OK), ("disable", OK)])
def test_gssencmode_require_is_refused_without_gssapi(server, environ, mode, expected):
    conforms(server.url(gssencmode=mode), environ, expected)


# --- target_session_attrs ------------------------------------------------------------------
# ro's sessions start with default_transaction_read_only = on (its role setting); no server
# here is a hot standby.
SESSION_ATTRS = [
    ("ro", "read-write", REFUSED),
    ("ro", "any", OK),
    ("ro", "read-only", OK),
    ("ro", "primary", OK),
    ("ro", "standby", REFUSED),
    ("ro", "prefer-standby", OK),
    ("alice", "read-write", OK),
    ("alice", "read-only", REFUSED),
    ("alice", "standby", REFUSED),
    ("alice", "primary", OK),
    ("alice", "bogus", REFUSED),  # libpq: invalid target_session_attrs value
]


@pytest.mark.parametrize(("role", "attrs", "expected"), SESSION_ATTRS, ids=[f"{r}-{a}" for r, a, _ in SESSION_ATTRS])
def test_target_session_attrs(server, environ, role, attrs, expected):
    conforms(server.url(role, target_session_attrs=attrs), environ, expected)


# --- several hosts ---------------------------------------------------------------------------
MULTI_HOST = [
    ("authority-closed-port-first", OK),  # alice@127.0.0.1:CLOSED,127.0.0.1:PORT
    ("query-empty-socket-folder-first", OK),  # ?host=/a/folder/without/server,127.0.0.1&port=PORT
    ("query-ports-list", OK),  # ?host=127.0.0.1,127.0.0.1&port=CLOSED,PORT
    ("closed-first-read-write", OK),  # target_session_attrs goes on to the next host too
    ("all-bad", REFUSED),
    ("read-only-twice", REFUSED),  # ro is read-only on both: two reasons, one line
]


@pytest.mark.parametrize(("spelling", "expected"), MULTI_HOST, ids=[s for s, _ in MULTI_HOST])
def test_several_hosts_are_tried_in_order(server, environ, tmp_path, spelling, expected):
    """The first host is nowhere (a port nothing listens on, or a socket folder with no
    server in it); libpq goes on to the next, the server."""
    closed, port = free_port(), server.port
    empty = tmp_path / "nosrv"
    empty.mkdir()
    auth = f"alice:{PASSWORD}"
    url = {
        "authority-closed-port-first": f"postgresql://{auth}@127.0.0.1:{closed},127.0.0.1:{port}/alice",
        "query-empty-socket-folder-first": f"postgresql://{auth}@/alice?host={empty},127.0.0.1&port={port}",
        "query-ports-list": f"postgresql://{auth}@/alice?host=127.0.0.1,127.0.0.1&port={closed},{port}",
        "closed-first-read-write": (
            f"postgresql://{auth}@127.0.0.1:{closed},127.0.0.1:{port}/alice?target_session_attrs=read-write"
        ),
        "all-bad": f"postgresql://{auth}@/alice?host={empty},127.0.0.1&port={closed}",
        "read-only-twice": (
            f"postgresql://ro:{PASSWORD}@127.0.0.1:{port},127.0.0.1:{port}/ro?target_session_attrs=read-write"
        ),
    }[spelling]
    conforms(url, environ, expected)


# --- service files ---------------------------------------------------------------------------
def write_service(path: Path, server) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "# a service file\n[other]\nhost=/nonexistent\n\n"
        f"[fleet]\nhost=127.0.0.1\nport={server.port}\ndbname=alice\nuser=alice\npassword={PASSWORD}\n"
        f"sslmode=verify-full\nsslrootcert={server.ca}\n",
        encoding="utf-8",
    )


SERVICES = [
    ("PGSERVICEFILE", "postgresql://?service=fleet", {}, OK),
    ("PGSERVICEFILE", "postgresql:///alice?service=fleet", {}, OK),
    ("PGSERVICEFILE", "postgresql://?service=missing", {}, REFUSED),
    ("PGSERVICEFILE", "postgresql://?service=other", {}, REFUSED),  # its host has no server
    ("PGSERVICEFILE", "postgresql://", {"PGSERVICE": "fleet"}, OK),
    ("home", "postgresql://?service=fleet", {}, OK),  # ~/.pg_service.conf
    ("PGSYSCONFDIR", "postgresql://?service=fleet", {}, OK),  # $PGSYSCONFDIR/pg_service.conf
    (None, "postgresql://?service=fleet", {}, REFUSED),
]


@pytest.mark.parametrize(
    ("where", "url", "extra", "expected"),
    SERVICES,
    ids=[f"{w}-{u.partition('?')[2] or 'PGSERVICE'}" for w, u, _, _ in SERVICES],
)
def test_a_service_names_the_server(server, environ, home, tmp_path, where, url, extra, expected):
    if where == "PGSERVICEFILE":
        write_service(tmp_path / "services.conf", server)
        environ["PGSERVICEFILE"] = str(tmp_path / "services.conf")
    elif where == "home":
        write_service(home / ".pg_service.conf", server)
    elif where == "PGSYSCONFDIR":
        write_service(Path(environ["PGSYSCONFDIR"]) / "pg_service.conf", server)
    environ.update(extra)
    conforms(url, environ, expected)


# --- requiressl (libpq's old spelling: requiressl=1 is sslmode=require, 0 is prefer; the
# last of requiressl and sslmode written wins) -----------------------------------------------
REQUIRESSL = [
    ("tlsonly", "requiressl=1", OK),
    ("plain", "requiressl=1", REFUSED),
    ("plain", "requiressl=0", OK),
    ("tlsonly", "sslmode=disable&requiressl=1", OK),
    ("tlsonly", "requiressl=1&sslmode=disable", REFUSED),
    ("plain", "sslmode=disable&requiressl=1", REFUSED),
]


@pytest.mark.parametrize(("role", "query", "expected"), REQUIRESSL, ids=[f"{r}-{q}" for r, q, _ in REQUIRESSL])
def test_requiressl(server, environ, role, query, expected):
    conforms(f"{server.url(role)}?{query}", environ, expected)


# --- connect_timeout ---------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["url", "PGCONNECT_TIMEOUT"])
def test_connect_timeout_ends_a_connection_nobody_answers(server, environ, where):
    """A socket on 127.0.0.1 that listens but never accepts nor answers: the kernel
    completes the TCP handshake, then nothing; both give up within connect_timeout (2 s)
    and a few seconds."""
    timeout = 2
    with socket.create_server(("127.0.0.1", 0), backlog=16) as silent:
        port = silent.getsockname()[1]
        url = f"postgresql://alice:{PASSWORD}@127.0.0.1:{port}/alice"
        if where == "url":
            url += f"?connect_timeout={timeout}"
        else:
            environ["PGCONNECT_TIMEOUT"] = str(timeout)
        reference, ours = conforms(url, environ, REFUSED)
    assert "timeout expired" in reference.err, reference
    assert timeout - 0.5 <= reference.seconds <= timeout + 3, reference
    assert ours.seconds <= timeout + 3, f"cafleet took {ours.seconds:.1f}s with connect_timeout={timeout}: {ours!r}"


# --- SCRAM and SASLprep ---------------------------------------------------------------------
SASLPREP = [
    ("fi", FI_PASSWORD, OK),  # 'ﬁle' as created
    ("fi", "file", OK),  # its SASLprep (NFKC) form
    ("fi", "FILE", REFUSED),
    ("nbsp", NBSP_PASSWORD, OK),  # NO-BREAK SPACE as created
    ("nbsp", "no break", OK),  # SASLprep maps it to SPACE
    ("nbsp", "nobreak", REFUSED),
]


@pytest.mark.parametrize(
    ("role", "password", "expected"), SASLPREP, ids=["fi", "file", "FILE", "nbsp", "space", "none"]
)
@pytest.mark.parametrize("sslmode", ["disable", "require"])
def test_scram_passwords_are_saslprepped(server, environ, role, password, expected, sslmode):
    url = server.url(role, password=password, sslmode=sslmode)
    conforms(url, environ, expected, secrets=(password, FI_PASSWORD, NBSP_PASSWORD))


# --- the passfile ------------------------------------------------------------------------------
PASSFILES = [
    ("no-password", 0o600, OK),
    ("empty-password-parameter", 0o600, OK),  # password= is no password: the passfile's
    ("empty-userinfo-password", 0o600, OK),  # alice:@ too
    ("passfile-parameter", 0o600, OK),  # passfile=PATH instead of PGPASSFILE
    ("home-pgpass", 0o600, OK),  # ~/.pgpass
    ("wrong-password-in-url", 0o600, REFUSED),  # the URL's password wins over the file's
    ("no-password", 0o644, REFUSED),  # a passfile others can read is ignored (with a warning)
    ("no-passfile", 0o600, REFUSED),  # "no password supplied"
]


@pytest.mark.parametrize(("spelling", "mode", "expected"), PASSFILES, ids=[f"{s}-{m:o}" for s, m, _ in PASSFILES])
def test_the_passfile_supplies_the_password_as_libpq_reads_it(
    server, environ, home, tmp_path, spelling, mode, expected
):
    passfile = home / ".pgpass" if spelling == "home-pgpass" else tmp_path / "pgpass"
    if spelling != "no-passfile":
        passfile.write_text(
            f"# a comment\n127.0.0.1:{server.port}:other:alice:wrong\n"
            f"127.0.0.1:{server.port}:alice:alice:{PASSWORD}\n*:*:*:*:catch-all-wrong\n",
            encoding="utf-8",
        )
        os.chmod(passfile, mode)
    if spelling not in ("passfile-parameter", "home-pgpass"):
        environ["PGPASSFILE"] = str(passfile)
    base = f"127.0.0.1:{server.port}/alice"
    url = {
        "no-password": f"postgresql://alice@{base}",
        "empty-password-parameter": f"postgresql://alice@{base}?password=",
        "empty-userinfo-password": f"postgresql://alice:@{base}",
        "passfile-parameter": f"postgresql://alice@{base}?passfile={passfile}",
        "home-pgpass": f"postgresql://alice@{base}",
        "wrong-password-in-url": f"postgresql://alice:not-the-password@{base}",
        "no-passfile": f"postgresql://alice@{base}",
    }[spelling]
    conforms(url, environ, expected, secrets=(PASSWORD, "not-the-password", "catch-all-wrong"))


# --- a percent-encoded key ------------------------------------------------------------------
# libpq decodes a query key as it decodes a value: pass%77ord is "password". The value is
# written partly percent-encoded too, so neither spelling may be printed.
ENCODED_VALUE = PASSWORD.replace("cret", "cr%65t")


@pytest.mark.parametrize(("dbname", "expected"), [("alice", OK), ("no_such_db", REFUSED)])
def test_a_percent_encoded_password_key_is_a_password_and_never_printed(server, environ, dbname, expected):
    url = f"postgresql://127.0.0.1:{server.port}/{dbname}?user=alice&pass%77ord={ENCODED_VALUE}"
    conforms(url, environ, expected, secrets=(PASSWORD, ENCODED_VALUE))
    for args in (("doctor",), ("doctor", "--json")):
        report = cafleet(url, environ, *args)
        assert report.code in (0, 1), report
        assert "database" in report.out.lower(), report
        assert_no_secret(report, spellings(PASSWORD, ENCODED_VALUE))
