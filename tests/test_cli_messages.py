"""Message commands: exact text output with --json twins, and the message semantics."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import re

import pytest

from cafleet.broker import messages
from cafleet.errors import Conflict

TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00"


@pytest.fixture
def trio(build):
    """A fleet with Director and two members (pending placements: no pane typing)."""
    return build.fleet()


def send(cli, a, b, *body, json=True):
    args = ["message", "send", "--from-member-id", str(a), "--to-member-id", str(b), *body]
    return cli(*args, "--json") if json else cli(*args)


def test_send_text_and_json(cli, trio):
    _, _director, (m1, m2) = trio
    result = send(cli, m1, m2, "hello", json=False)
    assert (result.code, result.err) == (0, "")
    assert result.out == f"sent message 1 to member {m2}\n"
    record = send(cli, m1, m2, "again").json()
    assert list(record) == [
        "message_id",
        "from_member_id",
        "to_member_id",
        "created_at",
        "status_state",
        "status_timestamp",
        "text",
        "notified",
    ]
    assert record["message_id"] == 2 and record["text"] == "again"
    assert record["status_state"] == "input_required"
    assert record["created_at"] == record["status_timestamp"]
    assert re.fullmatch(TS, record["created_at"])
    assert record["notified"] is False  # pending placement: nothing to type into


def test_poll_order_newest_first_and_exact_text(cli, trio):
    _, _director, (m1, m2) = trio
    ids = [send(cli, m1, m2, f"body {i}").json()["message_id"] for i in range(3)]
    polled = cli("message", "poll", str(m2), "--json").json()
    assert [r["message_id"] for r in polled] == ids[::-1]
    assert all("notified_at" not in r and "notified" not in r for r in polled)
    text = cli("message", "poll", str(m2)).out
    expected = (
        "\n\n".join(f"[msg {r['message_id']} | from:{m1} | {r['status_timestamp']}]\n{r['text']}" for r in polled)
        + "\n"
    )
    assert text == expected
    assert cli("message", "poll", str(m1)).out == "no pending messages\n"
    assert cli("message", "poll", str(m1), "--json").out == "[]\n"


def test_ack_completes_and_double_ack_is_refused(cli, trio):
    _, _, (m1, m2) = trio
    message_id = send(cli, m1, m2, "do it").json()["message_id"]
    result = cli("message", "ack", str(message_id))
    assert (result.code, result.out) == (0, f"acknowledged message {message_id}\n")
    shown = cli("message", "show", str(message_id), "--json").json()
    assert shown["status_state"] == "completed"
    assert shown["status_timestamp"] > shown["created_at"]
    again = cli("message", "ack", str(message_id))
    assert again.code == 1
    assert again.err == f"Error: message {message_id} is already acknowledged (at {shown['status_timestamp']}).\n"
    assert cli("message", "poll", str(m2), "--json").json() == []


def test_ack_json_twin(cli, trio):
    _, _, (m1, m2) = trio
    message_id = send(cli, m1, m2, "x").json()["message_id"]
    record = cli("message", "ack", str(message_id), "--json").json()
    assert record["message_id"] == message_id and record["status_state"] == "completed"
    assert "notified" not in record


def test_show_text_truncates_and_json_does_not(cli, trio, env):
    _, _, (m1, m2) = trio
    body = "é" * 250
    message_id = send(cli, m1, m2, body).json()["message_id"]
    shown = cli("message", "show", str(message_id), "--json").json()
    assert shown["text"] == body
    text = cli("message", "show", str(message_id)).out
    assert text == f"[msg {message_id} | from:{m1} | {shown['status_timestamp']}]\n{'é' * 200}…\n"
    short = cli("message", "show", str(message_id), environ=dict(env, CAFLEET_MAX_TEXT_LEN="5")).out
    assert short.endswith("\néééé" + "é…\n")


def test_self_send_is_pending_and_stamped(cli, trio, store):
    _, _, (m1, _) = trio
    record = send(cli, m1, m1, "note to self").json()
    assert record["notified"] is True
    row = store.execute(
        "SELECT notified_at, created_at FROM messages WHERE message_id = ?", (record["message_id"],)
    ).fetchone()
    assert row[0] == row[1]
    assert [r["message_id"] for r in cli("message", "poll", str(m1), "--json").json()] == [record["message_id"]]
    assert cli("message", "ack", str(record["message_id"])).code == 0


@pytest.mark.parametrize(
    "body",
    [
        "line one\r\nline two\r\n",
        "tabs\tand\ttabs",
        "naïve café – 日本語 – 🚀",
        "\x1b[31mred\x1b[0m \x07 bell \x00 nul \x7f del \x9b c1",
        "  leading and trailing  \n\n",
        "C-c Enter ; \\; $(rm -rf /) `id`",
    ],
)
def test_exact_body_round_trip(cli, trio, tmp_path, body, store_kind):
    _, _, (m1, m2) = trio
    path = tmp_path / "body.txt"
    path.write_bytes(body.encode("utf-8"))
    if store_kind == "postgres" and "\x00" in body:  # PostgreSQL text cannot hold U+0000
        refused = send(cli, m1, m2, "--file", str(path))
        assert refused.code != 0 and refused.out == ""
        assert refused.err.startswith("Error: ") and "U+0000" in refused.err and refused.err.count("\n") == 1
        assert cli("message", "poll", str(m2), "--json").json() == []
        return
    by_file = send(cli, m1, m2, "--file", str(path)).json()
    by_stdin = cli(
        "message",
        "send",
        "--from-member-id",
        str(m1),
        "--to-member-id",
        str(m2),
        "--file",
        "-",
        "--json",
        input=body.encode("utf-8"),
    ).json()
    for record in (by_file, by_stdin):
        assert cli("message", "show", str(record["message_id"]), "--json").json()["text"] == body
    if "\x00" not in body:  # argv cannot carry NUL
        by_arg = send(cli, m1, m2, body).json()
        assert cli("message", "show", str(by_arg["message_id"]), "--json").json()["text"] == body


def test_text_output_never_emits_control_characters(cli, trio):
    _, _, (m1, m2) = trio
    message_id = send(cli, m1, m2, "a\x1b[2Jb\x07c\x9bd\r\n").json()["message_id"]
    out = cli("message", "show", str(message_id)).out
    assert out.endswith("\na\\x1b[2Jb\\x07c\\x9bd\\x0d\n\n")
    assert not any(ord(c) < 32 and c not in "\n" for c in out)


# Bidi controls (embeddings, overrides, isolates, marks) and other invisible format
# characters: zero-width space, BOM, word joiner, a tag character, soft hyphen, and the
# line and paragraph separators some terminals break lines at.
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
INVISIBLE = BIDI + "\u200b\ufeff\u2060\U000e0041\u00ad\u2028\u2029"
ESCAPES = [
    f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}" if ord(c) < 0x10000 else f"\\U{ord(c):08x}"
    for c in INVISIBLE
]


def test_text_output_shows_bidi_and_format_characters_as_escapes(cli, build):
    """A stored name, description or body in text output can never reorder what the reader
    sees; ZWJ stays (emoji sequences need it); --json keeps every character."""
    hostile = "ab" + INVISIBLE + "cd 👩\u200d💻"
    fleet_id, _director, (m1, _m2) = build.fleet(f"fleet {hostile}")
    m3 = build.member(fleet_id, f"name {hostile}")
    message_id = send(cli, m1, m3, f"body {hostile}").json()["message_id"]
    outputs = {
        "fleet list": cli("fleet", "list").out,
        "fleet show": cli("fleet", "show", str(fleet_id)).out,
        "member list": cli("member", "list", str(fleet_id)).out,
        "member show": cli("member", "show", str(m3)).out,
        "message show": cli("message", "show", str(message_id)).out,
        "message poll": cli("message", "poll", str(m3)).out,
    }
    for command, out in outputs.items():
        assert not set(out) & set(INVISIBLE), (command, out)
        assert "\\u202e" in out and "\\U000e0041" in out and "\\xad" in out, (command, out)
        assert "👩\u200d💻" in out, (command, out)
    escaped = "ab" + "".join(ESCAPES) + "cd 👩\u200d💻"
    assert f"member {m3}: name {escaped} (member, active)" in outputs["member show"]
    assert f"name {escaped}" in outputs["member list"] and f"fleet {escaped}" in outputs["fleet list"]
    assert cli("member", "show", str(m3), "--json").json()["name"] == f"name {hostile}"
    assert cli("message", "show", str(message_id), "--json").json()["text"] == f"body {hostile}"


def test_cross_fleet_send_is_refused(cli, build):
    _, _, (a1, _) = build.fleet("one")
    _, _, (b1, _) = build.fleet("two")
    result = send(cli, a1, b1, "leak?", json=False)
    assert result.code == 1
    assert result.err == f"Error: members {a1} and {b1} are not in the same fleet; messages never cross fleets.\n"
    assert cli("message", "poll", str(b1), "--json").json() == []


def test_unknown_ids(cli, trio):
    _, _, (m1, _) = trio
    assert send(cli, m1, 999, "x").err == "Error: recipient member 999 not found.\n"
    assert send(cli, 999, m1, "x").err == "Error: sender member 999 not found.\n"
    assert cli("message", "show", "12345").err == "Error: message 12345 not found.\n"
    assert cli("message", "ack", "12345").err == "Error: message 12345 not found.\n"
    assert cli("message", "poll", "999").err == "Error: member 999 not found.\n"
    assert cli("member", "show", "999").err == "Error: member 999 not found.\n"
    assert (
        cli("fleet", "show", "999").err == "Error: fleet 999 not found; `cafleet fleet list` shows the live fleets.\n"
    )
    for result in (send(cli, m1, 999, "x"), cli("message", "show", "12345")):
        assert result.code == 1 and result.out == ""


@pytest.mark.parametrize("bad", ["abc", "0", "-3", "1.5", "", " ", "１"])  # noqa: RUF001 - a fullwidth digit, on purpose
def test_non_integer_ids_are_usage_errors(cli, bad):
    result = cli("message", "show", "--", bad) if bad.startswith("-") else cli("message", "show", bad)
    assert result.code == 2
    assert result.err == f"Error: MESSAGE_ID must be a positive integer, got {bad!r}.\n"


def test_bad_flag_ids_are_usage_errors(cli, trio):
    result = cli("message", "send", "--from-member-id", "x", "--to-member-id", "2", "hi")
    assert (result.code, result.err) == (2, "Error: --from-member-id must be a positive integer, got 'x'.\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (["hi", "--file", "-"], "give the body either as TEXT or with --file, not both."),
        ([], "missing the body: give TEXT or --file PATH (--file - reads stdin)."),
        (["   \n\t"], "the body is blank; a message needs a non-blank body."),
        (["--file", "/nonexistent/body.txt"], "file /nonexistent/body.txt does not exist."),
        (
            ["one", "two"],
            "unexpected argument 'two' for `cafleet message send` (quote a message body so that it is one argument).",
        ),
        (["--frm", "1"], "unknown option '--frm' for `cafleet message send`; did you mean --from-member-id?"),
    ],
)
def test_body_and_usage_errors(cli, trio, args, message):
    _, _, (m1, m2) = trio
    result = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), *args)
    assert (result.code, result.out, result.err) == (2, "", f"Error: {message}\n")
    assert cli("message", "poll", str(m2), "--json").json() == []


def test_invalid_utf8_file_and_empty_file(cli, trio, tmp_path):
    _, _, (m1, m2) = trio
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok \xff\xfe not utf8")
    result = send(cli, m1, m2, "--file", str(bad))
    assert (result.code, result.err) == (2, f"Error: file {bad} is not valid UTF-8 (byte 0xff at offset 3).\n")
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    result = send(cli, m1, m2, "--file", str(empty))
    assert (result.code, result.err) == (2, f"Error: file {empty} is empty; a message needs a non-blank body.\n")
    result = cli(
        "message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "--file", "-", input=b"\xc3("
    )
    assert result.err == "Error: standard input is not valid UTF-8 (byte 0xc3 at offset 0).\n"
    assert cli("message", "poll", str(m2), "--json").json() == []


def test_invalid_utf8_argv_is_refused(run_cli, trio):
    _, _, (m1, m2) = trio
    import os
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable.encode(),
            b"-m",
            b"cafleet",
            b"message",
            b"send",
            b"--from-member-id",
            str(m1).encode(),
            b"--to-member-id",
            str(m2).encode(),
            b"bad \xff bytes",
        ],
        capture_output=True,
        env={k.encode(): v.encode() for k, v in os.environ.items()},
    )
    assert proc.returncode == 2
    assert proc.stderr == b"Error: TEXT is not valid UTF-8; pass the body with --file instead.\n"


def test_deregistered_and_deleted_fleet(cli, trio, build, store):
    fleet_id, director, (m1, m2) = trio
    from cafleet.broker import members

    members.deregister_member(store, m2)
    result = send(cli, m1, m2, "x")
    assert result.err == f"Error: recipient member {m2} is deregistered; it can no longer send or receive messages.\n"
    result = cli("fleet", "delete", str(fleet_id), "--json")
    assert result.code == 0, result
    assert result.json()["deregistered_count"] == 2  # director + m1
    result = send(cli, director, m1, "x")
    deleted_at = cli("fleet", "show", str(fleet_id), "--json").json()["deleted_at"]
    assert result.err == f"Error: fleet {fleet_id} was deleted at {deleted_at}; it accepts no new messages.\n"
    with pytest.raises(Conflict, match="was deleted"):
        build.member(fleet_id, "late")


def test_broadcast_reports_each_recipient(cli, build, store):
    fleet_id, director, (m1, m2) = build.fleet(members_count=2)
    m3 = build.member(fleet_id, "m3")
    result = cli("message", "broadcast", "--from-member-id", str(director), "all hands", "--json")
    assert result.code == 0
    data = result.json()
    assert [r["to_member_id"] for r in data["sent"]] == [m1, m2, m3]
    assert data["failed"] == []
    text = cli("message", "broadcast", "--from-member-id", str(director), "again").out
    assert text == "".join(f"sent message {4 + i} to member {m}\n" for i, m in enumerate((m1, m2, m3)))
    refused = cli("message", "broadcast", "--from-member-id", str(m1), "mutiny")
    assert refused.code == 1
    assert refused.err == f"Error: member {m1} is not the Director of fleet {fleet_id}; only the Director broadcasts.\n"


def _refuse_broadcasts_to(store, store_kind: str, member_id: int, how: str) -> None:
    """An auxiliary the seed allows that refuses every new message to ``member_id``: a
    trigger's RAISE, or a UNIQUE index on (recipient, body) with the body already sent."""
    if how == "unique index":
        store.execute("CREATE UNIQUE INDEX aux_one_copy_each ON messages (to_member_id, text)")
        for body in ("all hands", "again"):
            messages.send(store, member_id, member_id, body)
    elif store_kind == "sqlite":
        store.execute(
            f"CREATE TRIGGER aux_no_broadcasts BEFORE INSERT ON messages WHEN NEW.to_member_id = {member_id} "
            "BEGIN SELECT RAISE(ABORT, 'this member takes no broadcasts'); END"
        )
    else:
        store.execute(
            "CREATE FUNCTION aux_no_broadcasts() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
            f"IF NEW.to_member_id = {member_id} THEN RAISE EXCEPTION 'this member takes no broadcasts'; END IF; "
            "RETURN NEW; END $$"
        )
        store.execute(
            "CREATE TRIGGER aux_no_broadcasts BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION aux_no_broadcasts()"
        )


