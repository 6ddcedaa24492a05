"""Ids, names, descriptions and bodies are checked by one module (``cafleet.validation``)
for the command line, the WebUI API and the broker; every user-supplied string shown as
text is display-safe; the broker's errors speak of the domain, with command-line advice
kept in a hint that only the command line prints.
"""

from __future__ import annotations

import ast
import os
import re
import sqlite3
import sys
import warnings
from pathlib import Path

import pytest

from cafleet import validation
from cafleet.broker import fleets, members
from cafleet.web.app import WebConfig, create_app
from cafleet.web.security import allowed_hosts

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

ROOT = Path(__file__).resolve().parent.parent
BASE = "http://127.0.0.1:8000"
HUGE = "1" * 5000
# What a hostile name holds: a title-setting OSC, clear screen, 8-bit CSI, a bell, a newline.
HOSTILE = "\x1b]0;pwned\x07evil\x1b[2J\x9b6n\r\nname\t"
SHOWN = "\\x1b]0;pwned\\x07evil\\x1b[2J\\x9b6n\\x0d\\x0aname\\x09"


def dump(db_path: str) -> list[str]:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def one_error_line(result, code: int) -> str:
    assert (result.code, result.out) == (code, ""), result
    assert result.err.startswith("Error: ") and result.err.count("\n") == 1, result
    assert "internal error" not in result.err, result
    return result.err


@pytest.fixture
def client(db_path, store, env):
    app = create_app(WebConfig(database=db_path, allowed_hosts=allowed_hosts("127.0.0.1", 8000, True), environ=env))
    with TestClient(app, base_url=BASE, raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def trio(build):
    return build.fleet()


# --- the WebUI API --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        f"/api/fleets/{HUGE}",
        f"/api/fleets/{HUGE}/messages",
        f"/api/members/{HUGE}/inbox",
        f"/api/events?fleet_id={HUGE}",
        f"/api/fleets/1/messages?before={HUGE}",
        f"/api/members/2/inbox?fleet_id={HUGE}",
        f"/api/fleets/1/messages?limit={HUGE}",
    ],
)
def test_api_ids_of_any_length_are_a_clean_400(client, trio, path):
    """A 5,000-digit id used to reach int()'s digit limit: a 500."""
    response = client.get(path)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert re.fullmatch(r"[\w ]+ must be (at most \d+|an integer from 1 to 200), got '1{40}'…", error), error


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("5", 5),
        (" 0007 ", 7),
        ("00005", 5),
        ("0" * 5000 + "5", 5),
        ("200", 200),
        ("0", None),
        ("201", None),
        ("-1", None),
        ("+5", None),
        ("5.0", None),
        ("1_0", None),
        ("\u0661\u0662", None),  # Arabic-Indic digits: str.isdigit() says yes, ids say no
        ("", None),
        (HUGE, None),
    ],
)
def test_a_bounded_integer_is_plain_decimal_within_its_range(raw, value):
    """The one rule for an integer from text (ids, the WebUI's limit and lines): ASCII
    digits, leading zeros and surrounding blanks allowed, counted before int()."""
    assert validation.bounded_int(raw, 1, 200) == value


@pytest.mark.parametrize("depth", [10_000, 400_000])  # under the 1 MiB body limit
def test_deeply_nested_json_is_a_clean_400_and_stores_nothing(client, trio, store, depth):
    """Nesting deeper than the interpreter's stack used to escape as RecursionError: a 500."""
    _, director, (m1, _) = trio
    for raw in (
        b"[" * depth + b"]" * depth,
        b'{"from_member_id": %d, "to_member_id": %d, "text": %s}' % (director, m1, b"[" * depth + b"]" * depth),
    ):
        response = client.post("/api/messages", content=raw, headers={"content-type": "application/json"})
        assert (response.status_code, response.json()) == (400, {"error": "request body is nested too deeply"})
    assert store.execute("SELECT count(*) FROM messages").fetchone()[0] == 0


def test_api_leaves_the_command_line_hint_out(client, cli):
    assert client.get("/api/fleets/999").json() == {"error": "fleet 999 not found."}
    shown = cli("fleet", "show", "999")
    assert shown.err == "Error: fleet 999 not found; `cafleet fleet list` shows the live fleets.\n"


# --- names and descriptions on the command line ---------------------------------------------


def bad_utf8(text: str) -> str:
    """What Python makes of argv bytes that are not UTF-8 (surrogate escapes)."""
    return os.fsdecode(text.encode() + b"\xff\xfe")


@pytest.mark.parametrize("flag", ["--name", "--description"])
def test_invalid_utf8_in_member_name_or_description_is_a_usage_error(cli, trio, db_path, flag):
    fleet_id, _, _ = trio
    values = {"--name": "worker", "--description": "does work"}
    values[flag] = bad_utf8("w")
    before = dump(db_path)
    result = cli(
        "member",
        "create",
        "--fleet-id",
        str(fleet_id),
        "--name",
        values["--name"],
        "--description",
        values["--description"],
        "--coding-agent",
        "standin",
        "go",
    )
    assert one_error_line(result, 2) == f"Error: {flag} is not valid UTF-8.\n"
    assert dump(db_path) == before


