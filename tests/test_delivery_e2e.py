"""Pane delivery end to end: real panes, the real command line, the stand-in agent.

The Director sits in the first pane of a private tmux server (or in the herdr stand-in's
root pane) and runs a byte recorder; members are created with ``cafleet member create
--coding-agent standin`` and record every line submitted to them. Each test asserts what
arrived in the member's input box (exact text, how many times, in which order), what the
database says (``notified_at`` is read from the file) and what the sender printed.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import signal
from datetime import datetime
from pathlib import Path

import pytest

from cafleet.delivery.keystrokes.lock import pane_lock
from cafleet.mux import text_chunks
from cafleet.store.engines import lock_space
from tests.support.pane_fleet import herdr_fleet, preview_line, start, tmux_fleet
from tests.support.tmux_fixtures import wait_for

CONCURRENT_SENDERS = 12


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


@pytest.fixture
def herdr(env, tmp_path, monkeypatch):
    with herdr_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def when(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


def pane_gone(message_id: int, member_id: int, reason: str, fleet_id: int = 1) -> str:
    """The not-notified diagnostic for a member whose pane is gone: no retry can deliver
    until the member is started again."""
    return (
        f"Warning: message {message_id} is stored but member {member_id} was not notified: {reason}. "
        f"Member {member_id}'s pane is gone: it waits until `cafleet member revive {member_id}` starts it again, its "
        f"conversation resumed (when the Director's pane is gone too, `cafleet fleet restore {fleet_id}` from a new "
        "pane), and the fleet keeper then delivers it. Do not resend.\n"
    )


def not_notified(message_id: int, member_id: int, reason: str) -> str:
    """The not-notified diagnostic, around ``reason``."""
    return (
        f"Warning: message {message_id} is stored but member {member_id} was not notified: {reason}. "
        # the keeper is off in tests, and the test's only fleet is fleet 1
        "The fleet keeper is off (CAFLEET_KEEPER=off; `cafleet fleet watch 1` does its work while it runs). "
        f"The preview will be retried by the next send to member {member_id} or a later "
        "`cafleet message wait`. Do not resend.\n"
    )


# --- the preview ---------------------------------------------------------------------------


def test_send_types_the_preview_once_and_stamps_notified_after_it(fleet):
    alice = fleet.create("alice")["member_id"]
    result = fleet.send(fleet.director, alice, "Review the parser.\nThen report back.")
    assert (result.code, result.out, result.err) == (0, f"sent message 1 to member {alice}\n", "")
    shown = fleet.cafleet("message", "show", "1", "--json").json()
    assert fleet.submits(alice) == [
        f"[cafleet msg 1 from {fleet.director} {shown['created_at']}]\u23ceReview the parser.\u23ceThen report back."
    ]
    [submitted] = fleet.records(alice)
    stamped = fleet.notified_at(1)
    assert stamped is not None and when(stamped) >= when(submitted["ts"]) >= when(shown["created_at"])
    assert shown["status_state"] == "input_required"  # delivery never consumes a message

    as_json = fleet.send(fleet.director, alice, "second task", "--json")
    assert (as_json.code, as_json.err) == (0, "")
    record = as_json.json()
    assert record["notified"] is True and record["text"] == "second task"
    assert fleet.submits(alice)[1:] == [preview_line(record)]
    assert fleet.notified_at(record["message_id"]) is not None
    assert [r["kind"] for r in fleet.records(alice)] == ["submit", "submit"]


def test_dead_pane_leaves_the_message_stored_and_owed(fleet):
    bob = fleet.create("bob")
    fleet.server.run("kill-pane", "-t", bob["pane_id"])
    member = bob["member_id"]
    result = fleet.send(fleet.director, member, "are you there?")
    gone = f"tmux pane {bob['pane_id']} is gone (can't find pane: {bob['pane_id']})"
    assert (result.code, result.out) == (0, f"sent message 1 to member {member}\n")
    assert result.err == pane_gone(1, member, gone, fleet.fleet_id)
    assert fleet.notified_at(1) is None

    again = fleet.send(fleet.director, member, "hello?", "--json")
    assert (again.code, again.json()["notified"]) == (0, False)
    assert again.err == pane_gone(2, member, gone, fleet.fleet_id)
    assert fleet.query("SELECT message_id, notified_at, status_state FROM messages ORDER BY message_id") == [
        (1, None, "input_required"),
        (2, None, "input_required"),
    ]
    polled = fleet.cafleet("message", "poll", str(member), "--json").json()
    assert [r["text"] for r in polled] == ["hello?", "are you there?"]


@pytest.mark.parametrize("retry_by", ["send", "wait"])
def test_permission_prompt_holds_the_preview_until_answered(fleet, retry_by):
    asking = fleet.attach("asking", "--permission-prompt")
    member, pane = asking["member_id"], asking["pane_id"]
    wait_for(lambda: fleet.input_row(pane) == "  2. No", what="the permission prompt")

    first = fleet.send(fleet.director, member, "first task", "--json")
    assert (first.code, first.json()["notified"]) == (0, False)
    reason = (
        f"pane {pane} shows a prompt awaiting its user, so nothing was typed; answer it in that pane "
        "and the message will be retried"
    )
    assert first.err == not_notified(1, member, reason)
    assert fleet.records(member) == []  # not a key reached the prompt
    assert fleet.notified_at(1) is None

    fleet.server.run("send-keys", "-t", pane, "1", "Enter")  # the user answers
    wait_for(lambda: fleet.input_row(pane) == ">", what="the prompt to be answered")
    assert [(r["kind"], r["text"]) for r in fleet.records(member)] == [("permission", "1")]

    owed = preview_line(first.json())
    if retry_by == "wait":
        waited = fleet.cafleet("message", "wait", str(member), "--timeout", "5", "--json")
        assert (waited.code, waited.err) == (0, "")
        assert [r["message_id"] for r in waited.json()] == [1]
        assert fleet.submits(member) == [owed]
    second = fleet.send(fleet.director, member, "second task", "--json")
    assert (second.code, second.err, second.json()["notified"]) == (0, "", True)
    assert fleet.submits(member) == [owed, preview_line(second.json())]  # each once, oldest first
    assert fleet.notified_at(1) is not None and fleet.notified_at(2) is not None


def test_half_typed_input_is_held_never_submitted(fleet):
    """A person is composing in the member's input box: the preview is held (nothing typed,
    their text untouched) and delivered once by `message wait` after they submit."""
    typing = fleet.attach("typing", "--prefill", "fix the te")
    member, pane = typing["member_id"], typing["pane_id"]
    wait_for(lambda: fleet.input_row(pane) == "> fix the te", what="the half-typed text")
    first = fleet.send(fleet.director, member, "first task", "--json")
    assert (first.code, first.json()["notified"]) == (0, False)
    reason = (
        f"held: input box has text in pane {pane} (someone is typing there), so nothing was typed "
        "and that text was left as it is"
    )
    assert first.err == not_notified(1, member, reason)
    assert fleet.input_row(pane) == "> fix the te" and fleet.records(member) == []

    fleet.server.run("send-keys", "-t", pane, "-l", "sts")  # the person finishes and submits
    fleet.server.run("send-keys", "-t", pane, "Enter")
    wait_for(lambda: fleet.records(member), what="the person's submission")
    waited = fleet.cafleet("message", "wait", str(member), "--timeout", "5", "--json")
    assert (waited.code, waited.err) == (0, "")
    assert fleet.submits(member) == ["fix the tests", preview_line(first.json())]
    assert fleet.notified_at(1) is not None


def test_member_prompt_never_submits_half_typed_input(fleet):
    typing = fleet.attach("typing", "--prefill", "my own dra")
    member, pane = typing["member_id"], typing["pane_id"]
    wait_for(lambda: fleet.input_row(pane) == "> my own dra", what="the half-typed text")
    refused = fleet.cafleet("member", "prompt", str(member), "please run the tests")
    assert (refused.code, refused.out) == (1, "")
    assert refused.err == (
        f"Error: held: input box has text in pane {pane} (someone is typing there), so "
        "nothing was typed and that text was left as it is.\n"
    )
    assert fleet.input_row(pane) == "> my own dra" and fleet.records(member) == []


def test_preview_cleared_by_a_starting_agent_is_owed_not_stamped(fleet):
    """claude right after `member create`: the preview typed while it starts is cleared
    from its box. Reported not notified, never stamped; the next send delivers it once."""
    starting = fleet.attach("starting", "--startup-clear")
    member, pane = starting["member_id"], starting["pane_id"]
    wait_for(lambda: fleet.input_row(pane) == ">", what="the stand-in to start")
    first = fleet.send(fleet.director, member, "first task", "--json")
    assert (first.code, first.json()["notified"]) == (0, False)
    assert "vanished from the standin input box" in first.err
    assert fleet.notified_at(1) is None and fleet.submits(member) == []
    second = fleet.send(fleet.director, member, "second task", "--json")
    assert (second.code, second.err, second.json()["notified"]) == (0, "", True)
    assert fleet.submits(member) == [preview_line(first.json()), preview_line(second.json())]


def test_a_preview_taken_late_is_found_by_the_retry_after_a_long_answer_scrolled_it_away(fleet, store_kind):
    """An agent that takes the Enter after the sender stopped waiting for the echo, then
    prints a long answer that pushes the echo up out of the rows a submission captures,
    into the pane's history (the stand-in's --inline, as claude and codex print). The
    sender pressed Enter for it, which the pane's lock file records (SQLite): the retry
    reads the history, finds the header and stamps it without typing it again. With an
    advisory lock (PostgreSQL) nothing is recorded and the retry types it once more, the one
    extra copy an interrupted attempt may add."""
    late = fleet.attach("late", "--late-echo", "8", "--reply-lines", "80", "--inline")
    member, pane = late["member_id"], late["pane_id"]
    fleet.wait_ready(member)
    first = fleet.send(fleet.director, member, "first task", "--json")
    assert (first.code, first.json()["notified"]) == (0, False)
    assert "vanished from the standin input box" in first.err
    line = preview_line(first.json())
    wait_for(
        lambda: "(reply line 80 of 80)" in fleet.server.run("capture-pane", "-p", "-t", pane),
        timeout=30,
        what="the late echo and the long answer",
    )
    waited = fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "1", "--json")
    assert waited.code == 3, waited  # its start-up retry ran; nothing arrived for the Director
    if store_kind == "sqlite":
        assert waited.err == ""
        assert fleet.submits(member) == [line]
        assert fleet.notified_at(first.json()["message_id"]) is not None
    else:
        assert fleet.submits(member)[:2] == [line, line]


def test_agent_still_starting_gets_nothing_typed(fleet):
    """codex while it shows `Waiting for startup`: nothing is typed (it would hold the
    Enter and glue the text to the next preview); `message wait` delivers it later."""
    starting = fleet.attach("codexish", "--waiting-for-startup")
    member, pane = starting["member_id"], starting["pane_id"]
    wait_for(lambda: fleet.input_row(pane) == ">", what="the stand-in to start")
    first = fleet.send(fleet.director, member, "early task", "--json")
    assert (first.code, first.json()["notified"]) == (0, False)
    assert first.err == not_notified(1, member, f"pane {pane} shows standin still starting, so nothing was typed")
    assert fleet.input_row(pane) == ">" and fleet.records(member) == []
    pid = int(fleet.server.run("display-message", "-p", "-t", pane, "#{pane_pid}"))
    os.kill(pid, signal.SIGUSR1)
    wait_for(
        lambda: "Waiting for startup" not in fleet.server.run("capture-pane", "-p", "-t", pane),
        what="the start-up to end",
    )
    waited = fleet.cafleet("message", "wait", str(member), "--timeout", "5", "--json")
    assert (waited.code, waited.err) == (0, "")
    assert fleet.submits(member) == [preview_line(first.json())]


def test_concurrent_senders_each_preview_arrives_once_and_whole(fleet):
    carol = fleet.create("carol")["member_id"]
    bodies = [f"task {i:02d}: " + "x" * (20 + 7 * i) + f" end {i:02d}" for i in range(CONCURRENT_SENDERS)]
    procs = [
        start(
            ["message", "send", "--from-member-id", str(fleet.director), "--to-member-id", str(carol), body, "--json"],
            fleet.environ,
        )
        for body in bodies
    ]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * CONCURRENT_SENDERS, outputs
    assert [err for _, err in outputs] == [b""] * CONCURRENT_SENDERS
    records = sorted((json.loads(out) for out, _ in outputs), key=lambda r: r["message_id"])
    assert sorted(r["text"] for r in records) == sorted(bodies)
    assert all(r["notified"] for r in records)
    # Exactly the twelve previews, each whole, in the order the messages were stored.
    assert fleet.submits(carol) == [preview_line(r) for r in records]
    assert [r["kind"] for r in fleet.records(carol)] == ["submit"] * CONCURRENT_SENDERS
    assert fleet.query("SELECT COUNT(*) FROM messages WHERE notified_at IS NULL") == [(0,)]


def test_sender_killed_while_typing_loses_nothing_and_frees_the_lock(fleet):
    dave = fleet.create("dave")
    member, pane = dave["member_id"], dave["pane_id"]
    slow = dict(fleet.environ, CAFLEET_SUBMIT_SETTLE="3")  # typed, then a long pause before Enter
    sender = start(
        ["message", "send", "--from-member-id", str(fleet.director), "--to-member-id", str(member), "owed task"], slow
    )
    stored = wait_for(
        lambda: fleet.query("SELECT created_at FROM messages WHERE message_id = 1"), what="message 1 to be stored"
    )
    owed = f"[cafleet msg 1 from {fleet.director} {stored[0][0]}]\u23ceowed task"
    wait_for(lambda: fleet.input_row(pane) == "> " + owed, what="the preview to be typed")
    os.kill(sender.pid, signal.SIGKILL)
    out, _err = sender.communicate(timeout=10)
    assert sender.returncode == -signal.SIGKILL
    assert out == f"sent message 1 to member {member}\n".encode()  # the id was printed before typing

    session = fleet.cafleet("member", "show", str(member), "--json").json()["placement"]["session"]
    with pane_lock(lock_space(fleet.db), "tmux", session, pane, 0):  # free at once (timeout 0: one try)
        pass
    assert fleet.notified_at(1) is None
    assert fleet.submits(member) == []
    assert fleet.cafleet("message", "show", "1", "--json").json()["text"] == "owed task"

    nxt = fleet.send(fleet.director, member, "next task", "--json")
    assert (nxt.code, nxt.err, nxt.json()["notified"]) == (0, "", True)
    # The killed sender's typed copy was still in the input box: the retry takes back
    # exactly those characters and types the preview once, never glued to a second copy.
    assert fleet.submits(member) == [owed, preview_line(nxt.json())]
    assert fleet.query("SELECT COUNT(*) FROM messages WHERE notified_at IS NULL") == [(0,)]


@pytest.mark.stores("sqlite")  # it breaks the lock file; an advisory lock has none
def test_broadcast_with_one_broken_pane_lock_notifies_the_others_and_exits_0(fleet):
    """A fan-out where one recipient's delivery fails with an OSError (its lock file is a
    folder): every id is printed, that one failure is a warning, the others get their
    preview, and a later wait retries the owed one once the lock works again."""

    alice, bob = fleet.create("alice"), fleet.create("bob")
    placement = fleet.cafleet("member", "show", str(bob["member_id"]), "--json").json()["placement"]
    broken = Path(lock_space(fleet.db).pane_path("tmux", placement["session"], bob["pane_id"]))
    broken.unlink()  # left by member create (the pane-id patch takes the lock); nobody holds it now
    broken.mkdir()
    result = fleet.cafleet("message", "broadcast", "--from-member-id", str(fleet.director), "all hands")
    assert (result.code, result.out) == (
        0,
        f"sent message 1 to member {alice['member_id']}\nsent message 2 to member {bob['member_id']}\n",
    )
    reason = (
        f"the pane-input lock for pane {bob['pane_id']} cannot be taken ([Errno 21] Is a directory: "
        f"{str(broken)!r}); {lock_space(fleet.db).folder} must be a folder this user can write"
    )
    assert result.err == not_notified(2, bob["member_id"], reason)
    shown = fleet.cafleet("message", "show", "1", "--json").json()
    assert fleet.submits(alice["member_id"]) == [preview_line(shown)]
    assert (fleet.notified_at(1) is not None, fleet.notified_at(2)) == (True, None)

    broken.rmdir()
    waited = fleet.cafleet("message", "wait", str(alice["member_id"]), "--timeout", "0")
    assert (waited.code, waited.err) == (0, "")
    assert fleet.submits(bob["member_id"]) == [preview_line(fleet.cafleet("message", "show", "2", "--json").json())]
    assert fleet.notified_at(2) is not None


def test_a_broadcast_types_into_its_recipients_panes_at_once_each_preview_once_and_oldest_first(fleet, tmp_path):
    """Recipients' previews are typed at the same time (the first submission is confirmed
    only after several were typed), and each recipient's drain is the one a send runs: one
    owed an older message gets that one first, and every preview arrives exactly once."""
    from cafleet.broker import messages
    from cafleet.store.engines import open_store

    created = [fleet.create(f"crew{i}") for i in range(6)]
    ids = [record["member_id"] for record in created]
    store = open_store(str(fleet.db))
    try:
        older = messages.send(store, fleet.director, ids[2], "older task")  # stored, its preview owed
    finally:
        store.close()
    trace = tmp_path / "trace"
    environ = dict(fleet.environ, CAFLEET_SUBMIT_SETTLE="1.0", CAFLEET_TEST_TRACE=str(trace))
    result = fleet.cafleet(
        "message", "broadcast", "--from-member-id", str(fleet.director), "all hands", environ=environ
    )
    assert (result.code, result.err) == (0, "")
    sent = {int(line.split()[-1]): int(line.split()[2]) for line in result.out.splitlines()}
    assert list(sent) == ids  # printed in recipient order, each as it was committed
    shown = {m: fleet.cafleet("message", "show", str(i), "--json").json() for m, i in sent.items()}
    for member_id in ids:
        expected = [preview_line(older)] if member_id == ids[2] else []
        assert fleet.submits(member_id) == [*expected, preview_line(shown[member_id])]
    assert fleet.query("SELECT COUNT(*) FROM messages WHERE notified_at IS NULL") == [(0,)]
    steps = trace.read_text(encoding="utf-8").splitlines()
    typed = [step for step in steps if step.startswith("drain.typing ")]
    assert sorted(typed) == sorted(f"drain.typing {i}" for i in [older["message_id"], *sent.values()])
    first_confirmed = next(n for n, step in enumerate(steps) if step.startswith("drain.submitted "))
    assert sum(step.startswith("drain.typing ") for step in steps[:first_confirmed]) >= 2  # typed at once
    assert steps.index(f"drain.submitted {older['message_id']}") < steps.index(f"drain.typing {sent[ids[2]]}")


def test_hostile_body_arrives_as_inert_text(fleet, store_kind):
    erin = fleet.create("erin")["member_id"]
    body = (
        "A\x1b[2J\x1b[31mred\x1b[0m B\x03C C-c Enter ; Escape \x1b]0;pwned\x07D \u202eevil\u202c"
        " \x9b1;2H E\x1bOA F\x85G\x7fH\tI\r\nJ \x90q\x9c\x1b[1mK C-m BSpace\x00Z;"
    )
    if store_kind == "postgres":  # its text cannot hold U+0000 (refused: test_postgres.py); the preview drops it anyway
        body = body.replace("\x00", "")
    result = fleet.send(fleet.director, erin, body, "--json")
    assert (result.code, result.err) == (0, "")
    record = result.json()
    assert record["text"] == body  # stored exactly
    expected = (
        f"[cafleet msg {record['message_id']} from {fleet.director} {record['created_at']}]\u23ce"
        "Ared BC C-c Enter ; Escape D evil  EA F\u23ceGH I\u23ceJ K C-m BSpaceZ;"
    )
    assert fleet.records(erin) == [{"ts": fleet.records(erin)[0]["ts"], "kind": "submit", "text": expected}]
    assert record["notified"] is True


def test_key_name_alone_in_a_typed_chunk_stays_text(fleet):
    """Long text is typed in several tmux commands; a chunk that is exactly a key name
    ("C-c") must still arrive as letters, not as Ctrl-C. A preview is bounded
    (``PREVIEW_MAX_LEN``), so the long line is a ``member prompt``, which is typed whole."""
    fleet.server.run("resize-window", "-t", fleet.director_pane, "-x", "400", "-y", "100")  # room for 8 KiB
    gina = fleet.create("gina")["member_id"]
    chunk = len(text_chunks("y" * 100_000)[0])
    line = "y" * chunk + "C-c"
    result = fleet.cafleet("member", "prompt", str(gina), line)
    assert (result.code, result.err) == (0, "")
    assert text_chunks(line)[-1] == "C-c"  # the case under test really happened
    assert fleet.submits(gina) == [line]
    assert [r["kind"] for r in fleet.records(gina)] == ["submit"]


def test_a_long_body_types_a_bounded_preview_and_stays_whole_in_poll_and_show(fleet):
    """A 6,000-character body with ``CAFLEET_MAX_TEXT_LEN`` at its maximum: the preview
    typed is cut to ``preview.PREVIEW_MAX_LEN`` code points of body (a line that long would
    wrap over dozens of rows, or be collapsed by the agent, and could not be confirmed);
    the whole body is still what poll and show return."""
    from cafleet.delivery.keystrokes.preview import PREVIEW_MAX_LEN

    hana = fleet.create("hana")["member_id"]
    body = "".join(f"word{n:04d} " for n in range(700))[:6000]
    assert len(body) == 6000
    wide = dict(fleet.environ, CAFLEET_MAX_TEXT_LEN="1000000")
    result = fleet.send(fleet.director, hana, body, "--json", environ=wide)
    assert (result.code, result.err) == (0, "")
    record = result.json()
    assert record["notified"] is True
    [typed] = fleet.submits(hana)
    header = preview_line(dict(record, text=""))
    assert typed == header + body[:PREVIEW_MAX_LEN] + "\u2026"
    shown = fleet.cafleet("message", "show", str(record["message_id"]), "--json", environ=wide).json()
    assert shown["text"] == body
    polled = fleet.cafleet("message", "poll", str(hana), environ=wide)
    assert polled.code == 0 and body in polled.out


def test_messages_to_the_director_are_never_typed(fleet):
    alice = fleet.create("alice")["member_id"]
    plain = fleet.send(alice, fleet.director, "result: 42\nplease ack")
    assert (plain.code, plain.out, plain.err) == (0, f"sent message 1 to member {fleet.director}\n", "")
    as_json = fleet.send(alice, fleet.director, "\x1b[2J C-c Enter", "--json")
    assert (as_json.code, as_json.err, as_json.json()["notified"]) == (0, "", False)
    waited = fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "2", "--json")
    assert (waited.code, waited.err) == (0, "")
    assert [r["message_id"] for r in waited.json()] == [2, 1]
    assert fleet.query("SELECT notified_at FROM messages") == [(None,), (None,)]
    assert fleet.director_bytes.read_bytes() == b""


def test_member_prompt_and_capture(fleet):
    frank = fleet.create("frank")
    member, pane = frank["member_id"], frank["pane_id"]
    result = fleet.cafleet("member", "prompt", str(member), "please run the tests")
    assert (result.code, result.out, result.err) == (0, f"prompt submitted to member {member} (pane {pane})\n", "")
    assert [(r["kind"], r["text"]) for r in fleet.records(member)] == [("submit", "please run the tests")]

    # tmux keeps the blanks of cleared cells at a row's end (capture -J): compare rows without them.
    shown = fleet.cafleet("member", "capture", str(member), "--lines", "3")
    assert (shown.code, shown.err) == (0, "")
    assert [row.rstrip() for row in shown.out.split("\n")] == ["• please run the tests", "─" * 24, ">", ""]
    as_json = fleet.cafleet("member", "capture", str(member), "--json").json()
    assert (as_json["member_id"], as_json["pane_id"]) == (member, pane)
    assert [row.rstrip() for row in as_json["text"].split("\n")] == [
        f"cafleet stand-in agent · member {member} · Ctrl-C quits",
        "• please run the tests",
        "─" * 24,
        ">",
    ]

    refused = fleet.cafleet("member", "prompt", str(member), "two\nlines")
    assert (refused.code, refused.err) == (2, "Error: the prompt must be one non-blank line.\n")
    assert len(fleet.records(member)) == 1


# --- the same delivery through herdr ------------------------------------------------------


def test_herdr_send_then_dead_pane(herdr):
    created = herdr.create("henry")
    member, pane = created["member_id"], created["pane_id"]
    assert (created["backend"], pane.startswith("w1:p")) == ("herdr", True)
    sent = herdr.send(herdr.director, member, "hello over herdr\nline two", "--json")
    assert (sent.code, sent.err, sent.json()["notified"]) == (0, "", True)
    assert herdr.submits(member) == [preview_line(sent.json())]
    assert herdr.notified_at(1) is not None

    closed = herdr.server.run("pane", "close", pane)
    assert closed.returncode == 0, closed.stderr
    lost = herdr.send(herdr.director, member, "still there?", "--json")
    assert (lost.code, lost.json()["notified"]) == (0, False)
    gone = f"herdr pane {pane} is gone (pane {pane} not found (pane_not_found))"
    assert lost.err == pane_gone(2, member, gone, herdr.fleet_id)
    assert herdr.notified_at(2) is None
    assert herdr.submits(member) == [preview_line(sent.json())]
