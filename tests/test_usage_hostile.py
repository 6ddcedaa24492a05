"""Usage records, price files, budgets and inputs as an attack surface (docs/usage.md), on
both stores: every number read from an agent's records is bounded (a record out of range
is skipped and counted, never an internal error), a bad price file is refused, a record
is tied to a member only through what the member cannot forge, the budget gate stands on
every way work reaches a member, and every input of a budget or a member is checked
before anything is written."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from cafleet.agents import previews
from cafleet.agents.usage import claude, totals
from cafleet.agents.usage.codex import codex_usage
from cafleet.agents.usage.opencode import opencode_usage
from cafleet.broker import usage
from cafleet.store.engines import open_store
from tests.support.pane_fleet import tmux_fleet
from tests.support.tmux_fixtures import wait_for
from tests.support.usage_records import call_line, call_lines, user_line, write_calls, write_live_session
from tests.support.watch_stream import Stream
from tests.support.web_server import BASE, make_app, web_client


def messages(store) -> int:
    return store.execute("SELECT count(*) FROM messages").fetchone()[0]


def one_error_line(result, code: int) -> str:
    assert result.code == code and result.out in ("", b""), result
    err = result.err if isinstance(result.err, str) else result.err.decode()
    assert err.startswith("Error: ") and err.count("\n") == 1, result
    assert "internal error" not in err and "Traceback" not in err, result
    return err


def send(cli, from_id: int, to_id: int, *extra: str, environ=None):
    return cli(
        "message", "send", "--from-member-id", str(from_id), "--to-member-id", str(to_id), *extra, environ=environ
    )


# --- item 9: every number read from a record is bounded --------------------------------------

GOOD = {"input_tokens": 1000, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 10}


def raw_call(message_id: str, usage_text: str) -> str:
    """An assistant line whose usage object is ``usage_text`` exactly as written."""
    head = '{"type": "assistant", "requestId": "req_' + message_id + '", "message": {"id": "' + message_id
    return head + '", "model": "claude-sonnet-4-5", "usage": ' + usage_text + "}}\n"


HOSTILE_RECORDS = [
    raw_call("huge", '{"input_tokens": 1' + "0" * 400 + "}"),  # 10**400: OverflowError once priced
    raw_call("digits", '{"input_tokens": ' + "7" * 5000 + "}"),  # beyond int()'s digit limit
    raw_call("over-cap", '{"cache_read_input_tokens": ' + str(2**53) + "}"),
    raw_call("negative", '{"output_tokens": -5}'),
    raw_call("fraction", '{"output_tokens": 1.5}'),
    raw_call("text", '{"output_tokens": "12"}'),
    raw_call("bool", '{"output_tokens": true}'),
    call_line("list-id", GOOD, request_id=["unhashable"]),
    call_line("dict-model", GOOD, model={"name": "claude"}),
    '{"type": "assistant", "usage": ' + "[" * 100_000 + "]" * 100_000 + "}\n",  # nested past the stack
    '{"type": "assistant", "usage": not json\n',
]


@pytest.fixture
def hostile_member(cli, build, store, tmp_path):
    """A member whose transcript holds one good call and every hostile record."""
    config = tmp_path / "claude-config"
    fleet_id, director, (member, _) = build.fleet("hostile", 2)
    usage.record_source(
        store,
        member,
        coding_agent="claude",
        session_id="s-hostile",
        data_dir=str(config),
        cwd="/work",
        budget_tokens=5000,
    )
    write_calls(config, "s-hostile", call_line("good", GOOD) + "".join(HOSTILE_RECORDS))
    return fleet_id, director, member


def test_an_out_of_range_number_in_a_record_is_skipped_and_counted_everywhere(cli, store, db_path, env, hostile_member):
    """`input_tokens` of 10**400 (and every other number out of range or of the wrong kind)
    makes its record unreadable: skipped and counted in `unreadable_records`, while
    `member usage`, `fleet usage`, `member list`, a send to the member, the WebUI's
    `/usage` and `fleet watch` go on with the records that are sound."""
    fleet_id, director, member = hostile_member
    report = cli("member", "usage", str(member), "--json")
    assert report.code == 0, report
    shown = report.json()
    assert (shown["calls"], shown["tokens"]["total"]) == (1, 1010)
    assert shown["unreadable_records"] == len(HOSTILE_RECORDS)
    text = cli("member", "usage", str(member))
    assert text.code == 0 and f"{len(HOSTILE_RECORDS)} unreadable records skipped" in text.out.splitlines()[0], text

    whole = cli("fleet", "usage", str(fleet_id), "--json")
    assert whole.code == 0, whole
    assert (whole.json()["tokens"]["total"], whole.json()["unreadable_records"]) == (1010, len(HOSTILE_RECORDS))
    listed = cli("member", "list", str(fleet_id))
    assert listed.code == 0 and any(line.endswith("1010/5000 tok") for line in listed.out.splitlines()), listed
    sent = send(cli, director, member, "more work", "--json")
    assert sent.code == 0, sent
    assert messages(store) == 1
    with web_client(make_app(db_path, env)) as client:
        served = client.get(f"/api/fleets/{fleet_id}/usage")
    assert served.status_code == 200 and served.json()["tokens"]["total"] == 1010, served.text

    with store.write():  # now over: the watch reports the crossing and keeps running
        store.execute(f"UPDATE {usage.TABLE} SET budget_tokens = 1000 WHERE member_id = ?", (member,))
    stream = Stream(env, fleet_id, "--interval", "0.2")
    try:
        crossed = stream.wait_event(lambda e: e["event"] == "over-budget", timeout=30)
        assert crossed["member_id"] == member and "1010 tokens spent" in crossed["detail"]
        assert stream.proc.poll() is None, stream.proc.stderr.read()
    finally:
        stream.stop()


def test_codex_and_opencode_records_out_of_range_are_skipped_and_counted(tmp_path):
    """The same bounds on the other agents' records: codex's rollout lines and opencode's
    database rows (tokens past 2**53, infinite or negative dollars)."""
    started = "2026-01-02T03:04:05.000000+00:00"
    folder = tmp_path / "codex" / "sessions" / "2026" / "01" / "02"
    folder.mkdir(parents=True)
    lines = [
        json.dumps({"type": "session_meta", "payload": {"text": "- fleet id: 1\n- your member id: 2\n"}}),
        json.dumps({"type": "turn_context", "payload": {"model": "gpt-5"}}),
        json.dumps(
            {
                "type": "token_usage_record",
                "payload": {"response_id": "r1", "usage": {"input_tokens": 500, "output_tokens": 5}},
            }
        ),
        '{"type": "token_usage_record", "payload": {"response_id": "r2", "usage": {"input_tokens": 1%s}}}'
        % ("0" * 400),
        json.dumps({"type": "token_usage_record", "payload": {"response_id": ["r3"], "usage": {"input_tokens": 1}}}),
        json.dumps({"type": "token_usage_record", "payload": {"response_id": "r4", "usage": {"output_tokens": -1}}}),
        json.dumps({"type": "turn_context", "payload": {"model": ["not", "a", "name"]}}),
    ]
    (folder / "rollout-1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    found, _ = codex_usage(str(tmp_path / "codex"), started_at=started, fleet_id=1, member_id=2)
    assert found.report({})["tokens"]["total"] == 505
    assert found.unreadable == 4

    import sqlite3

    data = tmp_path / "opencode"
    data.mkdir()
    conn = sqlite3.connect(data / "opencode.db")
    conn.executescript(
        "CREATE TABLE session (id TEXT, directory TEXT, agent TEXT, parent_id TEXT, time_created INTEGER, "
        "model TEXT, cost REAL, tokens_input INTEGER, tokens_cache_write INTEGER, tokens_cache_read INTEGER, "
        "tokens_output INTEGER, tokens_reasoning INTEGER);"
        "CREATE TABLE part (session_id TEXT, data TEXT);"
    )
    marker = json.dumps({"type": "text", "text": "- fleet id: 1\n- your member id: 2\n"})
    rows = [  # id, parent, cost, input, output
        ("root", None, 0.5, 100, 10),
        ("huge", "root", 0.1, 2**62, 1),
        ("infinite", "root", float("inf"), 1, 1),
        ("negative", "root", -1.0, 1, 1),
    ]
    for sid, parent, cost, tokens_in, out in rows:
        conn.execute(
            "INSERT INTO session VALUES (?, '/work', 'cafleet', ?, 1767323045000, ?, ?, ?, 0, 0, ?, 0)",
            (sid, parent, json.dumps({"id": "claude-sonnet-4-5"}), cost, tokens_in, out),
        )
        conn.execute("INSERT INTO part VALUES (?, ?)", (sid, marker))
    conn.commit()
    conn.close()
    found, _ = opencode_usage(str(data), cwd="/work", started_at=started, fleet_id=1, member_id=2)
    report = found.report({})
    assert (report["tokens"]["total"], report["usd"], found.unreadable) == (110, 0.5, 3)


def test_a_transcript_line_past_its_bound_is_skipped_and_reading_goes_on(tmp_path, monkeypatch):
    """A line longer than MAX_LINE is skipped unread, also when it spans reads of a file
    still being written; the calls around it count once each."""
    monkeypatch.setattr(totals, "MAX_LINE", 1000)
    monkeypatch.setattr(totals.TranscriptReader, "CHUNK", 256)
    session = "0c0c0c0c-0000-4000-8000-000000000005"
    path = write_calls(tmp_path, session, call_lines("m1", 10, 1))
    reader = totals.TranscriptReader()

    def counted() -> tuple[int, int]:
        found, _ = claude.claude_usage(str(tmp_path), [session], reader)
        return found.report({})["calls"], found.report({})["tokens"]["total"]

    assert counted() == (1, 11)
    with open(path, "a", encoding="utf-8") as out:
        out.write('{"type": "assistant", "usage": "' + "x" * 3000)  # longer than the bound, not ended yet
    assert counted() == (1, 11)
    with open(path, "a", encoding="utf-8") as out:
        out.write("y" * 3000 + '"}\n' + call_lines("m2", 20, 2) + call_lines("m3", 30, 3, blocks=2))
    assert counted() == (3, 66)
    fresh = totals.TranscriptReader()  # the same from a first read of the whole file
    found, _ = claude.claude_usage(str(tmp_path), [session], fresh)
    assert (found.report({})["calls"], found.report({})["tokens"]["total"]) == (3, 66)
    assert path.stat().st_size == fresh.files[str(path)].offset
    with open(path, "a", encoding="utf-8") as out:
        out.write(user_line("[cafleet msg 7 from 1 2026-01-02T03:04:05]\u23cehi"))
    assert previews.claude_previews(str(tmp_path), session) == [(7, 1)]  # found past the long line


# --- item 9: a bad price file is refused ---------------------------------------------------------

BAD_PRICE_FILES = [
    '{"models": {"claude-sonnet-4": {"input": NaN}}}',
    '{"models": {"claude-sonnet-4": {"input": Infinity}}}',
    '{"models": {"claude-sonnet-4": {"output": -3}}}',
    '{"models": {"claude-sonnet-4": {"input": 1e400}}}',
    '{"models": {"claude-sonnet-4": {"input": 1%s}}}' % ("0" * 400),
    '{"models": {"claude-sonnet-4": {"input": 2000000}}}',
    '{"models": {"claude-sonnet-4": {"input": "3.0"}}}',
    '{"models": {"claude-sonnet-4": {"input": true}}}',
    '{"models": {"claude-sonnet-4": {"inptu": 3.0}}}',
    '{"models": {"claude-sonnet-4": 3.0}}',
    '{"models": []}',
    "[]",
    "[" * 100_000 + "]" * 100_000,
]


def test_a_bad_price_file_is_refused_and_never_bypasses_a_budget(cli, build, store, tmp_path, env):
    """NaN, infinite, negative, huge or mistyped prices (and a file that is not the
    documented shape) are one `Error:` line: never `$nan`, and a member with a dollar
    budget is refused work rather than waved through."""
    config = tmp_path / "claude-config"
    fleet_id, director, (member, _) = build.fleet("priced", 2)
    usage.record_source(
        store, member, coding_agent="claude", session_id="s-priced", data_dir=str(config), cwd="/work", budget_usd=1.0
    )
    write_calls(config, "s-priced", call_lines("m1", 1_000_000, 0))  # $3 at the list price: over
    prices = tmp_path / "prices.json"
    for text in BAD_PRICE_FILES:
        prices.write_text(text, encoding="utf-8")
        environ = dict(env, CAFLEET_PRICE_FILE=str(prices))
        err = one_error_line(cli("member", "usage", str(member), "--json", environ=environ), 2)
        assert err.startswith(f"Error: the price file CAFLEET_PRICE_FILE={prices} "), (text[:60], err)
        one_error_line(cli("fleet", "usage", str(fleet_id), environ=environ), 2)
        refused = send(cli, director, member, "work", environ=environ)
        assert refused.code != 0, (text[:60], refused)
    assert messages(store) == 0
    prices.write_text('{"models": {"claude-sonnet-4": {"input": 0, "output": 1000000}}}', encoding="utf-8")
    fine = cli("member", "usage", str(member), "--json", environ=dict(env, CAFLEET_PRICE_FILE=str(prices)))
    assert fine.code == 0 and fine.json()["usd"] == 0.0, fine


def limited(megabytes: int):
    """A child process's address space capped at ``megabytes`` (``preexec_fn``)."""

    def cap() -> None:
        limit = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return cap


