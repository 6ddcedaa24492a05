"""Hostile input: arbitrary bodies, bytes, ids and environment values.

Every accepted body must come back byte-for-byte through ``show --json`` and ``poll
--json``; every refusal must be one ``Error:`` line with the right exit code and leave
the database untouched; no input may produce a traceback or an "internal error"; and the
preview typed into a pane must be inert whatever the body holds.

Commands run in-process through the ``cli`` fixture (a real SQLite file, the real parser
and handlers) so that a hundred examples cost a second; a few cases also run as real
subprocesses, where argv and the environment are bytes.
"""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
import tempfile
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from cafleet import clock, config, render
from cafleet.cli.context import Context
from cafleet.cli.main import main
from cafleet.config import declarations
from cafleet.delivery.keystrokes.preview import ELLIPSIS, flatten, render_preview
from cafleet.errors import ConfigError
from tests.support.pane_fleet import tmux_fleet

# The suite's budget: enough examples to find the classic bugs, few enough to stay fast.
# The cli/env fixtures are per test, not per example; each property tolerates what the
# earlier examples left in the database (it looks messages up by id).
FAST = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
FEW = settings(FAST, max_examples=40)

MAX_ID = 2**63 - 1
PUBLIC_KEYS = ("message_id", "from_member_id", "to_member_id", "created_at", "status_state", "status_timestamp", "text")
KEPT_FORMAT = {"\u200c", "\u200d"}  # ZWNJ and ZWJ: emoji sequences and some scripts need them

# Fragments a hostile body is made of: escape sequences whole (CSI, OSC to BEL and to ST,
# DCS, 8-bit CSI/OSC, charset and reset escapes, a lone ESC), line breaks of every kind,
# C0/DEL/C1 controls, bidi overrides, zero-width and tag characters, wide spaces.
SEQUENCES = [
    "\x1b[31m",
    "\x1b[2J",
    "\x1b[?2004h",
    "\x1b]0;pwned\x07",
    "\x1b]52;c;ZXZpbA==\x1b\\",
    "\x1bP1$qm\x1b\\",
    "\x9b6n",
    "\x9d0;x\x9c",
    "\x1b(0",
    "\x1bc",
    "\x1b",
    "\r\n",
    "\r",
    "\n",
    "\t",
    "\x00",
    "\x03",
    "\x04",
    "\x08",
    "\x1a",
    "\x7f",
    "\x85",
    "\x9f",
    "\u2028",
    "\u2029",
    "\u202e",
    "\u2066",
    "\u200b",
    "\u200d",
    "\ufeff",
    "\U000e0041",
    "\U0001f680",
    "👨\u200d👩\u200d👧",
    "\u3000",
    " ",
    "C-c",
    "Enter",
    "$(id)",
    "⏎",
    "…",
]
BLANKS = ["", " ", "\t\n", "\r\n\r\n", "\u3000\u2028\u2029", "\x1c\x1d\x1e\x1f", "\x85\xa0 ", "\x0b\x0c"]
hostile_char = st.one_of(
    st.characters(codec="utf-8"),  # any code point but a surrogate: stored text is valid UTF-8
    st.characters(max_codepoint=0x9F),  # C0, ASCII, DEL, C1
    st.characters(min_codepoint=0x10000, codec="utf-8"),  # astral planes
)
fragment = st.one_of(st.text(hostile_char, max_size=12), st.sampled_from(SEQUENCES))
bodies = st.one_of(st.lists(fragment, max_size=8).map("".join), st.sampled_from(BLANKS))
argv_bodies = bodies.map(lambda s: s.replace("\x00", ""))  # argv cannot carry NUL
body_bytes = st.one_of(
    bodies.map(lambda s: s.encode("utf-8")),
    st.binary(max_size=48),
    st.tuples(bodies, st.binary(min_size=1, max_size=4), bodies).map(
        lambda t: t[0].encode("utf-8") + t[1] + t[2].encode("utf-8")
    ),
)


def controls(text: str) -> list[str]:
    """Characters a terminal or an input box could act on, or that hide or reorder text."""
    return [
        ch
        for ch in text
        if unicodedata.category(ch) in ("Cc", "Cs", "Zl", "Zp")
        or (unicodedata.category(ch) == "Cf" and ch not in KEPT_FORMAT)
    ]