@pytest.mark.parametrize("how", ["trigger", "unique index"])
def test_broadcast_reports_a_recipient_the_database_refuses_and_every_committed_id(cli, build, store, store_kind, how):
    fleet_id, director, (m1, m2) = build.fleet()
    m3 = build.member(fleet_id, "m3")
    _refuse_broadcasts_to(store, store_kind, m2, how)
    reason = (
        "this member takes no broadcasts"
        if how == "trigger"
        else "UNIQUE constraint failed"
        if store_kind == "sqlite"
        else "duplicate key value"
    )

    result = cli("message", "broadcast", "--from-member-id", str(director), "all hands")
    assert result.code == 1 and result.err == "", result
    stored = [r["message_id"] for r in cli("message", "poll", str(m1), "--json").json()]
    stored += [r["message_id"] for r in cli("message", "poll", str(m3), "--json").json()]
    lines = result.out.splitlines()
    assert lines[0] == f"sent message {stored[0]} to member {m1}"
    assert lines[1].startswith(f"failed to send to member {m2}: database ") and reason in lines[1], lines
    assert "refused the change" in lines[1] and "nothing of it was stored" in lines[1]
    assert lines[2:] == [f"sent message {stored[1]} to member {m3}"]
    assert [
        r["text"] for r in cli("message", "poll", str(m2), "--json").json() if r["from_member_id"] == director
    ] == []

    as_json = cli("message", "broadcast", "--from-member-id", str(director), "again", "--json")
    assert as_json.code == 1 and as_json.err == "", as_json
    data = as_json.json()
    assert [r["to_member_id"] for r in data["sent"]] == [m1, m3]
    for record in data["sent"]:
        assert cli("message", "show", str(record["message_id"]), "--json").json() == record
    assert [f["to_member_id"] for f in data["failed"]] == [m2] and reason in data["failed"][0]["error"]

    single = send(cli, director, m2, "all hands", json=False)
    assert single.code == 1 and single.out == "" and single.err.startswith("Error: database "), single
    assert reason in single.err and len(single.err.splitlines()) == 1