MEMORY_CAP_MB = 512  # what a command needs is well under it; reading /dev/zero to the end is not


def capped_cafleet(env, *args: str, stdin=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cafleet", *args],
        env=env,
        stdin=stdin if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        timeout=120,
        preexec_fn=limited(MEMORY_CAP_MB),
    )


def test_a_price_file_is_read_only_to_its_bound(build, store, tmp_path, env):
    config = tmp_path / "claude-config"
    _, _, (member,) = build.fleet("zeros", 1)
    usage.record_source(store, member, coding_agent="claude", session_id="s-z", data_dir=str(config), cwd="/work")
    done = capped_cafleet(dict(env, CAFLEET_PRICE_FILE="/dev/zero"), "member", "usage", str(member))
    assert done.returncode == 2 and done.stdout == b"", done
    assert done.stderr.decode().startswith("Error: the price file CAFLEET_PRICE_FILE=/dev/zero is larger than")
    assert done.stderr.count(b"\n") == 1, done


# --- item 9: attribution only through what the member cannot forge ----------------------------

# A claude on PATH that stays the pane's process with claude's argv (cafleet's --session-id
# included, as /proc/<pid>/cmdline shows it) and draws the stand-in's composer.
IN_PROCESS_CLAUDE = """\
import os, runpy, sys
sys.argv = ["standin", "--member-id", os.environ["CAFLEET_MEMBER_ID"], "--prompt", "\\u276f "]
runpy.run_module("cafleet.agents.standin", run_name="__main__")
"""


