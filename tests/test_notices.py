"""Notices in the Director's inbox and `cafleet member answer` (docs/delivery.md, "Notices in
the Director's inbox", "Answering a blocked member").

Real panes on a private tmux server, the real command line, the stand-in agent (its
``--permission-prompt`` draws a claude-like dialog; a submitted ``/permission`` draws it
again). The keeper test turns the keeper on and ends it by its pid at teardown; the
episode tests run the keeper's noticer in this process, one look at a time, so nothing
depends on timing. Every wait is bounded (``wait_for``); none is a timed assertion.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
from pathlib import Path

import pytest

from cafleet.config import Settings
from tests.support.drawn import Drawn, buttons, visible
from tests.support.keeper import assert_none_left
from tests.support.pane_fleet import start, tmux_fleet
from tests.support.remote_fleet import create_remote, fleet_with_hosts, short_directory
from tests.support.tmux_fixtures import wait_for

FAST_NOTICES = {"CAFLEET_NOTICE_AWAITING_AFTER": "0", "CAFLEET_NOTICE_INTERVAL": "0.2"}


def notice_env(env, monkeypatch, **extra: str) -> None:
    for name, value in {**FAST_NOTICES, **extra}.items():
        env[name] = value
        monkeypatch.setenv(name, value)


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    """A fleet in a real pane, the keeper off (the tests run the noticer themselves)."""
    notice_env(env, monkeypatch)
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            assert_none_left(pane_fleet.db)


@pytest.fixture
def kept(env, tmp_path, monkeypatch):
    """A fleet with the keeper on (`fleet create` starts it), ended by its pid at teardown."""
    notice_env(env, monkeypatch, CAFLEET_KEEPER="on")
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        try:
            yield pane_fleet
        finally:

            def recorded() -> list[int]:
                shown = pane_fleet.cafleet("fleet", "show", str(pane_fleet.fleet_id), "--json").json()["keeper"]
                return [shown["pid"]] if shown["running"] and shown["pid"] else []

            assert_none_left(pane_fleet.db, recorded)


@pytest.fixture
def noticer(fleet):
    """The keeper's noticer for the fleet, in this process: ``look()`` is one round."""
    from cafleet.delivery.supervision.notices import Noticer
    from cafleet.store.engines import open_store

    store = open_store(str(fleet.db))
    try:
        yield Noticer(store, Settings(fleet.environ), fleet.fleet_id)
    finally:
        store.close()


def asking(fleet, name: str = "asking") -> dict:
    member = fleet.attach(name, "--permission-prompt")
    wait_for(lambda: fleet.input_row(member["pane_id"]) == "  2. No", what="the permission prompt")
    return member


def inbox(fleet) -> list[dict]:
    polled = fleet.cafleet("message", "poll", str(fleet.director), "--json")
    assert polled.code == 0, polled
    return polled.json()


def notices_of(fleet, kind: str | None = None) -> list[dict]:
    return [r for r in inbox(fleet) if "kind" in r and (kind is None or r["kind"] == kind)]


def permissions(fleet, member_id: int) -> list[str]:
    return [r["text"] for r in fleet.records(member_id) if r["kind"] == "permission"]


def keys(fleet, member_id: int) -> list[dict]:
    return [r for r in fleet.records(member_id) if r["kind"] in ("permission", "submit", "key")]


# --- a Director blocked in `message wait` wakes for a blocked member ---------------------------