def test_member_list_and_show(cli, build, store):
    fleet_id, director, (m1, m2) = build.fleet()
    send(cli, m1, m2, "x")
    roster = cli("member", "list", str(fleet_id), "--json").json()
    assert [r["member_id"] for r in roster] == [director, m1, m2]
    assert list(roster[0]) == [
        "member_id",
        "name",
        "kind",
        "status",
        "backend",
        "coding_agent",
        "pane_id",
        "last_activity_at",
        "idle_seconds",
    ]
    assert [r["kind"] for r in roster] == ["director", "member", "member"]
    assert roster[0]["last_activity_at"] is None and roster[0]["idle_seconds"] is None
    assert roster[1]["last_activity_at"] == roster[2]["last_activity_at"]
    assert roster[1]["idle_seconds"] in (0, 1)
    assert roster[1]["pane_id"] is None
    text = cli("member", "list", str(fleet_id)).out.splitlines()
    assert text[0].split() == ["MEMBER", "NAME", "KIND", "BACKEND", "AGENT", "PANE", "IDLE_S"]
    assert text[1].split() == [str(director), "Director", "director", "tmux", "claude", "%0", "-"]
    assert text[2].split()[:6] == [str(m1), "m1", "member", "tmux", "claude", "pending"]
    detail = cli("member", "show", str(m1), "--json").json()
    assert detail["description"] == "m1 worker" and detail["fleet_id"] == fleet_id
    assert detail["placement"]["pane_id"] is None and detail["placement"]["window_id"] == "@0"
    assert detail["deregistered_at"] is None