@pytest.fixture
def claude_fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        fake = tmp_path / "fake-bin" / "claude"
        fake.write_text(f"#!{sys.executable}\n{IN_PROCESS_CLAUDE}", encoding="utf-8")
        yield fleet


def claude_member(fleet, name: str) -> dict:
    created = fleet.cafleet(
        "member", "create", "--fleet-id", str(fleet.fleet_id), "--name", name, "--description", name,
        "--coding-agent", "claude", "--json", "Wait.",
    )  # fmt: skip
    assert created.code == 0, created
    member_id = created.json()["member_id"]
    fleet.wait_ready(member_id, prompt="\u276f")
    session, data_dir, cwd = fleet.query(
        f"SELECT session_id, data_dir, cwd FROM {usage.TABLE} WHERE member_id = ?", member_id
    )[0]
    identity = fleet.cafleet("member", "show", str(member_id), "--json").json()["placement"]["identity"]
    return {
        "id": member_id,
        "session": session,
        "config": data_dir,
        "cwd": cwd,
        "pid": int(identity.rpartition(":")[2]),
    }


def total(fleet, member_id: int) -> int:
    shown = fleet.cafleet("member", "usage", str(member_id), "--json")
    assert shown.code == 0, shown
    return shown.json()["tokens"]["total"]