def test_a_notice_reaches_a_director_blocked_in_message_wait_and_names_the_dialog(kept):
    fleet = kept
    waiting = start(["message", "wait", str(fleet.director), "--json"], fleet.environ)
    try:
        member = asking(fleet)
        out, err = waiting.communicate(timeout=60)
    except BaseException:
        shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["keeper"]
        print(shown, Path(shown["log"]).read_text() if shown.get("log") else "")  # the keeper's log, on failure
        raise
    finally:
        if waiting.poll() is None:
            waiting.kill()
            waiting.wait()
    assert waiting.returncode == 0, err
    [notice] = json.loads(out)
    member_id = member["member_id"]
    assert notice["kind"] == "awaiting_user"
    assert notice["from_member_id"] == notice["to_member_id"] == fleet.director
    assert notice["notice"]["member_id"] == member_id and notice["notice"]["subject"] == f"member:{member_id}"
    lines = notice["text"].splitlines()
    assert lines[0] == f"[cafleet notice awaiting_user member:{member_id}]"
    assert "    Do you want to proceed?" in lines and "    ❯ 1. Yes" in lines and "      2. No" in lines
    digest = notice["notice"]["dialog"]
    assert f"cafleet member answer {member_id} CHOICE --dialog {digest}" in notice["text"]
    assert fleet.notified_at(notice["message_id"]) is not None  # a self-send: never typed anywhere
    shown = fleet.cafleet("message", "show", str(notice["message_id"]), "--json").json()
    assert shown["kind"] == "awaiting_user"
    answered = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", digest)
    assert answered.code == 0, answered
    assert answered.out.startswith(f"answered option 1 (Yes) of the dialog on member {member_id}'s pane")
    wait_for(lambda: permissions(fleet, member_id) == ["1"], what="the dialog answered")
    wait_for(lambda: fleet.input_row(member["pane_id"]) == ">", what="the dialog gone")
    assert [r["kind"] for r in notices_of(fleet)] == ["awaiting_user"]  # still one, pending until ACKed


# --- each kind once per episode -----------------------------------------------------------------


def test_awaiting_user_is_noticed_once_per_episode(fleet, noticer):
    member = asking(fleet)
    member_id = member["member_id"]
    noticer.look()
    noticer.look()
    [first] = notices_of(fleet, "awaiting_user")
    answered = fleet.cafleet("member", "answer", str(member_id), "2", "--dialog", first["notice"]["dialog"])
    assert answered.code == 0, answered
    wait_for(lambda: fleet.input_row(member["pane_id"]) == ">", what="the dialog answered")
    noticer.look()  # the episode ends
    noticer.look()
    assert len(notices_of(fleet, "awaiting_user")) == 1
    fleet.server.run("send-keys", "-t", member["pane_id"], "-l", "/permission")
    fleet.server.run("send-keys", "-t", member["pane_id"], "Enter")
    wait_for(lambda: fleet.input_row(member["pane_id"]) == "  2. No", what="the second permission prompt")
    noticer.look()
    noticer.look()
    found = notices_of(fleet, "awaiting_user")
    assert len(found) == 2 and found[0]["message_id"] > found[1]["message_id"]  # newest first


def test_a_restarted_keeper_does_not_notice_an_open_episode_again(fleet, noticer):
    """The episode is in the store, not in the process: a new noticer (a keeper started
    again) that has not yet seen the member blocked for its threshold keeps the episode
    open instead of ending it and noticing it a second time."""
    from cafleet.delivery.supervision.notices import Noticer

    asking(fleet)
    noticer.look()
    assert len(notices_of(fleet, "awaiting_user")) == 1
    restarted = Noticer(noticer.store, Settings(fleet.environ), fleet.fleet_id)
    restarted.awaiting_after = 3600.0
    restarted.look()
    restarted.look()
    restarted.awaiting_after = 0.0
    restarted.look()
    assert len(notices_of(fleet, "awaiting_user")) == 1
    assert fleet.query("SELECT COUNT(*) FROM cafleet_aux_notices WHERE cleared_at IS NULL")[0][0] == 1