def test_activity_counts_sent_received_and_acked(cli, build, store):
    _fleet_id, _director, (m1, m2) = build.fleet()
    first = send(cli, m1, m2, "x").json()
    assert cli("member", "show", str(m1), "--json").json()["last_activity_at"] == first["created_at"]
    acked = cli("message", "ack", str(first["message_id"]), "--json").json()
    assert cli("member", "show", str(m2), "--json").json()["last_activity_at"] == acked["status_timestamp"]
    # the sender's activity is its send, not the recipient's later ACK
    assert cli("member", "show", str(m1), "--json").json()["last_activity_at"] == first["created_at"]


def test_fleet_list_show_delete_texts(cli, build):
    fleet_id, director, _ = build.fleet("alpha")
    listed = cli("fleet", "list", "--json").json()
    assert listed == [
        {
            "fleet_id": fleet_id,
            "name": "alpha",
            "director_member_id": director,
            "active_members": 3,
            "created_at": listed[0]["created_at"],
        }
    ]
    text = cli("fleet", "list").out.splitlines()
    assert text[0].split() == ["FLEET", "NAME", "DIRECTOR", "MEMBERS", "CREATED"]
    assert text[1].split() == [str(fleet_id), "alpha", str(director), "3", listed[0]["created_at"]]
    shown = cli("fleet", "show", str(fleet_id), "--json").json()
    stopped = {
        "running": False,
        "state": "not running",
        "pid": None,
        "since": None,
        "host": None,
        "log": None,
        "heartbeat_age": None,
        "enabled": False,
    }
    # the test environment turns the keeper off; the fleet did not opt in to revivals
    # and posts no notice anywhere (no --notify, no CAFLEET_NOTIFY_URL)
    off = {"urls": [], "last_ok_at": None, "failing": 0, "failing_since": None, "reason": None}
    assert shown == dict(listed[0], deleted_at=None, keeper=stopped, revive_per_hour=None, notify=off)
    assert cli("fleet", "show", str(fleet_id)).out.splitlines()[-3:] == [
        "revive: off (`cafleet member revive` by hand)",
        "notify: off (no --notify, no CAFLEET_NOTIFY_URL)",
        "keeper: not running (CAFLEET_KEEPER=off: `cafleet fleet watch` delivers owed previews while it runs)",
    ]
    deleted = cli("fleet", "delete", str(fleet_id))
    assert deleted.out.splitlines()[0] == f"deleted fleet {fleet_id}; deregistered 3 member(s)"
    assert cli("fleet", "delete", str(fleet_id), "--json").json()["deregistered_count"] == 0  # idempotent
    assert cli("fleet", "list").out == "no live fleets\n"
    assert cli("fleet", "show", str(fleet_id), "--json").json()["deleted_at"] is not None
    assert cli("member", "list", str(fleet_id)).code == 1