def sessions(fleet, member_id: int) -> list[str]:
    return fleet.query(f"SELECT session_id FROM {usage.TABLE} WHERE member_id = ?", member_id)[0][0].split()


def preview_start(fleet, record: dict) -> str:
    return f"[cafleet msg {record['message_id']} from {record['from_member_id']} {record['created_at']}]\u23ce"


def test_a_member_cannot_claim_another_members_session(claude_fleet):
    """A member's live `sessions/<pid>.json` is its own to write, so it proves nothing: a
    session it names (after `/clear`) is adopted only when the pane's process is the one
    cafleet started for the member (its `--session-id` in /proc), no other member holds
    the session, and the session's transcript holds previews cafleet typed for messages
    to this member and to no one else."""
    fleet = claude_fleet
    alice, bob = claude_member(fleet, "alice"), claude_member(fleet, "bob")
    config = alice["config"]
    assert config == bob["config"]
    write_calls(config, alice["session"], call_lines("a1", 100, 1))
    write_calls(config, bob["session"], call_lines("b1", 2000, 20))
    assert (total(fleet, alice["id"]), total(fleet, bob["id"])) == (101, 2020)

    # alice names bob's session in her own live file: she is not charged with it
    write_live_session(config, alice["pid"], bob["session"], alice["cwd"])
    assert total(fleet, alice["id"]) == 101 and sessions(fleet, alice["id"]) == [alice["session"]]

    # bob really clears: a session holding a preview of a message to him is his from then on
    to_bob = fleet.send(fleet.director, bob["id"], "after the clear", "--json")
    assert to_bob.code == 0, to_bob
    cleared = "0b0b0b0b-0000-4000-8000-000000000002"
    write_calls(
        config, cleared, user_line(preview_start(fleet, to_bob.json()) + "after the clear") + call_lines("b2", 50, 5)
    )
    write_live_session(config, bob["pid"], cleared, bob["cwd"])
    assert total(fleet, bob["id"]) == 2075 and sessions(fleet, bob["id"]) == [bob["session"], cleared]

    # alice names bob's new session, then one holding a preview meant for bob: neither is hers
    write_live_session(config, alice["pid"], cleared, alice["cwd"])
    assert total(fleet, alice["id"]) == 101
    stolen = "0a0a0a0a-0000-4000-8000-000000000003"
    write_calls(config, stolen, user_line(preview_start(fleet, to_bob.json()) + "x") + call_lines("a9", 9000, 0))
    write_live_session(config, alice["pid"], stolen, alice["cwd"])
    assert total(fleet, alice["id"]) == 101 and sessions(fleet, alice["id"]) == [alice["session"]]

    # alice really clears: her own preview makes the session hers
    to_alice = fleet.send(fleet.director, alice["id"], "yours", "--json")
    mine = "0a0a0a0a-0000-4000-8000-000000000004"
    write_calls(config, mine, user_line(preview_start(fleet, to_alice.json()) + "yours") + call_lines("a2", 7, 0))
    write_live_session(config, alice["pid"], mine, alice["cwd"])
    assert total(fleet, alice["id"]) == 108 and sessions(fleet, alice["id"]) == [alice["session"], mine]
    whole = fleet.cafleet("fleet", "usage", str(fleet.fleet_id), "--json").json()
    assert whole["tokens"]["total"] == 108 + 2075  # no session counted twice


