"""A hostile PostgreSQL server: every lie ends the command with one line, soon, in little memory.

Each test points ``CAFLEET_DATABASE_URL`` at a :class:`tests.support.fake_pg.FakePg` on
127.0.0.1 that misbehaves in one way a real server never will (that module says why a
stand-in), runs ``cafleet fleet list`` as a user does (a real subprocess, so nothing here
depends on how the client is written) and asserts what a user sees: exit status 1, one
line on stderr beginning ``Error: `` (no traceback, no "internal error"), nothing on
stdout, an end within a bound, and a peak RSS under :data:`MAX_RSS`. The fake's own record
(:attr:`FakePg.events`) shows that the client reached the hostile part, or, for the TLS
injection, that it stopped before acting on it.

Bounds: ``CAFLEET_BUSY_TIMEOUT=1`` and ``connect_timeout=2`` in the URL. A wait for the
server's answer is bounded by the busy timeout plus a margin (:data:`READ_BOUND` allows
for it, and for a second connection); the whole connect, by ``connect_timeout``
(:data:`CONNECT_BOUND`). Every command is killed at its bound plus :data:`GRACE`, so a
client that hangs fails the test instead of holding the suite.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
import time
import unicodedata
from pathlib import Path

import pytest

from tests.support.environ import isolated_environ
from tests.support.fake_pg import (
    FakePg,
    Session,
    bind_complete,
    command_complete,
    data_row,
    greeting,
    message,
    parse_complete,
    ready_for_query,
    row_description,
)
from tests.support.hooked import cafleet_argv

CONNECT_TIMEOUT = 2  # seconds, in the URL: libpq's bound on the whole connect
CONNECT_BOUND = CONNECT_TIMEOUT + 5.0
READ_BOUND = 30.0  # busy timeout (1 s) + the client's read margin, with room for a second connection
ANSWERED_BOUND = 5.0  # a complete (if hostile) answer: nothing to wait for
GRACE = 10.0  # past its bound, a command still running is killed and the test fails
MAX_RSS = 200 * 1024 * 1024
FORGED = "FORGED-BY-THE-MIDDLE"


class Outcome:
    def __init__(self, code: int, out: str, err: str, elapsed: float, max_rss: int, killed: bool) -> None:
        self.code = code
        self.out = out
        self.err = err
        self.elapsed = elapsed
        self.max_rss = max_rss  # bytes: the command's peak resident set
        self.killed = killed

    def __repr__(self) -> str:
        return (
            f"Outcome(code={self.code}, elapsed={self.elapsed:.1f}s, max_rss={self.max_rss // 1024 // 1024}MiB, "
            f"killed={self.killed}, out={self.out!r}, err={self.err!r})"
        )


@pytest.fixture
def fake_pg():
    """``fake_pg(behaviour)`` starts a :class:`FakePg`; every one is stopped at teardown."""
    servers: list[FakePg] = []

    def start(behaviour) -> FakePg:
        server = FakePg(behaviour)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _peak_after_exec(pid: int, argv: list[str]) -> int:
    """The process's peak resident set so far, in bytes (``VmHWM``), once it runs ``argv``;
    0 before its exec. Not ``wait4``'s ``ru_maxrss``: that counts the parent's memory a
    forked child had before its exec (a pytest worker's hundreds of MiB)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if handle.read().split(b"\0")[: len(argv)] != [arg.encode() for arg in argv]:
                return 0
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            line = next((line for line in handle if line.startswith("VmHWM:")), "")
    except OSError:  # gone already
        return 0
    return int(line.split()[1]) * 1024 if line else 0


@pytest.fixture
def measured_cli(tmp_path):
    """``measured_cli(url, *args, bound=...)`` runs the command against ``url`` in a subprocess
    and measures it: its time, and its own peak RSS (``VmHWM``, sampled while it runs)."""

    def run(url: str, *args: str, bound: float) -> Outcome:
        env = isolated_environ(tmp_path / "home", CAFLEET_DATABASE_URL=url, CAFLEET_BUSY_TIMEOUT="1")
        env = {key: value for key, value in env.items() if not key.startswith("PG")}  # libpq reads PG*
        out_path, err_path = tmp_path / "stdout", tmp_path / "stderr"
        argv = [*cafleet_argv(env), *args]
        peak = 0
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            started = time.monotonic()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env)
            killed = False
            while proc.poll() is None:
                peak = max(peak, _peak_after_exec(proc.pid, argv))
                if time.monotonic() - started > bound + GRACE:
                    proc.kill()
                    killed = True
                    proc.wait()
                    break
                time.sleep(0.01)
            elapsed = time.monotonic() - started
        return Outcome(
            proc.returncode,
            out_path.read_text(errors="replace"),
            err_path.read_text(errors="replace"),
            elapsed,
            peak,
            killed,
        )

    return run