def dump(db_path: str) -> list[str]:
    """Every row of every table, through a read-only connection: 'nothing written' means
    this is identical before and after."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def assert_one_error_line(result, code: int) -> str:
    assert result.code == code, result
    assert result.out == "", result
    assert result.err.startswith("Error: ") and result.err.endswith("\n"), result
    assert result.err.count("\n") == 1, result
    assert "Traceback" not in result.err and "internal error" not in result.err, result
    return result.err


@pytest.fixture
def trio(build):
    """Director + two members with pending placements (no pane to type into)."""
    return build.fleet()


def send_args(a: int, b: int) -> list[str]:
    return ["message", "send", "--from-member-id", str(a), "--to-member-id", str(b), "--json"]


def check_round_trip(cli, sent, body: str, sender: int, recipient: int) -> None:
    """The body comes back exactly; text output stays display-safe; the preview is inert."""
    assert (sent.code, sent.err) == (0, ""), sent
    record = sent.json()
    assert record["text"] == body and record["notified"] is False
    message_id = record["message_id"]
    shown = cli("message", "show", str(message_id), "--json")
    assert shown.code == 0 and shown.json() == {key: record[key] for key in PUBLIC_KEYS}
    polled = cli("message", "poll", str(recipient), "--json").json()
    assert [r for r in polled if r["message_id"] == message_id] == [shown.json()]
    text = cli("message", "show", str(message_id)).out
    assert text.startswith(f"[msg {message_id} | from:{sender} | {record['status_timestamp']}]\n")
    assert not any(unicodedata.category(ch) == "Cc" and ch not in "\n\t" for ch in text)  # no C0, DEL, C1
    check_preview(message_id, sender, record["created_at"], body, declarations.DEFAULT_MAX_TEXT_LEN)
    assert cli("message", "ack", str(message_id)).code == 0  # keeps the inbox small


def check_preview(message_id: int, sender: int, created_at: str, body: str, max_len: int) -> None:
    preview = render_preview(message_id, sender, created_at, body, max_len)
    header, sep, line = preview.partition("\n")
    assert sep == "\n" and controls(preview) == ["\n"]
    assert header == f"[cafleet msg {message_id} from {sender} {created_at}]"
    typed = flatten(body)
    assert controls(typed) == [] and "\n" not in typed
    assert line == (typed if len(typed) <= max_len else typed[:max_len] + ELLIPSIS)
    assert len(line) <= max_len + 1


# --- bodies -------------------------------------------------------------------------------


@FAST
@given(body=argv_bodies)
def test_any_text_argument_round_trips_or_is_refused_as_blank(cli, trio, db_path, body):
    _, _, (m1, m2) = trio
    before = dump(db_path) if not body.strip() else None
    sent = cli(*send_args(m1, m2), "--", body)
    if body.strip():
        check_round_trip(cli, sent, body, m1, m2)
    else:
        assert assert_one_error_line(sent, 2) == "Error: the body is blank; a message needs a non-blank body.\n"
        assert dump(db_path) == before


@FAST
@given(data=body_bytes, use_stdin=st.booleans())
def test_any_bytes_by_file_or_stdin_round_trip_or_are_refused(cli, trio, db_path, tmp_path, data, use_stdin):
    _, _, (m1, m2) = trio
    if use_stdin:
        where, source, stdin = "standard input", "-", data
    else:
        path = tmp_path / "body.bin"
        path.write_bytes(data)
        where, source, stdin = f"file {path}", str(path), b""
    before = dump(db_path)
    sent = cli(*send_args(m1, m2), "--file", source, input=stdin)
    try:
        body = data.decode("utf-8")
    except UnicodeDecodeError as error:
        expected = f"Error: {where} is not valid UTF-8 (byte 0x{data[error.start]:02x} at offset {error.start}).\n"
        assert assert_one_error_line(sent, 2) == expected
        assert dump(db_path) == before
        return
    if not body:
        assert assert_one_error_line(sent, 2) == f"Error: {where} is empty; a message needs a non-blank body.\n"
    elif not body.strip():
        assert assert_one_error_line(sent, 2) == "Error: the body is blank; a message needs a non-blank body.\n"
    else:
        check_round_trip(cli, sent, body, m1, m2)
        return
    assert dump(db_path) == before


@FEW
@given(raw=st.binary(min_size=1, max_size=24))
def test_argv_bytes_that_are_not_utf8_are_refused(cli, trio, db_path, raw):
    """What a real process receives for non-UTF-8 argv bytes: surrogate escapes."""
    _, _, (m1, m2) = trio
    text = os.fsdecode(raw)
    before = dump(db_path)
    sent = cli(*send_args(m1, m2), "--", text)
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        assert assert_one_error_line(sent, 2) == "Error: TEXT is not valid UTF-8; pass the body with --file instead.\n"
        assert dump(db_path) == before
        return
    if "\x00" in body:
        return  # valid UTF-8 with NUL: a real argv cannot carry it
    if body.strip():
        check_round_trip(cli, sent, body, m1, m2)
    else:
        assert assert_one_error_line(sent, 2) == "Error: the body is blank; a message needs a non-blank body.\n"


def big_body(size: int) -> str:
    """About ``size`` bytes of mixed scripts, astral characters, CRLF, escapes and NUL."""
    unit = "漢字かな 🚀 naïve\r\n\x1b[31mred\x1b[0m\ttab \x00nul \u202eevil\u202c ✓\n"
    return (unit * (size // len(unit.encode("utf-8")) + 1))[: size // 2] + "end"


@pytest.mark.parametrize("mib", [1, 5])
def test_very_long_bodies_round_trip_by_file_and_stdin(cli, trio, tmp_path, mib):
    _, _, (m1, m2) = trio
    body = big_body(mib * 1024 * 1024)
    data = body.encode("utf-8")
    assert len(data) >= mib * 1024 * 1024 // 2
    path = tmp_path / "big.txt"
    path.write_bytes(data)
    for sent in (cli(*send_args(m1, m2), "--file", str(path)), cli(*send_args(m1, m2), "--file", "-", input=data)):
        assert sent.code == 0, sent.err
        message_id = sent.json()["message_id"]
        assert cli("message", "show", str(message_id), "--json").json()["text"] == body
        polled = cli("message", "poll", str(m2), "--json").json()
        assert [r["text"] for r in polled if r["message_id"] == message_id] == [body]
        text = cli("message", "show", str(message_id)).out  # truncated to 200 code points + …
        assert text.endswith("…\n") and len(text) < 1000
        line = render_preview(message_id, m1, sent.json()["created_at"], body, 200).split("\n")[1]
        assert len(line) == 201 and line.endswith(ELLIPSIS) and controls(line) == []
        assert cli("message", "ack", str(message_id)).code == 0


def test_long_text_argument_round_trips(cli, trio):
    _, _, (m1, m2) = trio
    body = big_body(1024 * 1024).replace("\x00", "")
    sent = cli(*send_args(m1, m2), "--", body)
    assert sent.code == 0
    assert cli("message", "show", str(sent.json()["message_id"]), "--json").json()["text"] == body


def test_invalid_byte_deep_in_a_long_file_is_refused_at_its_offset(cli, trio, db_path, tmp_path):
    _, _, (m1, m2) = trio
    good = big_body(3 * 1024 * 1024).encode("utf-8")
    path = tmp_path / "late.bin"
    path.write_bytes(good + b"\xed\xa0\x80 trailing")  # an encoded surrogate: not UTF-8
    before = dump(db_path)
    result = cli(*send_args(m1, m2), "--file", str(path))
    expected = f"Error: file {path} is not valid UTF-8 (byte 0xed at offset {len(good)}).\n"
    assert assert_one_error_line(result, 2) == expected
    assert dump(db_path) == before


def test_five_mib_body_through_a_real_process(run_cli, trio):
    _, _, (m1, m2) = trio
    body = big_body(5 * 1024 * 1024)
    sent = run_cli(*send_args(m1, m2), "--file", "-", input=body.encode("utf-8"))
    assert (sent.code, sent.err) == (0, "")
    shown = run_cli("message", "show", str(sent.json()["message_id"]), "--json")
    assert shown.json()["text"] == body


# --- previews -----------------------------------------------------------------------------


@settings(FAST, max_examples=150)
@given(
    body=st.one_of(bodies, st.text(st.characters(exclude_categories=()), max_size=40)),  # surrogates too
    message_id=st.integers(min_value=1, max_value=MAX_ID),
    sender=st.integers(min_value=1, max_value=MAX_ID),
    max_text_len=st.integers(min_value=1, max_value=300),
)
def test_preview_is_inert_exact_and_cut_to_the_configured_length(body, message_id, sender, max_text_len):
    max_len = config.Settings({"CAFLEET_MAX_TEXT_LEN": str(max_text_len)}).max_text_len
    assert max_len == max_text_len
    check_preview(message_id, sender, clock.now(), body, max_len)


@FAST
@given(body=st.text(st.characters(exclude_categories=("Cc", "Cf", "Cs", "Zl", "Zp")), min_size=1, max_size=60))
def test_preview_keeps_printable_bodies_verbatim(body):
    line = render_preview(1, 2, clock.now(), body, 10_000).split("\n")[1]
    assert line == body


# --- ids ----------------------------------------------------------------------------------

ID_EDGES = [
    "1",
    "7",
    " 7 ",
    "\t7\n",
    "007",
    "0",
    "-0",
    "00",
    "-1",
    "+5",
    "1.0",
    "1e3",
    "0x10",
    "1_000",
    "٣",
    "１２",  # noqa: RUF001 - fullwidth digits, hostile on purpose
    "²",
    "",
    " ",
    "∞",
    "NaN",
    str(MAX_ID),
    str(MAX_ID + 1),
    str(10**30),
    "-" + str(10**30),
    "1" * 5000,
    "0" * 30 + "5",
    "--json",
    "-h",
    "--help",
    "--",
    "1\x00",
    "\udcff",
    "1 2",
]
hostile_ids = st.one_of(
    st.sampled_from(ID_EDGES),
    st.text(max_size=24),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.integers(min_value=MAX_ID - 3, max_value=MAX_ID + 3).map(str),
)

# (where the id goes, the error prefix naming it). "{id}" is the hostile value; positional
# ids follow "--" so that a value like "-h" is taken as the id, not as an option.
ID_SLOTS = [
    (["message", "show", "--", "{id}"], "MESSAGE_ID"),
    (["message", "ack", "--", "{id}"], "MESSAGE_ID"),
    (["message", "poll", "--", "{id}"], "MEMBER_ID"),
    (["message", "wait", "--timeout", "0", "--", "{id}"], "MEMBER_ID"),
    (["message", "listen", "--", "{id}"], "MEMBER_ID"),
    (["member", "show", "--", "{id}"], "MEMBER_ID"),
    (["member", "list", "--", "{id}"], "FLEET_ID"),
    (["member", "delete", "--", "{id}"], "MEMBER_ID"),
    (["member", "capture", "--", "{id}"], "MEMBER_ID"),
    (["member", "prompt", "--", "{id}", "hello"], "MEMBER_ID"),
    (["member", "capture", "--lines", "{id}", "--", "5"], "--lines"),
    (["fleet", "show", "--", "{id}"], "FLEET_ID"),
    (["fleet", "delete", "--", "{id}"], "FLEET_ID"),
    (["fleet", "watch", "--", "{id}"], "FLEET_ID"),
    (["message", "send", "--from-member-id", "{id}", "--to-member-id", "5", "hi"], "--from-member-id"),
    (["message", "send", "--from-member-id", "5", "--to-member-id", "{id}", "hi"], "--to-member-id"),
    (["message", "broadcast", "--from-member-id", "{id}", "hi"], "--from-member-id"),
    (["member", "create", "--fleet-id", "{id}", "--name", "n", "--description", "d", "go"], "--fleet-id"),
]


def valid_id(raw: str, high: int = MAX_ID) -> bool:
    digits = raw.strip().lstrip("0")
    return raw.strip().isascii() and raw.strip().isdigit() and 0 < len(digits) <= 19 and int(digits) <= high


@settings(FAST, max_examples=120)
@given(raw=hostile_ids, slot=st.sampled_from(ID_SLOTS))
def test_any_id_is_a_usage_error_or_a_clean_not_found(cli, db_path, raw, slot):
    """On an empty database every well-formed id names nothing: exit 1, "not found";
    everything else is a usage error naming the argument. Nothing is ever written."""
    cli("fleet", "list")  # initialise the file once, so the dump below has something to read
    template, name = slot
    before = dump(db_path)
    result = cli(*[raw if part == "{id}" else part for part in template])
    if valid_id(raw, config.declared(name).high if name == "--lines" else MAX_ID):
        message = assert_one_error_line(result, 1)
        assert "not found" in message
    else:
        message = assert_one_error_line(result, 2)
        assert message.startswith(f"Error: {name} must be ")
        assert len(message) < 300  # a long argument is quoted cut, never echoed whole
    assert dump(db_path) == before


@pytest.mark.parametrize("raw", [str(2**63), str(10**30), "99999999999999999999", "1" * 5000])
def test_ids_beyond_sqlite_integers_are_usage_errors_in_a_real_process(run_cli, raw):
    result = run_cli("message", "show", raw)
    shown = repr(raw) if len(raw) <= 40 else repr(raw[:40]) + "…"
    assert (result.code, result.out) == (2, "")
    assert result.err == f"Error: MESSAGE_ID must be at most {MAX_ID}, got {shown}.\n"


def test_largest_sqlite_integer_is_a_clean_not_found(cli):
    result = cli("message", "ack", str(MAX_ID))
    assert assert_one_error_line(result, 1) == f"Error: message {MAX_ID} not found.\n"


# --- environment values -------------------------------------------------------------------

ENV_NAMES = [
    "CAFLEET_DATABASE_URL",
    "CAFLEET_MAX_TEXT_LEN",
    "CAFLEET_WAIT_INTERVAL",
    "CAFLEET_BUSY_TIMEOUT",
    "CAFLEET_LOCK_TIMEOUT",
    "CAFLEET_MULTIPLEXER",
    "XDG_DATA_HOME",
    "HOME",
]
PATH_NAMES = {"CAFLEET_DATABASE_URL", "XDG_DATA_HOME", "HOME"}
# What a real environment can hold: any bytes but NUL, decoded as Python decodes os.environ.
env_text = st.binary(max_size=40).filter(lambda b: b"\x00" not in b).map(os.fsdecode)
env_numbers = st.sampled_from(
    ["0", "-1", "1", "0.5", "1e308", "1e400", "inf", "-inf", "nan", "9" * 400, " 3 ", "٣", "1_0", "0x10", "1e-300"]
)
# Path values are kept inside the example's own folder: relative values must be refused,
# absolute ones are rooted there with components that cannot climb out ("." and ".." removed).
segment = env_text.filter(lambda s: "/" not in s and s not in ("", ".", ".."))


@st.composite
def hostile_environment(draw) -> dict:
    """{name: value}: a string, None (unset), or for a path variable (kind, components)."""
    chosen = draw(st.lists(st.sampled_from(ENV_NAMES), unique=True, min_size=1, max_size=4))
    values = {}
    for name in chosen:
        if name in PATH_NAMES:
            kind = draw(st.sampled_from(["unset", "empty", "relative", "rooted", "sqlite-url"]))
            if kind == "relative":
                value = draw(env_text.filter(lambda s: not s.startswith(("/", "sqlite:///"))))
            elif kind in ("rooted", "sqlite-url"):
                value = (kind, draw(st.lists(segment, min_size=1, max_size=3)))  # rooted by realise()
            else:
                value = None if kind == "unset" else ""
        else:
            value = draw(st.one_of(env_text, env_numbers, st.sampled_from(["tmux", "herdr", "", "TMUX", "screen"])))
        values[name] = value
    return values


def realise(values: dict, base: dict, root: str) -> dict:
    environ = dict(base)
    for name, value in values.items():
        if value is None:
            environ.pop(name, None)
        elif isinstance(value, tuple):
            kind, parts = value
            path = os.path.join(root, *parts)
            environ[name] = "sqlite:///" + path if kind == "sqlite-url" and name == "CAFLEET_DATABASE_URL" else path
        else:
            environ[name] = value
    return environ


@pytest.fixture
def paned(build):
    """A fleet whose member m2 has a concrete pane on a tmux socket that does not exist, so
    a send runs the whole notification drain (lock, preview, tmux) and fails cleanly."""
    fleet_id, director, (m1, _) = build.fleet()
    return fleet_id, director, m1, build.member(fleet_id, "paned", pane_id="%7")


@FEW
@given(values=hostile_environment())
def test_any_environment_value_gives_success_or_one_error_line(cli, env, paned, tmp_path, monkeypatch, values):
    fleet_id, _director, m1, m2 = paned
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    monkeypatch.chdir(cwd)
    root = tempfile.mkdtemp(dir=tmp_path, prefix="root")
    base = {k: v for k, v in env.items() if not k.startswith("TMUX")}
    environ = realise(values, base, root)
    try:
        db = config.database_location(environ)
    except ConfigError:  # what the commands must report in one line
        db = None
    if db is not None:  # the fixture's database, its XDG/HOME default, or one under root
        assert db.startswith(str(tmp_path) + os.sep), db
    commands = [
        ["message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "--", "hi \x1b[2J there"],
        ["message", "wait", str(m2), "--timeout", "0"],
        ["message", "show", "1"],
        ["member", "list", str(fleet_id)],
        ["fleet", "create", "--name", "x", "--coding-agent", "claude"],
    ]
    for args in commands:
        result = cli(*args, environ=environ)
        assert "Traceback" not in result.err and "internal error" not in result.err, (args, result)
        lines = result.err.splitlines()
        assert all(line.startswith(("Error: ", "Warning: ")) for line in lines), (args, result)
        errors = [line for line in lines if line.startswith("Error: ")]
        if result.code in (1, 2):  # one error, and it is the last word
            assert len(errors) == 1 and lines[-1] == errors[0], (args, result)
        else:
            assert result.code in (0, 3) and errors == [], (args, result)
    assert list(cwd.iterdir()) == []  # nothing written relative to the working directory


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("CAFLEET_DATABASE_URL", b"relative/\xff.db", "is not supported; use sqlite:///ABS/PATH"),
        (
            "CAFLEET_DATABASE_URL",
            b"postgres://127.0.0.1:1/x",
            "cannot reach database postgres://127.0.0.1:1/x",
        ),  # nothing listens on port 1
        ("CAFLEET_MAX_TEXT_LEN", b"\xff\xfe", "CAFLEET_MAX_TEXT_LEN must be an integer from 1 to 1000000"),
        ("CAFLEET_BUSY_TIMEOUT", b"nan", "CAFLEET_BUSY_TIMEOUT must be a number of seconds from 0 to 3600, got 'nan'."),
        ("CAFLEET_WAIT_INTERVAL", b"-1", "CAFLEET_WAIT_INTERVAL must be a number of seconds from 0.005 to 5"),
        ("XDG_DATA_HOME", b"rel\xc3", "XDG_DATA_HOME 'rel\\udcc3' must be an absolute path."),
    ],
)
def test_bad_environment_bytes_in_a_real_process(cli, env, trio, name, value, message):
    """Each variable is read on this path: the store (URL, busy timeout), wait's check
    interval, and the text rendering of the pending message (max text length)."""
    _, _, (m1, m2) = trio
    assert cli(*send_args(m1, m2), "pending").code == 0
    environ = {k.encode(): v.encode() for k, v in env.items()}
    if name == "XDG_DATA_HOME":
        del environ[b"CAFLEET_DATABASE_URL"]
    environ[name.encode()] = value
    proc = subprocess.run(
        [sys.executable, "-m", "cafleet", "message", "wait", str(m2), "--timeout", "0"],
        capture_output=True,
        env=environ,
        timeout=60,
    )
    err = proc.stderr.decode("utf-8", "surrogateescape")
    expected_code = 1 if name in ("CAFLEET_DATABASE_URL", "XDG_DATA_HOME") else 2  # a bad location or a bad value
    assert (proc.returncode, proc.stdout) == (expected_code, b"")
    assert err.startswith("Error: ") and err.count("\n") == 1 and message in err, err


# A setting the notification drain reads must be refused before anything happens: a
# command that exits 1 after storing its message (or typing owed previews) would make an
# agent that trusts the exit code resend.


@pytest.mark.parametrize("name", ["CAFLEET_MAX_TEXT_LEN", "CAFLEET_LOCK_TIMEOUT", "CAFLEET_SUBMIT_SETTLE"])
def test_a_send_that_stored_its_message_never_exits_nonzero(cli, env, paned, db_path, name):
    _, _, m1, m2 = paned
    before = dump(db_path)
    result = cli(
        "message",
        "send",
        "--from-member-id",
        str(m1),
        "--to-member-id",
        str(m2),
        "hi",
        environ=dict(env, **{name: "-5"}),
    )
    stored = dump(db_path) != before
    assert not stored and result.code == 2 and result.out == "", result


def test_wait_refuses_a_bad_interval_before_typing_any_preview(cli, env, paned):
    _, _, m1, m2 = paned
    assert cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "owed").code == 0
    result = cli("message", "wait", str(m1), "--timeout", "0", environ=dict(env, CAFLEET_WAIT_INTERVAL="x"))
    assert assert_one_error_line(result, 2).startswith("Error: CAFLEET_WAIT_INTERVAL must be")


# --- settings: read and bounded before anything is stored (cafleet.config) ----------------


@pytest.fixture
def pane_fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        yield fleet


def test_submit_settle_beyond_its_bound_is_refused_before_the_message_is_stored(pane_fleet):
    """`CAFLEET_SUBMIT_SETTLE=1e10` used to store the message, print its id, and then die
    with an internal error in the sleep before Enter: the caller resends, a duplicate."""
    fleet = pane_fleet
    member = fleet.create("settle")["member_id"]
    before = dump(fleet.db)
    result = fleet.send(fleet.director, member, "once only", environ=dict(fleet.environ, CAFLEET_SUBMIT_SETTLE="1e10"))
    assert (result.code, result.out) == (2, ""), result
    assert result.err == "Error: CAFLEET_SUBMIT_SETTLE must be a number of seconds from 0 to 10, got '1e10'.\n"
    assert dump(fleet.db) == before
    assert fleet.submits(member) == []


def test_busy_timeout_is_bounded_not_wrapped(cli, env, trio, db_path):
    """SQLite keeps the busy timeout as an int of milliseconds: `CAFLEET_BUSY_TIMEOUT=3e6`
    used to overflow it and silently mean "do not wait at all"."""
    _, _, (m1, m2) = trio
    before = dump(db_path)
    result = cli(
        "message",
        "send",
        "--from-member-id",
        str(m1),
        "--to-member-id",
        str(m2),
        "hi",
        environ=dict(env, CAFLEET_BUSY_TIMEOUT="3e6"),
    )
    assert (result.code, result.out) == (2, "")
    assert result.err == "Error: CAFLEET_BUSY_TIMEOUT must be a number of seconds from 0 to 3600, got '3e6'.\n"
    assert dump(db_path) == before
    ctx = Context(environ=dict(env, CAFLEET_BUSY_TIMEOUT="3600"))  # the bound itself is kept exactly
    try:
        assert ctx.store().execute("PRAGMA busy_timeout").fetchone()[0] == 3_600_000
    finally:
        ctx.close()


def test_watch_interval_beyond_its_bound_is_a_usage_error(run_cli, trio, db_path):
    """`fleet watch --interval 1e308` used to end in an internal error (sleep overflow)."""
    fleet_id, _, _ = trio
    before = dump(db_path)
    result = run_cli("fleet", "watch", str(fleet_id), "--interval", "1e308", timeout=30)
    assert (result.code, result.out) == (2, "")
    assert result.err == "Error: --interval must be a number of seconds from 0.2 to 3600, got '1e308'.\n"
    assert dump(db_path) == before


class Exploding(io.BytesIO):
    """A stdout whose first write fails with an unexpected error: the internal-error path."""

    def write(self, data):
        raise RuntimeError("boom")


@pytest.mark.parametrize(
    "value, on",
    [
        ("1", True),
        ("true", True),
        ("YES", True),
        ("on", True),
        ("0", False),
        ("false", False),
        ("No", False),
        ("off", False),
        ("", False),
    ],
)
def test_debug_switch_turns_on_only_for_yes_words(env, trio, value, on):
    """`CAFLEET_DEBUG=0` used to turn debugging on (any non-empty value did)."""
    fleet_id, _, _ = trio
    err = io.BytesIO()
    ctx = Context(environ=dict(env, CAFLEET_DEBUG=value), stdout=Exploding(), stderr=err)
    if on:
        with pytest.raises(RuntimeError, match="boom"):
            main(["fleet", "show", str(fleet_id)], ctx)
    else:
        assert main(["fleet", "show", str(fleet_id)], ctx) == 1
        assert err.getvalue().decode().startswith("Error: internal error (RuntimeError: boom)")


@pytest.mark.parametrize("value", ["2", "maybe", "y", "enable"])
def test_debug_switch_refuses_other_words(cli, env, value):
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DEBUG=value))
    assert (result.code, result.out) == (2, "")
    assert result.err == (
        f"Error: CAFLEET_DEBUG must be 1, true, yes or on (on); 0, false, no or off (off), got {value!r}.\n"
    )


# --- every refusal: one line, the right exit code, nothing written -------------------------


@pytest.fixture
def history(cli, build, store):
    """A fleet with an ACKed message, a deregistered member and a deleted second fleet."""
    fleet_id, director, (m1, m2) = build.fleet("live")
    gone = build.member(fleet_id, "gone")
    dead_fleet, _dead_director, (d1, _) = build.fleet("dead")
    acked = cli(*send_args(m1, m2), "done").json()["message_id"]
    assert cli("message", "ack", str(acked)).code == 0
    assert cli("member", "delete", str(gone)).code == 0
    assert cli("fleet", "delete", str(dead_fleet)).code == 0
    return {
        "fleet": fleet_id,
        "director": director,
        "m1": m1,
        "m2": m2,
        "gone": gone,
        "dead_fleet": dead_fleet,
        "d1": d1,
        "acked": acked,
    }


REFUSALS = [
    # (argv with {placeholders}, stdin, exit code, a fragment of the one error line)
    ("message send --from-member-id {m1} --to-member-id {m2}", b"", 2, "missing the body"),
    ("message send --from-member-id {m1} --to-member-id {m2} --file - text", b"x", 2, "not both"),
    ("message send --from-member-id {m1} --to-member-id {m2} --file -", b"\xc0\xaf", 2, "not valid UTF-8 (byte 0xc0"),
    ("message send --from-member-id {m1} --to-member-id {m2} --file -", b" \n\t", 2, "blank"),
    ("message send --from-member-id {m1} --to-member-id {m2} --file /nonexistent/x", b"", 2, "does not exist"),
    ("message send --from-member-id {m1} --to-member-id {m2} --file /", b"", 2, "is a directory"),
    ("message send --from-member-id {m1} --to-member-id {m1} one two", b"", 2, "unexpected argument 'two'"),
    ("message send --from-member-id {m1} --from-member-id {m1} --to-member-id {m2} x", b"", 2, "more than once"),
    ("message send --from-member-id {m1} --to-member-id {d1} x", b"", 1, "not in the same fleet"),
    ("message send --from-member-id {m1} --to-member-id {gone} x", b"", 1, "is deregistered"),
    ("message send --from-member-id {d1} --to-member-id {d1} x", b"", 1, "was deleted"),
    ("message send --from-member-id {m1} --to-member-id 999999 x", b"", 1, "recipient member 999999 not found"),
    ("message broadcast --from-member-id {m1} x", b"", 1, "only the Director broadcasts"),
    ("message ack {acked}", b"", 1, "already acknowledged"),
    ("message ack 999999", b"", 1, "message 999999 not found"),
    ("message wait {m1} --timeout -1", b"", 2, "--timeout must be a number of seconds from 0 to 31536000, got '-1'."),
    ("message wait {m1} --timeout nan", b"", 2, "--timeout must be a number of seconds from 0 to 31536000, got 'nan'."),
    ("message poll", b"", 2, "missing MEMBER_ID"),
    ("message poll {m1} --bogus", b"", 2, "unknown option '--bogus'"),
    ("message poll {m1} --json=yes", b"", 2, "unknown option '--json'"),
    ("message frobnicate", b"", 2, "unknown command message 'frobnicate'"),
    ("member delete {director}", b"", 1, "is the root Director"),
    ("member delete {gone}", b"", 1, "already deregistered"),
    ("member list {dead_fleet}", b"", 1, "was deleted"),
    ("member create --fleet-id {dead_fleet} --name n --description d go", b"", 1, "was deleted"),
    ("member prompt {m1} two\nlines", b"", 2, "one non-blank line"),
    ("member capture {m1} --lines 0", b"", 2, "--lines must be an integer from 1 to 10000, got '0'."),
    ("member capture {gone}", b"", 1, "is deregistered"),
    ("fleet show 999999", b"", 1, "fleet 999999 not found"),
    ("fleet create --name x --coding-agent nope", b"", 2, "nope"),
]


@pytest.mark.parametrize("template, stdin, code, fragment", REFUSALS)
def test_every_refusal_is_one_line_and_writes_nothing(cli, history, db_path, template, stdin, code, fragment):
    argv = [part.format(**history) for part in template.split(" ")]
    before = dump(db_path)
    result = cli(*argv, input=stdin)
    message = assert_one_error_line(result, code)
    assert fragment in message, message
    assert dump(db_path) == before


def test_hostile_body_text_output_stays_display_safe(cli, trio):
    """The text form of a hostile body never drives the reader's terminal."""
    _, _, (m1, m2) = trio
    body = "".join(SEQUENCES)
    message_id = cli(*send_args(m1, m2), "--", body.replace("\x00", "")).json()["message_id"]
    for args in (["message", "show", str(message_id)], ["message", "poll", str(m2)]):
        out = cli(*args).out
        assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out and "\r" not in out
    line = render.message_line(cli("message", "show", str(message_id), "--json").json(), 10_000)
    assert "\n" not in line and "\x1b" not in line