def test_a_live_file_of_a_process_cafleet_did_not_start_for_the_member_names_nothing(tmp_path):
    """The pid in a live file must be a process started with the member's own
    `--session-id`: another process (a reused pid, another member's claude) names nothing."""
    config = tmp_path / "claude"
    mine, other = "11111111-0000-4000-8000-000000000001", "22222222-0000-4000-8000-000000000002"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "--session-id", other], stdin=subprocess.PIPE
    )
    try:
        wait_for(lambda: b"--session-id" in Path(f"/proc/{proc.pid}/cmdline").read_bytes(), what="the process to start")
        write_live_session(config, proc.pid, "33333333-0000-4000-8000-000000000003", "/work")
        assert claude.claude_live_session(str(config), proc.pid, "/work", spawn_session=mine) is None
        assert claude.claude_live_session(str(config), proc.pid, "/work", spawn_session=other) == (
            "33333333-0000-4000-8000-000000000003"
        )
    finally:
        proc.stdin.close()
        proc.wait()


# --- item 10: one budget gate for every way work reaches a member -------------------------------


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def over_budget(db: str, member_id: int | None = None, fleet_id: int | None = None) -> None:
    """Stand-ins spend nothing: a cap of 0 (only writable by hand) is one they are at."""
    store = open_store(db)
    try:
        with store.write():
            if member_id is not None:
                store.execute(f"UPDATE {usage.TABLE} SET budget_tokens = 0 WHERE member_id = ?", (member_id,))
            if fleet_id is not None:
                store.execute(f"UPDATE {usage.FLEET_TABLE} SET budget_tokens = 0 WHERE fleet_id = ?", (fleet_id,))
    finally:
        store.close()