_AWKWARD = ["'", "\\", "\\'", "''", "$$", "$1", "?", "ā\\", "%s", "E'", "--", "/*", "\x00", "\xff"]


def test_any_bytes_from_a_file_are_stored_exactly_or_refused_in_one_line(cli, trio, tmp_path, store_kind, db_path):
    """Property (hypothesis): whatever bytes `--file` holds (quotes, backslashes, ``$$``,
    ``?``, NUL, invalid UTF-8), a send either stores exactly that text, read back whole by
    `message show`, or is refused with one line and stores nothing; on PostgreSQL under
    either `standard_conforming_strings` and any `backslash_quote` (set for the database, so
    every session of the command has it)."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    _, _, (m1, m2) = trio
    if store_kind == "postgres":
        from cafleet.store import libpq

        with libpq.connect(db_path) as conn:
            database = conn.info.dbname
            conn.execute(f"ALTER DATABASE {database} SET standard_conforming_strings = off")
            conn.execute(f"ALTER DATABASE {database} SET backslash_quote = on")
    path = tmp_path / "body"

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.binary(max_size=12) | st.sampled_from(_AWKWARD).map(lambda s: s.encode("utf-8")), max_size=6))
    def round_trip(pieces):
        body = b"".join(pieces) or b"x"
        path.write_bytes(body)
        before = len(cli("message", "poll", str(m2), "--json").json())
        sent = send(cli, m1, m2, "--file", str(path))
        if sent.code == 0:
            text = cli("message", "show", str(sent.json()["message_id"]), "--json").json()["text"]
            assert text.encode("utf-8") == body
        else:
            assert (
                sent.code in (1, 2) and sent.out == "" and sent.err.startswith("Error: ") and sent.err.count("\n") == 1
            )
            assert len(cli("message", "poll", str(m2), "--json").json()) == before

    round_trip()