def assert_one_line_error(outcome: Outcome, bound: float) -> None:
    assert not outcome.killed, f"still running {bound + GRACE:g} s after it started, killed: {outcome}"
    assert outcome.code == 1, outcome
    lines = outcome.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), outcome
    for word in ("Traceback", "struct.error", "internal error"):
        assert word not in outcome.err, outcome
    # nothing the server sent may reach the terminal as a control character (render.py's rule)
    controls = [ch for ch in lines[0] if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")]
    assert controls == [], f"control characters {controls} on stderr: {outcome}"
    assert outcome.out == "", outcome
    assert outcome.elapsed < bound, f"took {outcome.elapsed:.1f} s, more than {bound:g} s: {outcome}"
    assert 0 < outcome.max_rss < MAX_RSS, outcome  # measured, and bounded


def plain_url(server: FakePg) -> str:
    return server.url(sslmode="disable", connect_timeout=str(CONNECT_TIMEOUT))


def answer_query(session: Session, hostile: bytes) -> list[bytes]:
    """Read one query (simple, extended, or a pipeline of them) and start its answer as a
    server does (ParseComplete, BindComplete for an extended one), then ``hostile``."""
    kinds = session.read_query()
    opening = (parse_complete() if b"P" in kinds else b"") + (bind_complete() if b"B" in kinds else b"")
    session.send(opening + hostile)
    return kinds


def login_then(hostile: bytes, then=Session.hold):
    """A behaviour: a normal login, then ``hostile`` as the start of the answer to the
    first query, then ``then(session)`` (by default: silence until the client closes)."""

    def behaviour(session: Session) -> None:
        if session.startup():
            session.send(greeting())
            answer_query(session, hostile)
            then(session)

    return behaviour


# --- 1. TLS downgrade: plaintext injected after the server's "S" ----------------------------


@pytest.fixture(scope="module")
def server_cert(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate (it is its own CA) and its key, made by ``openssl``."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed (it makes the fake server's certificate)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "server.crt", folder / "server.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "2",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


def injecting_tls(cert: Path, key: Path):
    """A behaviour for CVE-2021-23222: the SSLRequest is answered ``S`` with a whole forged
    login (AuthenticationOk ... ReadyForQuery) in plaintext behind it, in the same send, as
    a machine in the middle would inject it. The TLS handshake is then completed, with a
    certificate the URL trusts, so a client that took the buffered plaintext for the
    server's would log in on it and send its queries, which are answered with a forged row."""
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)

    def on_ssl(session: Session) -> None:
        session.send(b"S" + greeting())
        session.start_tls(context)

    def behaviour(session: Session) -> None:
        if session.startup(on_ssl=on_ssl):
            while True:  # the login was the injected one: straight to the queries
                answer_query(
                    session, row_description("x") + data_row(FORGED) + command_complete("SELECT 1") + ready_for_query()
                )

    return behaviour


@pytest.mark.parametrize("mode", ["require", "verify-ca"])
def test_plaintext_injected_after_the_ssl_answer_is_refused(mode, fake_pg, measured_cli, server_cert):
    cert, key = server_cert
    server = fake_pg(injecting_tls(cert, key))
    query = {"sslmode": mode, "connect_timeout": str(CONNECT_TIMEOUT)}
    if mode == "verify-ca":
        query["sslrootcert"] = str(cert)
    outcome = measured_cli(server.url(**query), "fleet", "list", bound=CONNECT_BOUND)
    assert server.count("ssl-request") >= 1, server.events
    # the forged login was not acted on: no startup message and no query ever reached the server
    assert server.count("startup") == 0 and server.count("query") == 0, (server.events, outcome)
    assert FORGED not in outcome.out + outcome.err
    assert_one_line_error(outcome, CONNECT_BOUND)


# --- 2. a DataRow that claims 2 GiB (or 1 GiB), then comes a byte a second ------------------


@pytest.mark.parametrize("declared", [0x7FFFFFF0, 0x3FFFFFF0], ids=["2GiB", "1GiB"])
def test_a_huge_row_trickled_a_byte_a_second(declared, fake_pg, measured_cli):
    """The length field of a DataRow claims 2 GiB (or 1 GiB, which a client may well
    allocate), and the row then comes a byte a second: the wait is bounded, and so is
    what the command holds (a client that reserved, or read ahead, what the length claims
    would be far past MAX_RSS)."""
    header = row_description("x") + b"D" + struct.pack("!I", declared)
    body = struct.pack("!Hi", 1, declared - 10) + b"x" * 600  # a column as long as the row says

    server = fake_pg(login_then(header, then=lambda session: session.trickle(body, interval=1.0)))
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=READ_BOUND)
    assert_one_line_error(outcome, READ_BOUND)
    assert server.count("query") >= 1, server.events