def standin(fleet, name: str, *extra: str):
    return fleet.cafleet(
        "member", "create", "--fleet-id", str(fleet.fleet_id), "--name", name, "--description", name,
        "--coding-agent", "standin", *extra, "--json", "Hi",
    )  # fmt: skip


def test_member_prompt_and_member_create_honour_the_budget_gate(fleet):
    """`member prompt` to a member over its budget types nothing (unless --force), and
    `member create` in a fleet over its budget registers nothing (unless --force)."""
    created = standin(fleet, "capped", "--budget-tokens", "10")
    assert created.code == 0, created
    member = created.json()["member_id"]
    fleet.wait_ready(member)
    over_budget(fleet.db, member_id=member)
    refused = fleet.cafleet("member", "prompt", str(member), "more work")
    assert one_error_line(refused, 1) == (
        f"Error: member {member} is over its budget (0 tokens spent of a 0-token budget); it gets no new work; "
        "give --force to type the prompt anyway.\n"
    )
    forced = fleet.cafleet("member", "prompt", str(member), "--force", "stop now")
    assert forced.code == 0, forced
    wait_for(lambda: fleet.submits(member)[-1:] == ["stop now"], what="the forced prompt")
    assert "more work" not in fleet.submits(member)

    assert fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--tokens", "5").code == 0
    over_budget(fleet.db, fleet_id=fleet.fleet_id)
    rows = fleet.query("SELECT count(*) FROM members")[0][0]
    err = one_error_line(standin(fleet, "late"), 1)
    assert err.startswith(f"Error: fleet {fleet.fleet_id} is over its budget (0 tokens spent of a 0-token budget)")
    assert fleet.query("SELECT count(*) FROM members")[0][0] == rows
    late = standin(fleet, "late", "--force")
    assert late.code == 0, late
    fleet.wait_ready(late.json()["member_id"])


def test_the_webui_answers_409_for_a_budget_refusal_and_400_for_a_nul_body(build, store, db_path, env, cli):
    fleet_id, director, (m1, _) = build.fleet("web", 2)
    with web_client(make_app(db_path, env)) as client:

        def post(text: str):
            return client.post(
                "/api/messages",
                json={"from_member_id": director, "to_member_id": m1, "text": text},
                headers={"Origin": BASE},
            )

        nul = post("a\x00b")
        assert (nul.status_code, nul.json()) == (
            400,
            {"error": "text contains the character U+0000 (NUL), which a message cannot hold; remove it"},
        )
        assert cli("fleet", "budget", str(fleet_id), "--tokens", "1").code == 0
        over_budget(db_path, fleet_id=fleet_id)
        refused = post("more work")
        assert refused.status_code == 409, refused.text
        assert refused.json() == {
            "error": f"fleet {fleet_id} is over its budget (0 tokens spent of a 0-token budget); "
            "its members get no new work."
        }
    assert messages(store) == 0