def test_invalid_utf8_in_fleet_name_is_a_usage_error(cli, tmux_server, env, db_path):
    environ = dict(env, **tmux_server.environ_for(tmux_server.main_pane()))
    assert cli("fleet", "list", environ=environ).code == 0
    before = dump(db_path)
    result = cli("fleet", "create", "--name", bad_utf8("team"), "--coding-agent", "claude", environ=environ)
    assert one_error_line(result, 2) == "Error: --name is not valid UTF-8.\n"
    assert dump(db_path) == before


def test_invalid_utf8_argv_in_a_real_process(run_cli, trio, env):
    """The bytes a shell passes, decoded by the interpreter itself."""
    import subprocess

    fleet_id, _, _ = trio
    argv = [
        sys.executable.encode(),
        b"-m",
        b"cafleet",
        b"member",
        b"create",
        b"--fleet-id",
        str(fleet_id).encode(),
        b"--name",
        b"bad\xff",
        b"--description",
        b"d",
        b"--coding-agent",
        b"standin",
        b"go",
    ]
    proc = subprocess.run(argv, capture_output=True, env=env, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, b"", b"Error: --name is not valid UTF-8.\n")


# --- text output is display-safe; JSON is exact ---------------------------------------------


def test_hostile_names_are_shown_escaped_by_fleet_and_member_text_output(cli, store):
    fleet = fleets.create_fleet(
        store,
        name=HOSTILE,
        coding_agent="claude",
        backend="tmux",
        session="$0@/nonexistent",
        window_id="@0",
        pane_id="%0",
    )
    fleet_id = fleet["fleet_id"]
    member_id = members.register_member(
        store,
        fleet_id=fleet_id,
        name=HOSTILE,
        description=HOSTILE,
        backend="tmux",
        session="$0@/nonexistent",
        window_id="@0",
        coding_agent="claude",
    )
    for args in (
        ["fleet", "list"],
        ["fleet", "show", str(fleet_id)],
        ["member", "list", str(fleet_id)],
        ["member", "show", str(member_id)],
    ):
        result = cli(*args)
        assert result.code == 0, result
        assert SHOWN in result.out, (args, result.out)
        text = result.out.replace("\n", "")
        assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0 for ch in text), (args, result.out)
        exact = cli(*args, "--json").json()
        records = exact if isinstance(exact, list) else [exact]
        assert any(record.get("name") == HOSTILE for record in records), exact
    assert cli("member", "show", str(member_id), "--json").json()["description"] == HOSTILE


def test_fleet_and_member_create_echo_names_escaped(cli, tmux_server, env):
    environ = dict(env, **tmux_server.environ_for(tmux_server.main_pane()))
    created = cli("fleet", "create", "--name", HOSTILE, "--coding-agent", "standin", environ=environ)
    assert created.code == 0, created
    assert created.out == f"created fleet 1 ({SHOWN}); you are its Director, member 1\n"
    member = cli(
        "member",
        "create",
        "--fleet-id",
        "1",
        "--name",
        HOSTILE,
        "--description",
        HOSTILE,
        "--coding-agent",
        "standin",
        "go",
        environ=environ,
    )
    assert member.code == 0, member
    assert member.out.startswith(f"created member 2 ({SHOWN}, standin) in pane %")
    assert "\x1b" not in member.out and "\x07" not in member.out
    assert cli("member", "show", "2", "--json", environ=environ).json()["name"] == HOSTILE
    assert cli("member", "delete", "2", environ=environ).code == 0


# --- the broker speaks of the domain --------------------------------------------------------


def broker_error_texts() -> list[tuple[str, str]]:
    """Every string literal in an exception raised under src/cafleet/broker/, message and hint."""
    found = []
    for path in sorted((ROOT / "src" / "cafleet" / "broker").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                for part in ast.walk(node.exc):
                    if isinstance(part, ast.Constant) and isinstance(part.value, str):
                        found.append((path.name, part.value))
    return found


def test_broker_errors_name_no_command_line_flags():
    texts = broker_error_texts()
    assert any("not found" in text for _, text in texts)  # the scan sees the raises
    flags = [(name, text) for name, text in texts if re.search(r"(?<![\w-])--[a-z]", text)]
    assert flags == []


def test_broker_refuses_bad_names_in_domain_words(store, build):
    fleet_id, _, _ = build.fleet()
    from cafleet.errors import UsageError

    cases = [
        (
            lambda: fleets.create_fleet(
                store, name=" ", coding_agent="claude", backend="tmux", session="s", window_id="@0", pane_id="%0"
            ),
            "the fleet name must not be blank.",
        ),
        (lambda: build.member(fleet_id, "\udcff"), "the member name is not valid UTF-8."),
        (
            lambda: members.register_member(
                store,
                fleet_id=fleet_id,
                name="n",
                description="\udcff",
                backend="tmux",
                session="s",
                window_id="@0",
                coding_agent="claude",
            ),
            "the member description is not valid UTF-8.",
        ),
    ]
    for call, message in cases:
        with pytest.raises(UsageError) as caught:
            call()
        assert (caught.value.message, caught.value.hint) == (message, None)


def test_cli_prints_the_hint_after_the_message(cli, trio):
    fleet_id, director, _ = trio
    result = cli("member", "delete", str(director))
    assert one_error_line(result, 1) == (
        f"Error: member {director} is the root Director of fleet {fleet_id}; use `cafleet fleet delete {fleet_id}`.\n"
    )