# --- 3. the login's answer a byte a second ----------------------------------------------------


def test_a_login_answered_a_byte_a_second_ends_at_the_connect_timeout(fake_pg, measured_cli):
    def behaviour(session: Session) -> None:
        if session.startup():
            session.trickle(greeting(), interval=1.0)
            session.hold()

    server = fake_pg(behaviour)
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=CONNECT_BOUND)
    assert_one_line_error(outcome, CONNECT_BOUND)
    assert server.count("startup") >= 1, server.events


# --- 4. a message type the protocol does not have -----------------------------------------

UNKNOWN = message(b"\x01", b"junk")  # type 0x01, length 8
UNKNOWN_ESC = message(b"\x1b", b"junk")  # the type byte is ESC, which a terminal acts on


def test_an_unknown_message_type_then_silence(fake_pg, measured_cli):
    server = fake_pg(login_then(UNKNOWN))
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=READ_BOUND)
    assert_one_line_error(outcome, READ_BOUND)
    assert server.count("query") >= 1, server.events


def empty_answer(kinds: list[bytes]) -> bytes:
    """What a server answers to these messages when every statement returns nothing."""
    answers = {
        b"P": parse_complete(),
        b"B": bind_complete(),
        b"D": message(b"n"),  # NoData
        b"E": command_complete("SELECT 0"),
        b"S": ready_for_query(),
        b"Q": command_complete("SELECT 0") + ready_for_query(),
    }
    return b"".join(answers.get(kind, b"") for kind in kinds)


@pytest.mark.parametrize("junk", [UNKNOWN, UNKNOWN_ESC], ids=["0x01", "ESC"])
def test_an_unknown_message_type_in_an_otherwise_complete_answer(junk, fake_pg, measured_cli):
    """The junk comes first and the answer then ends as a server's does: a client that
    skipped the junk would go on, on empty answers; the protocol error must end it, at
    once (the answer is complete, there is nothing to wait for), and its line must not
    carry the server's byte to the terminal."""

    def behaviour(session: Session) -> None:
        if session.startup():
            session.send(greeting())
            while True:
                session.send(junk + empty_answer(session.read_query()))

    server = fake_pg(behaviour)
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=ANSWERED_BOUND)
    assert_one_line_error(outcome, ANSWERED_BOUND)
    assert server.count("query") >= 1, server.events


def test_an_error_response_carrying_control_characters(fake_pg, measured_cli):
    """Not one of the lies above but the same rule: a server's own error text (which
    cafleet passes on) with a terminal escape and a line break in it."""
    fields = b"SERROR\0VERROR\0CXX000\0Mboom\x1b]0;owned\x07\nsecond line\0\0"

    def behaviour(session: Session) -> None:
        if session.startup():
            session.send(greeting())
            while True:
                session.read_query()
                session.send(message(b"E", fields) + ready_for_query())

    server = fake_pg(behaviour)
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=ANSWERED_BOUND)
    assert_one_line_error(outcome, ANSWERED_BOUND)
    assert server.count("query") >= 1, server.events


# --- 5. a COPY nobody asked for -----------------------------------------------------------


def test_a_copy_in_response_to_a_query(fake_pg, measured_cli):
    copy_in = message(b"G", struct.pack("!bH", 0, 0))  # text format, no columns; then it waits for CopyData
    server = fake_pg(login_then(copy_in))
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=READ_BOUND)
    assert_one_line_error(outcome, READ_BOUND)
    assert server.count("query") >= 1, server.events


# --- 6. a server that never answers ---------------------------------------------------------


def test_a_query_never_answered(fake_pg, measured_cli):
    def behaviour(session: Session) -> None:
        if session.startup():
            session.send(greeting())
            session.read_query()
            session.hold()  # not even a ParseComplete

    server = fake_pg(behaviour)
    outcome = measured_cli(plain_url(server), "fleet", "list", bound=READ_BOUND)
    assert_one_line_error(outcome, READ_BOUND)
    assert server.count("query") >= 1, server.events