# --- item 11: every input checked before anything is written ----------------------------------


def test_budget_numbers_beyond_their_range_are_usage_errors_that_write_nothing(cli, build, store):
    fleet_id, _, _ = build.fleet("numbers", 1)
    for flag, value in (
        ("--tokens", str(2**63)),
        ("--tokens", "9" * 5000),
        ("--tokens", "0"),
        ("--usd", "1e400"),
        ("--usd", "nan"),
        ("--usd", "-3"),
    ):
        err = one_error_line(cli("fleet", "budget", str(fleet_id), flag, value), 2)
        assert err.startswith(f"Error: {flag} must be "), err
    # Nothing written: not even the budget table a first budget would create.
    assert not store.tables_present([usage.FLEET_TABLE]) or (
        store.execute(f"SELECT count(*) FROM {usage.FLEET_TABLE}").fetchone()[0] == 0
    )


def test_member_create_checks_every_input_before_it_registers(fleet, tmp_path):
    """A budget past its range, a NUL in a spawn prompt read from a file and a spawn
    prompt longer than a pane's command line can carry are refused before any row is
    written: nothing is registered, so nothing is "cleaned up"."""
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"do this\x00and that")
    long = tmp_path / "long.txt"
    long.write_text("x" * 20_000, encoding="utf-8")
    rows = fleet.query("SELECT count(*) FROM members")[0][0]
    for agent, extra, said in (
        ("standin", ("--budget-tokens", str(2**63), "Hi"), "Error: --budget-tokens must be "),
        ("claude", ("--file", str(nul)), f"Error: file {nul} holds a NUL character (U+0000)"),
        ("claude", ("--file", str(long)), f"Error: file {long} is longer than"),
        ("claude", ("x" * 16_000,), "Error: the spawn prompt is too long"),  # tmux: "command too long"
    ):
        created = fleet.cafleet(
            "member", "create", "--fleet-id", str(fleet.fleet_id), "--name", "w", "--description", "w",
            "--coding-agent", agent, *extra,
        )  # fmt: skip
        assert one_error_line(created, 2).startswith(said), (extra[:1], created)
    assert fleet.query("SELECT count(*) FROM members")[0][0] == rows


BODY_LIMIT = 16 * 1024 * 1024  # the longest body (cafleet.validation.MAX_BODY_BYTES, docs/usage.md)


def test_a_body_file_is_read_only_to_its_allowed_length(build, env):
    """`--file /dev/zero` (and an endless standard input) is refused with the length
    error, reading at most the allowed length plus one byte: the command stays within a
    memory cap that reading the whole stream would break."""
    _, director, (m1,) = build.fleet("zeros", 1)
    for args, stdin, where in (
        (("--file", "/dev/zero"), None, "file /dev/zero"),
        (("--file", "-"), open("/dev/zero", "rb"), "standard input"),  # noqa: SIM115 - the child's stdin, closed below
    ):
        done = capped_cafleet(
            env, "message", "send", "--from-member-id", str(director), "--to-member-id", str(m1), *args, stdin=stdin
        )
        assert (done.returncode, done.stdout) == (2, b""), done
        assert done.stderr.decode() == f"Error: {where} is longer than {BODY_LIMIT} bytes, the most a body may hold.\n"
        if stdin is not None:
            stdin.close()
    done = capped_cafleet(
        env, "member", "create", "--fleet-id", "1", "--name", "z", "--description", "z", "--file", "/dev/zero"
    )
    assert done.returncode == 2 and done.stderr.decode().startswith("Error: file /dev/zero is longer than"), done