def test_a_dead_pane_with_messages_owed_is_noticed_once(fleet, noticer):
    member = fleet.attach("doomed")
    fleet.wait_ready(member["member_id"])
    fleet.server.run("kill-pane", "-t", member["pane_id"])
    sent = fleet.send(fleet.director, member["member_id"], "are you there?", "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    noticer.look()
    noticer.look()
    [notice] = notices_of(fleet, "dead")
    message_id = sent.json()["message_id"]
    assert notice["text"].splitlines()[0] == f"[cafleet notice dead member:{member['member_id']}]"
    assert f"Message {message_id} is owed a preview" in notice["text"]


def test_a_dead_pane_with_nothing_owed_is_not_noticed(fleet, noticer):
    member = fleet.attach("quiet")
    fleet.wait_ready(member["member_id"])
    fleet.server.run("kill-pane", "-t", member["pane_id"])
    noticer.look()
    assert notices_of(fleet) == []


def test_a_silent_member_is_noticed_once_and_the_episode_ends_when_it_speaks(fleet, noticer):
    noticer.silent_after = 0.0
    member = fleet.attach("mute")
    fleet.wait_ready(member["member_id"])
    noticer.look()
    noticer.look()
    [notice] = notices_of(fleet, "silent")
    assert notice["text"].splitlines()[0] == f"[cafleet notice silent member:{member['member_id']}]"
    assert f"cafleet member capture {member['member_id']}" in notice["text"]
    said = fleet.send(member["member_id"], fleet.director, "hello")
    assert said.code == 0, said
    noticer.look()
    noticer.look()
    assert len(notices_of(fleet, "silent")) == 1
    open_rows = fleet.query("SELECT COUNT(*) FROM cafleet_aux_notices WHERE cleared_at IS NULL")[0][0]
    assert open_rows == 0


@pytest.mark.slow
def test_an_unreachable_host_is_noticed_once_and_the_episode_ends_when_it_answers(env, tmp_path, monkeypatch):
    from cafleet.delivery.supervision.notices import Noticer
    from cafleet.store.engines import open_store

    notice_env(env, monkeypatch)
    with (
        short_directory() as short_dir,
        fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (fleet, [host]),
    ):
        try:
            created = create_remote(fleet, host, "far", "--json")
            assert created.code == 0, created
            member_id = created.json()["member_id"]
            fleet.wait_ready(member_id)
            store = open_store(str(fleet.db))
            try:
                noticer = Noticer(store, Settings(fleet.environ), fleet.fleet_id)
                noticer.look()
                assert notices_of(fleet) == []
                host.stop()
                noticer.look()
                noticer.look()
                [notice] = notices_of(fleet, "unreachable")
                assert notice["text"].splitlines()[0] == f"[cafleet notice unreachable host:{host.alias}]"
                assert notice["notice"]["member_id"] == member_id
                host.start()
                noticer.look()
                opened = fleet.query("SELECT COUNT(*) FROM cafleet_aux_notices WHERE cleared_at IS NULL")
                assert opened[0][0] == 0
                assert len(notices_of(fleet, "unreachable")) == 1
            finally:
                store.close()
        finally:
            assert_none_left(fleet.db)


def test_a_member_over_its_budget_is_noticed_once_and_the_episode_ends_when_it_is_raised(build, store, env, tmp_path):
    """The send path's budget gate is the condition: a member whose agent's records (a
    claude transcript) show its token budget spent gets one notice."""
    from cafleet.broker import messages, usage
    from cafleet.delivery.supervision.notices import Noticer
    from tests.support.usage_records import call_lines, write_calls

    config = tmp_path / "claude-config"
    fleet_id, director, (alice,) = build.fleet("spend", 1)

    def budget(tokens: int) -> None:
        usage.record_source(
            store, alice, coding_agent="claude", session_id="s-a", data_dir=str(config), cwd="/w", budget_tokens=tokens
        )

    budget(100)
    write_calls(config, "s-a", call_lines("m1", 1001, 11))
    noticer = Noticer(store, Settings(env), fleet_id)
    noticer.look()
    noticer.look()
    found = [r for r in messages.poll(store, director) if "kind" in r]
    assert [r["kind"] for r in found] == ["over_budget"]
    assert found[0]["text"].splitlines()[0] == f"[cafleet notice over_budget member:{alice}]"
    assert "over its budget" in found[0]["text"]
    budget(10**9)
    noticer.look()
    assert store.execute("SELECT COUNT(*) FROM cafleet_aux_notices WHERE cleared_at IS NULL").fetchone()[0] == 0
    assert len([r for r in messages.poll(store, director) if "kind" in r]) == 1


def test_the_director_is_never_the_subject_of_a_notice(fleet, noticer):
    noticer.silent_after = 0.0  # the Director has sent nothing either
    noticer.look()
    assert notices_of(fleet) == []


def test_a_notice_escapes_the_dialogs_text(fleet, noticer):
    """A dialog is drawn from text the agent's model chose: control and bidi characters
    never reach the Director's inbox, yet each is shown where it was (a visible escape), and
    no row is cut (tests/test_dialog_digest.py)."""
    from cafleet.delivery.keystrokes import dialog

    hostile = "Run \u202erm -rf\u202c \x1b]0;x\x07 " + "y" * 500
    seen = dialog.read("standin", f"{hostile}\nDo you want to proceed?\n❯ 1. Yes\n  2. No\n")
    assert seen is not None
    assert all(ch not in line for line in seen.lines for ch in "\u202e\u202c\x1b\x07")
    assert seen.lines[0] == "Run ⟦U+202E⟧rm -rf⟦U+202C⟧ ⟦U+001B⟧]0;x⟦U+0007⟧ " + "y" * 500
    assert seen.options == ((1, "Yes"), (2, "No"))


# --- `member answer` never answers a dialog that changed ---------------------------------------


def current_digest(fleet, member_id: int) -> str:
    from cafleet.delivery.keystrokes import dialog

    pane = fleet.cafleet("member", "show", str(member_id), "--json").json()["placement"]["pane_id"]
    seen = dialog.read("standin", visible(fleet, pane))
    assert seen is not None, visible(fleet, pane)
    return seen.digest


def test_member_answer_refuses_a_dialog_that_changed(fleet):
    member = asking(fleet)
    member_id = member["member_id"]
    before = current_digest(fleet, member_id)
    fleet.server.run("send-keys", "-t", member["pane_id"], "-l", "2")  # the user answers it by hand
    fleet.server.run("send-keys", "-t", member["pane_id"], "Enter")
    wait_for(lambda: fleet.input_row(member["pane_id"]) == ">", what="the dialog answered by hand")
    fleet.server.run("send-keys", "-t", member["pane_id"], "-l", "/permission")  # and a new one is asked
    fleet.server.run("send-keys", "-t", member["pane_id"], "Enter")
    wait_for(lambda: fleet.input_row(member["pane_id"]) == "  2. No", what="the second dialog")
    after = current_digest(fleet, member_id)
    assert after != before  # the transcript above it moved: another dialog
    typed = keys(fleet, member_id)
    refused = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", before)
    assert refused.code == 1, refused
    assert refused.err.startswith(
        f"Error: the dialog on member {member_id}'s pane {member['pane_id']} is not the one with digest {before}"
    )
    assert "nothing was sent" in refused.err and len(refused.err.strip().splitlines()) == 1
    assert keys(fleet, member_id) == typed  # no key reached the pane
    assert fleet.input_row(member["pane_id"]) == "  2. No"


def test_member_answer_refuses_when_no_dialog_is_shown(fleet):
    member = asking(fleet)
    member_id = member["member_id"]
    digest = current_digest(fleet, member_id)
    fleet.server.run("send-keys", "-t", member["pane_id"], "-l", "1")
    fleet.server.run("send-keys", "-t", member["pane_id"], "Enter")
    wait_for(lambda: fleet.input_row(member["pane_id"]) == ">", what="the dialog answered by hand")
    typed = keys(fleet, member_id)
    refused = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", digest)
    assert refused.code == 1, refused
    assert "shows no dialog awaiting its user now" in refused.err and "nothing was sent" in refused.err
    assert keys(fleet, member_id) == typed
    assert fleet.input_row(member["pane_id"]) == ">"  # no digit typed into the input box


def test_member_answer_refuses_an_option_the_dialog_does_not_have(fleet):
    member = asking(fleet)
    member_id = member["member_id"]
    digest = current_digest(fleet, member_id)
    typed = keys(fleet, member_id)
    refused = fleet.cafleet("member", "answer", str(member_id), "3", "--dialog", digest)
    assert refused.code == 1 and "has no option 3 (its options: 1, 2); nothing was sent" in refused.err, refused
    bad = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", "not-hex")
    assert bad.code == 2 and bad.err.startswith("Error: --dialog must be the dialog's digest"), bad
    assert keys(fleet, member_id) == typed


# --- the digest names the whole dialog, and the option's label is checked (issue 29) -----------

NO = "No, and tell Claude what to do differently (esc)"


def boxed(*rows: str) -> list[str]:
    """A claude-like permission dialog in a frame (as claude drew them before 2.1): every row
    padded to the frame's right bar by the columns it takes (a zero-width character none)."""
    import unicodedata

    def cells(row: str) -> int:
        return sum(unicodedata.category(ch) != "Cf" for ch in row)

    width = max(100, *(cells(row) for row in rows))
    framed = [f"│ {row}{' ' * (width - cells(row))} │" for row in rows]
    return ["╭" + "─" * (width + 2) + "╮", *framed, "╰" + "─" * (width + 2) + "╯"]


def permission(*command: str, yes: str = "Yes") -> list[str]:
    lines = [f"  {line}" for line in command]
    return boxed("Bash command", "", *lines, "", "Do you want to proceed?", f"❯ 1. {yes}", f"  2. {NO}")


# Dialogs the digest used to take for one another: (the one the notice describes, the one the
# pane shows when the answer comes).
CHANGED = {
    "a row that differs past its 160th character": (
        permission("echo " + "x" * 250 + " && echo ok"),
        permission("echo " + "x" * 250 + " && rm -rf ~"),
    ),
    "a row more than 30 rows above the bottom": (
        permission("sh -c '", "echo ok", *(f"printf 'step {n}\\n'" for n in range(1, 35)), "'"),
        permission("sh -c '", "rm -rf ~", *(f"printf 'step {n}\\n'" for n in range(1, 35)), "'"),
    ),
    "a zero-width space": (permission("rm -rf build"), permission("rm -rf bu\u200bild")),
}


@pytest.mark.parametrize("change", list(CHANGED))
def test_member_answer_refuses_a_dialog_that_changed_where_the_digest_did_not_look(fleet, noticer, tmp_path, change):
    """The notice's digest covers every row of the dialog on the pane's visible screen, in
    full, hidden characters shown: a dialog that changed only past a row's 160th character,
    above the last 30 rows, or by a zero-width space is another dialog, and the answer the
    Director gave for the first one is refused, with no key sent. The second dialog gets a
    notice of its own; its digest answers it, and the output's label is the option's own,
    without the frame's padding and bar."""
    described, replaced = CHANGED[change]
    drawn = Drawn(fleet, tmp_path, described)
    member_id, pane = drawn.member_id, drawn.pane
    noticer.look()
    [first] = notices_of(fleet, "awaiting_user")
    digest = first["notice"]["dialog"]
    drawn.show(replaced)
    refused = drawn.answer("1", "--dialog", digest)
    assert refused.code == 1, refused
    assert refused.err.startswith(
        f"Error: the dialog on member {member_id}'s pane {pane} is not the one with digest {digest} (it changed;"
    )
    assert "nothing was sent" in refused.err and len(refused.err.strip().splitlines()) == 1
    assert drawn.keys.read_bytes() == b""
    differing = next(a for a, b in zip(described, replaced, strict=True) if a != b)
    assert f"    {differing.rstrip()}" in first["text"].splitlines()  # the notice showed that row whole
    noticer.look()  # another dialog: its own notice
    [second] = [n for n in notices_of(fleet, "awaiting_user") if n["message_id"] != first["message_id"]]
    assert second["notice"]["dialog"] != digest
    if change == "a zero-width space":
        assert "    │   rm -rf bu⟦U+200B⟧ild" in second["text"]  # what the screen hides, the notice shows
    answered = drawn.answer("1", "--dialog", second["notice"]["dialog"])
    assert answered.code == 0, answered
    assert answered.out == f"answered option 1 (Yes) of the dialog on member {member_id}'s pane {pane}\n"
    wait_for(lambda: drawn.keys.read_bytes() == b"1", what="the key to reach the pane")


def test_member_answer_refuses_an_option_whose_label_is_not_the_one_given(fleet, noticer, tmp_path):
    """`--label` says what the option must read: a CHOICE that reads otherwise is refused
    with nothing sent, and so is an option relabelled since the notice (then the digest
    changed too: one line says both)."""
    drawn = Drawn(fleet, tmp_path, permission("touch made-by-the-agent"))
    member_id, pane = drawn.member_id, drawn.pane
    noticer.look()
    [notice] = notices_of(fleet, "awaiting_user")
    digest = notice["notice"]["dialog"]
    wrong = drawn.answer("2", "--dialog", digest, "--label", "Yes")
    assert wrong.code == 1, wrong
    assert wrong.err == (
        f'Error: option 2 reads "{NO}", not "Yes" in the dialog on member {member_id}\'s pane {pane}; '
        "nothing was sent. Check CHOICE and --label against the notice before answering.\n"
    )
    relabelled = "Yes, and do not ask again for rm -rf"
    drawn.show(permission("touch made-by-the-agent", yes=relabelled))
    changed = drawn.answer("1", "--dialog", digest, "--label", "Yes")
    assert changed.code == 1, changed
    assert f'and its option 1 reads "{relabelled}", not "Yes"); nothing was sent.' in changed.err
    assert len(changed.err.strip().splitlines()) == 1
    blank = drawn.answer("1", "--dialog", digest, "--label", " ")
    assert blank.code == 2 and blank.err.startswith("Error: --label must be the option's label"), blank
    assert drawn.keys.read_bytes() == b""
    noticer.look()
    [now] = [n for n in notices_of(fleet, "awaiting_user") if n["message_id"] != notice["message_id"]]
    answered = drawn.answer("1", "--dialog", now["notice"]["dialog"], "--label", relabelled)
    assert answered.code == 0, answered
    assert answered.out == f"answered option 1 ({relabelled}) of the dialog on member {member_id}'s pane {pane}\n"
    wait_for(lambda: drawn.keys.read_bytes() == b"1", what="the key to reach the pane")


# --- every not-notified line names its ids and what retries them (issue 19, item 6) ------------


def test_a_send_whose_drain_fails_unexpectedly_names_the_keeper_that_retries_it(kept, monkeypatch):
    """An unexpected error in the drain after the row was committed (here an I/O error
    injected into the drain itself: no real program fails there on demand) is a warning
    naming the message id; it used to name "the next send or a later wait" as its retrier
    and leave the keeper unstarted. It names the keeper, which delivers it once."""
    from cafleet import config
    from cafleet.broker import messages
    from cafleet.delivery.keystrokes import drain
    from cafleet.store.engines import open_store

    fleet = kept
    member = fleet.attach("worker")
    member_id = member["member_id"]
    fleet.wait_ready(member_id)
    store = open_store(str(fleet.db))
    try:
        record = messages.send(store, fleet.director, member_id, "task")
        with monkeypatch.context() as patch:

            def broken(*args, **kwargs):
                raise OSError(5, "Input/output error")

            patch.setattr(drain, "drain", broken)
            outcome = drain.notify_after_send(store, config.Settings(fleet.environ, str(fleet.db)), member_id, record)
    finally:
        store.close()
    message_id = record["message_id"]
    assert outcome.failure == (
        f"Warning: message {message_id} is stored but member {member_id} was not notified: pane input failed "
        "with an operating-system error ([Errno 5] Input/output error). The fleet keeper retries it as soon as "
        "the pane can take it. Do not resend."
    )
    wait_for(lambda: fleet.notified_at(message_id) is not None, what="the keeper to deliver it")
    assert len(fleet.submits(member_id)) == 1


def test_with_the_keeper_off_fleet_watch_posts_the_notices(fleet):
    """`fleet watch` does the keeper's job while the keeper is off: notices included."""
    from tests.support.watch_stream import Stream

    watch = Stream(fleet.environ, fleet.fleet_id)
    try:
        member = asking(fleet)
        [notice] = wait_for(lambda: notices_of(fleet, "awaiting_user"), what="the watch's notice")
        assert notice["notice"]["member_id"] == member["member_id"]
        # the watch prints it at its next look: read until it did, never stop it before
        said = watch.wait_event(lambda e: e.get("message_id") == notice["message_id"])
        assert said["detail"] == f"notice for the Director: awaiting_user member:{member['member_id']}", said
    finally:
        watch.stop()  # by its own pid: the Popen this test started


# --- a dialog whose options are buttons without numbers (opencode's permission prompt) ------


def test_member_answer_confirms_a_button_only_once_the_screen_shows_it_selected(fleet, noticer, tmp_path):
    """opencode's permission prompt has buttons, numbered 1..3 left to right in the notice.
    An answer moves the selection with the right arrow and presses Enter only once the screen
    shows the chosen button selected in the same dialog: this pane never moves it, so after
    the arrows nothing more is sent (no Enter, no Escape, which would reject), and the refusal
    says so in one line. Once the chosen button shows selected, the answer is Enter alone."""
    drawn = Drawn(fleet, tmp_path, buttons(1), agent="opencode")
    member_id, pane = drawn.member_id, drawn.pane
    noticer.look()
    [notice] = notices_of(fleet, "awaiting_user")
    digest = notice["notice"]["dialog"]
    assert notice["text"].endswith(
        f"Answer it: `cafleet member answer {member_id} CHOICE --dialog {digest}` (CHOICE: its buttons numbered "
        f"left to right: 1 Allow once, 2 Allow always, 3 Reject), or in pane {pane}."
    ), notice["text"]
    assert "no numbered option" not in notice["text"]
    shown = fleet.cafleet("member", "show", str(member_id), "--with-dialog")
    assert shown.code == 0, shown
    assert shown.out.endswith(
        f"options (its buttons, numbered left to right): 1 Allow once, 2 Allow always, 3 Reject\n"
        f"answer: cafleet member answer {member_id} CHOICE --dialog {digest}\n"
    ), shown
    assert any(line.startswith("      ┃   Allow once   Allow always   Reject ") for line in shown.out.splitlines())
    record = fleet.cafleet("member", "show", str(member_id), "--with-dialog", "--json").json()["dialog"]
    assert (record["digest"], record["numbered"], record["options"][2]) == (
        digest,
        False,
        {"number": 3, "label": "Reject"},
    )
    assert "dialog" not in fleet.cafleet("member", "show", str(member_id), "--json").json()  # no screen read
    mislabelled = drawn.answer("3", "--dialog", digest, "--label", "Allow once")
    assert mislabelled.code == 1 and 'option 3 reads "Reject", not "Allow once"' in mislabelled.err, mislabelled
    assert drawn.keys.read_bytes() == b""
    stuck = drawn.answer("3", "--dialog", digest, "--label", "Reject")
    assert stuck.code == 1, stuck
    assert stuck.err == (
        f'Error: the dialog on member {member_id}\'s pane {pane} did not show option 3 ("Reject") selected after '
        '2 right key presses: its screen showed option 1 ("Allow once") selected; Enter was not sent, so nothing '
        f"was chosen (the dialog stays open: see `cafleet member capture {member_id}`).\n"
    ), stuck
    assert drawn.keys.read_bytes() == b"\x1b[C\x1b[C"  # the two arrows, nothing after them
    drawn.show(buttons(3))  # the selection moved: the same dialog (same digest), Reject selected
    answered = drawn.answer("3", "--dialog", digest, "--label", "Reject")
    assert answered.code == 0, answered
    assert answered.out == f"answered option 3 (Reject) of the dialog on member {member_id}'s pane {pane}\n"
    wait_for(lambda: drawn.keys.read_bytes() == b"\x1b[C\x1b[C\n", what="Enter alone to reach the pane")


def test_member_answer_sends_nothing_when_the_screen_does_not_tell_the_selected_button(fleet, noticer, tmp_path):
    """Drawn without its colours (every button alike), the prompt does not tell which button
    is selected: the answer sends nothing at all."""
    drawn = Drawn(fleet, tmp_path, buttons(None), agent="opencode")
    noticer.look()
    [notice] = notices_of(fleet, "awaiting_user")
    refused = drawn.answer("1", "--dialog", notice["notice"]["dialog"])
    assert refused.code == 1, refused
    assert "does not show which option of its dialog is selected; nothing was sent" in refused.err, refused
    assert len(refused.err.splitlines()) == 1
    assert drawn.keys.read_bytes() == b""
