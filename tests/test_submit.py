"""Submission against a real private tmux server with the stand-in agent in its
panes: what arrives, exactly once; hostile text inert; a prompt awaiting the user blocks
typing; a pane without an input box never confirms; Enter retries; auto-reply drives the
real command line."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid

import pytest

from cafleet.config import Settings
from cafleet.delivery.preview import PREVIEW_MAX_LEN, render_preview
from cafleet.delivery.screen import PaneState, classify
from cafleet.delivery.submit import (
    CAPTURE_LINES,
    Pacing,
    PaneAwaitingUser,
    PaneInputBusy,
    PaneNotReady,
    SubmissionNotConfirmed,
    submit_preview,
    type_prompt,
)
from cafleet.errors import ConfigError, PaneGone, UsageError
from cafleet.mux.tmux import Tmux
from tests.support.tmux_fixtures import wait_for

TS = "2025-06-01T12:34:56.789012+00:00"
FAST = {"settle": 0.05, "confirm_timeout": 2.0, "echo_timeout": 2.0}


class PrivateTmux:
    """A tmux server of our own (``tmux -L cafleet-test-<uuid>``), never the user's."""

    def __init__(self, env: dict) -> None:
        self.env = env
        self.name = f"cafleet-test-{uuid.uuid4().hex[:12]}"
        self.tmux("new-session", "-d", "-s", "main", "-x", "160", "-y", "40", "sleep", "3600")
        self.socket = self.tmux("display-message", "-p", "-t", "main", "#{socket_path}").strip()
        self.mux = Tmux(socket=self.socket)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-L", self.name, "-f", "/dev/null", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        return done.stdout

    def open(self, *argv: str) -> str:
        """A new full-size window running ``argv``; its pane id."""
        return self.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-t", "main:", "--", *argv).strip()

    def kill_server(self) -> None:
        subprocess.run(["tmux", "-L", self.name, "kill-server"], env=self.env, capture_output=True, timeout=10)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket)  # tmux leaves its socket file behind


@pytest.fixture
def server(env):
    private = PrivateTmux(env)
    yield private
    private.kill_server()


def records(path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def kinds_and_texts(path) -> list[tuple]:
    return [(r["kind"], r.get("text", r.get("key"))) for r in records(path)]


@pytest.fixture
def standin(server, tmp_path):
    """Open a stand-in agent pane and wait until it draws its input line."""

    def start(*flags: str, member_id: int = 5, record=None, state: str = PaneState.IDLE, agent: str = "standin") -> str:
        record = record or tmp_path / f"record-{uuid.uuid4().hex[:6]}.jsonl"
        pane = server.open(
            sys.executable,
            "-m",
            "cafleet.agents.standin",
            "--member-id",
            str(member_id),
            "--record",
            str(record),
            *flags,
        )
        wait_for(lambda: classify(agent, server.mux.capture(pane)) == state, what="the stand-in to start")
        return pane

    return start


def test_preview_arrives_exactly_once_as_one_line(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    preview = render_preview(7, 3, TS, "hello\nworld, ünïcödé 漢字 👨\u200d👩\u200d👧", 200)
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    expected = f"[cafleet msg 7 from 3 {TS}]⏎hello⏎world, ünïcödé 漢字 👨\u200d👩\u200d👧"
    assert kinds_and_texts(record) == [("submit", expected)]
    screen = server.mux.capture(pane)
    assert screen.splitlines()[-1].rstrip() == ">"  # the input line is empty again
    assert f"• {expected}" in screen


def test_hostile_text_arrives_inert(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    body = (
        "a\rb\nc\x03d\x04e\x7ff\x15g\x1bh\x1b[2Ji\x1b]0;pwned\x07j\x9b31mk\x1b[200~l\x1b[201~m"
        "\x08n\tq\u202er\u2066s\u2069\x00t\x1bOPu\x85v\u2028w\U000e0041x"
    )
    submit_preview(server.mux, pane, render_preview(8, 3, TS, body, 200), "standin", pacing=Pacing(**FAST))
    # submission neutralises on its own too, whatever text it is handed
    submit_preview(server.mux, pane, f"[cafleet msg 80 from 3 {TS}]\n{body}", "standin", pacing=Pacing(**FAST))
    # ESC h and ESC O are escape sequences too: "h" goes with its ESC, "P" stays (SS3
    # shifts one character, it does not swallow it).
    clean = "⏎a⏎b⏎cdefgijklmn qrstPu⏎v⏎wx"
    # one submission each, no key the agent could act on (no Escape, no Ctrl-C, no early Enter)
    assert kinds_and_texts(record) == [
        ("submit", f"[cafleet msg 8 from 3 {TS}]{clean}"),
        ("submit", f"[cafleet msg 80 from 3 {TS}]{clean}"),
    ]
    assert server.mux.pane_exists(pane)
    assert classify("standin", server.mux.capture(pane)) == PaneState.IDLE


def test_prompt_awaiting_the_user_blocks_typing(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--permission-prompt", record=record, state=PaneState.AWAITING_USER)
    preview = render_preview(9, 3, TS, "please proceed 1", 200)
    with pytest.raises(PaneAwaitingUser) as caught:
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert str(caught.value) == (
        f"pane {pane} shows a prompt awaiting its user, so nothing was typed; "
        "answer it in that pane and the message will be retried."
    )
    # Nothing reached the prompt: the human's answer arrives alone.
    server.mux.type_text(pane, "1")
    server.mux.press_enter(pane)
    wait_for(lambda: records(record), what="the permission answer")
    assert kinds_and_texts(record) == [("permission", "1")]
    wait_for(lambda: classify("standin", server.mux.capture(pane)) == PaneState.IDLE, what="the prompt to close")
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record)[1:] == [("submit", f"[cafleet msg 9 from 3 {TS}]⏎please proceed 1")]


def test_pane_without_input_box_gets_no_keystroke(server):
    pane = server.open("sleep", "100")
    preview = render_preview(10, 3, TS, "anyone there?", 200)
    with pytest.raises(PaneNotReady) as caught:
        submit_preview(
            server.mux, pane, preview, "standin", pacing=Pacing(settle=0.05, echo_timeout=0.3, confirm_timeout=2)
        )
    assert str(caught.value) == (
        f"pane {pane} does not show the standin input box (is that agent running there?), so nothing was typed."
    )
    # The terminal would have echoed anything typed: nothing was, not even an Enter.
    assert "cafleet msg" not in server.mux.capture(pane)
    assert server.tmux("display-message", "-p", "-t", pane, "#{cursor_x},#{cursor_y}").strip() == "0,0"


def test_enter_too_soon_is_retried(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--enter-guard", "0.4", record=record)
    preview = render_preview(11, 3, TS, "retry me", 200)
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(settle=0, echo_timeout=2, confirm_timeout=0.6))
    assert kinds_and_texts(record) == [
        ("key", "enter-too-soon"),
        ("submit", f"[cafleet msg 11 from 3 {TS}]⏎retry me"),
    ]


def test_settle_delay_lets_the_first_enter_count(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--enter-guard", "0.2", record=record)
    preview = render_preview(12, 3, TS, "settled", 200)
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(settle=0.3, confirm_timeout=2, echo_timeout=2))
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 12 from 3 {TS}]⏎settled")]


def test_unconfirmed_after_every_retry(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--enter-guard", "30", record=record)
    preview = render_preview(13, 3, TS, "stuck", 200)
    with pytest.raises(SubmissionNotConfirmed) as caught:
        submit_preview(
            server.mux,
            pane,
            preview,
            "standin",
            pacing=Pacing(settle=0, enter_retries=1, confirm_timeout=0.3, echo_timeout=2),
        )
    assert str(caught.value) == (
        f"the typed text was still in the input box of pane {pane} after 2 Enter presses; "
        "the submission is not confirmed; the typed text was removed."
    )
    assert kinds_and_texts(record) == [("key", "enter-too-soon"), ("key", "enter-too-soon")]
    # Our own characters are taken back (BackSpace, never Escape), so the next attempt
    # does not glue a second copy onto them.
    assert server.mux.capture(pane).splitlines()[-1].rstrip() == ">"


def test_type_prompt_submits_one_line(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    type_prompt(server.mux, pane, "run the tests\nand report", "standin", pacing=Pacing(0.05))
    assert kinds_and_texts(record) == [("submit", "run the tests⏎and report")]
    with pytest.raises(UsageError):
        type_prompt(server.mux, pane, " \x1b[0m\t", "standin", pacing=Pacing(0.05))
    assert len(records(record)) == 1


def test_typed_text_cannot_fake_a_prompt_before_enter(server, standin, tmp_path):
    # A composer row "❯ 1. Yes, ..." looks like claude's permission menu; when it is only
    # our own typed text, Enter must still be pressed.
    record = tmp_path / "record.jsonl"
    pane = standin("--prompt", "❯ ", record=record, agent="claude")
    type_prompt(server.mux, pane, "1. Yes, merge the branch", "claude", pacing=Pacing(0.05))
    assert kinds_and_texts(record) == [("submit", "1. Yes, merge the branch")]


def test_gone_pane_is_reported(server):
    pane = server.open("sleep", "100")
    server.mux.kill(pane)
    with pytest.raises(PaneGone):
        submit_preview(server.mux, pane, render_preview(1, 2, TS, "x", 10), "standin", pacing=Pacing(**FAST))


def test_settle_delay_from_the_environment():
    assert Settings({}).submit_settle == 0.3
    assert Settings({"CAFLEET_SUBMIT_SETTLE": "0.15"}).submit_settle == 0.15
    with pytest.raises(ConfigError):
        Settings({"CAFLEET_SUBMIT_SETTLE": "soon"})


def test_auto_reply_uses_the_real_command_line(server, standin, tmp_path, cli, build):
    _fleet, director, (member,) = build.fleet(members_count=1)
    sent = cli(
        "message",
        "send",
        "--from-member-id",
        str(director),
        "--to-member-id",
        str(member),
        "please summarise the parser changes for me",
        "--json",
    ).json()
    record = tmp_path / "record.jsonl"
    pane = standin("--auto-reply", member_id=member, record=record)
    preview = render_preview(sent["message_id"], director, sent["created_at"], sent["text"], 200)
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    wait_for(lambda: [r for r in records(record) if r["kind"] != "submit"], timeout=30, what="the auto-reply")
    assert [(r["kind"], r.get("message_id"), r.get("to")) for r in records(record)[1:]] == [
        ("reply", sent["message_id"], director)
    ]
    replies = cli("message", "poll", str(director), "--json").json()
    assert [(r["from_member_id"], r["text"]) for r in replies] == [
        (member, "ack: please summarise the parser changes for ")
    ]
    shown = cli("message", "show", str(sent["message_id"]), "--json").json()
    assert shown["status_state"] == "completed"


# --- only our text, only into a ready box ---------------------------------------------------


def input_line(server, pane) -> str:
    return server.mux.capture(pane).splitlines()[-1].rstrip()


def pane_pid(server, pane) -> int:
    return int(server.tmux("display-message", "-p", "-t", pane, "#{pane_pid}"))


def test_half_typed_text_is_held_never_submitted_or_cleared(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--prefill", "fix the te", record=record)
    preview = render_preview(20, 3, TS, "review the parser", 200)
    for _ in range(2):  # the next send holds again: nothing piles up
        with pytest.raises(PaneInputBusy) as caught:
            submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
        assert str(caught.value) == (
            f"held: input box has text in pane {pane} (someone is typing there), so nothing was typed "
            "and that text was left as it is."
        )
    assert input_line(server, pane) == "> fix the te"  # untouched
    assert records(record) == []  # not a key arrived: no Enter, no BackSpace, no Escape
    # The person finishes and submits their own text; the held preview then goes in alone.
    server.mux.type_text(pane, "sts")
    server.mux.press_enter(pane)
    wait_for(lambda: records(record), what="the person's submission")
    wait_for(lambda: "fix the tests" not in input_line(server, pane), what="the box drawn empty again")
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [
        ("submit", "fix the tests"),
        ("submit", f"[cafleet msg 20 from 3 {TS}]⏎review the parser"),
    ]


def test_placeholder_hint_is_an_empty_box(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--placeholder", 'Try "write a test for <filepath>"', record=record)
    assert input_line(server, pane) == '> Try "write a test for <filepath>"'
    submit_preview(server.mux, pane, render_preview(21, 3, TS, "go", 200), "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 21 from 3 {TS}]⏎go")]


def test_a_dim_hint_the_table_does_not_know_is_an_empty_box(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--placeholder", "Ask me anything at all", record=record)
    assert input_line(server, pane) == "> Ask me anything at all"
    submit_preview(server.mux, pane, render_preview(30, 3, TS, "go", 200), "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 30 from 3 {TS}]⏎go")]


def test_our_own_leftover_is_replaced_not_glued(server, standin, tmp_path):
    """A sender killed after typing leaves our own line in the box: whole, the retry
    submits it as it stands; a partial copy, it removes exactly those characters and types
    the line once. Either way the line is submitted once."""
    line = f"[cafleet msg 22 from 3 {TS}]⏎owed task"
    preview = render_preview(22, 3, TS, "owed task", 200)
    for leftover in (line, line[:40], line[:23]):  # whole, cut mid-word, cut before a blank
        record = tmp_path / f"record-{len(leftover)}.jsonl"
        pane = standin("--prefill", leftover, record=record)
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
        assert kinds_and_texts(record) == [("submit", line)], leftover


def test_another_previews_leftover_is_held(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    other = f"[cafleet msg 23 from 3 {TS}]⏎older one, edited by a person"
    pane = standin("--prefill", other, record=record)
    with pytest.raises(PaneInputBusy):
        submit_preview(server.mux, pane, render_preview(24, 3, TS, "new", 200), "standin", pacing=Pacing(**FAST))
    assert input_line(server, pane) == "> " + other
    assert records(record) == []


def test_another_preview_of_ours_left_unedited_is_taken_back(server, standin, tmp_path):
    """Another message's preview of ours, left in the box by an attempt that gave up (whole,
    only its start, or cut with ``…`` by a sender with a shorter CAFLEET_MAX_TEXT_LEN), is
    taken back with BackSpaces and the new preview typed once; the same preview edited by a
    person (not a prefix of ours) is held and left as it is."""
    whole = f"[cafleet msg 23 from 3 {TS}]⏎the older task, left in the box"
    cut = render_preview(23, 3, TS, "the older task, left in the box", 9).replace("\n", "⏎")
    assert cut.endswith("…")

    def ours(text: str) -> str | None:
        return whole if text.startswith("[cafleet msg 23 from ") else None

    new = render_preview(24, 3, TS, "new", 200)
    for leftover in (whole, whole[:45], cut):
        record = tmp_path / f"record-{uuid.uuid4().hex[:6]}.jsonl"
        pane = standin("--prefill", leftover, record=record)
        submit_preview(server.mux, pane, new, "standin", ours=ours, pacing=Pacing(**FAST))
        assert kinds_and_texts(record) == [("submit", f"[cafleet msg 24 from 3 {TS}]⏎new")], leftover
    edited = whole.replace("older", "oldest")
    record = tmp_path / "record-edited.jsonl"
    pane = standin("--prefill", edited, record=record)
    with pytest.raises(PaneInputBusy):
        submit_preview(server.mux, pane, new, "standin", ours=ours, pacing=Pacing(**FAST))
    assert input_line(server, pane) == "> " + edited
    assert records(record) == []


def test_text_that_never_shows_gets_no_enter(server, standin, tmp_path):
    """A frozen agent: its box was drawn, but the typed text never shows. No Enter is
    pressed; when it wakes, the text sits unsubmitted, and the retry replaces it."""
    import signal as signals

    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    pid = pane_pid(server, pane)
    preview = render_preview(25, 3, TS, "wake up", 200)
    os.kill(pid, signals.SIGUSR2)
    wait_for(lambda: records(record), what="the stand-in to freeze")
    try:
        with pytest.raises(SubmissionNotConfirmed) as caught:
            submit_preview(
                server.mux, pane, preview, "standin", pacing=Pacing(settle=0, echo_timeout=0.5, confirm_timeout=2)
            )
    finally:
        os.kill(pid, signals.SIGUSR2)
    assert str(caught.value) == (
        f"the typed text never showed in the standin input box of pane {pane}, so Enter was not pressed."
    )
    line = f"[cafleet msg 25 from 3 {TS}]⏎wake up"
    wait_for(lambda: input_line(server, pane) == "> " + line, what="the typed text to show")
    assert kinds_and_texts(record) == [("frozen", None), ("thawed", None)]  # no Enter reached it
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record)[2:] == [("submit", line)]


def test_text_cleared_while_starting_is_reported_vanished_at_once(server, standin, tmp_path):
    """claude clears its composer while it starts: seen in the box, then gone without
    reaching the transcript is not a submission."""
    record = tmp_path / "record.jsonl"
    pane = standin("--startup-clear", record=record)
    preview = render_preview(26, 3, TS, "first task", 200)
    with pytest.raises(SubmissionNotConfirmed) as caught:
        submit_preview(
            server.mux, pane, preview, "standin", pacing=Pacing(settle=0.05, confirm_timeout=2, echo_timeout=2)
        )
    assert str(caught.value) == (
        f"the typed text vanished from the standin input box of pane {pane} without reaching its "
        "transcript or queue (the agent cleared its input, as it does while starting); Enter is not retried."
    )
    line = f"[cafleet msg 26 from 3 {TS}]⏎first task"
    # One Enter only (swallowed), the text cleared, never submitted.
    assert kinds_and_texts(record) == [("key", "enter-during-startup"), ("cleared", line)]
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record)[2:] == [("submit", line)]


def test_an_echo_drawn_late_is_confirmed_not_called_vanished(server, standin, tmp_path):
    """An agent on a loaded machine clears its box at Enter but draws the echo seconds later:
    that is a submission, waited for, never "vanished" (which would owe the preview again and
    type it a second time). The echo comes 2.5 s after Enter, past one confirm timeout."""
    record = tmp_path / "record.jsonl"
    pane = standin("--late-echo", "2.5", record=record)
    preview = render_preview(28, 3, TS, "late echo", 200)
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 28 from 3 {TS}]⏎late echo")]


def test_waiting_for_startup_holds_before_typing(server, standin, tmp_path):
    import signal as signals

    record = tmp_path / "record.jsonl"
    pane = standin("--waiting-for-startup", record=record)
    preview = render_preview(27, 3, TS, "early", 200)
    with pytest.raises(PaneNotReady) as caught:
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert str(caught.value) == (f"pane {pane} shows standin still starting, so nothing was typed.")
    assert input_line(server, pane) == ">" and records(record) == []
    os.kill(pane_pid(server, pane), signals.SIGUSR1)
    wait_for(lambda: "Waiting for startup" not in server.mux.capture(pane), what="the start-up to end")
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 27 from 3 {TS}]⏎early")]


def test_enter_held_while_starting_leaves_nothing_behind(server, standin, tmp_path):
    """codex, when it shows its start-up only once typing began, holds every Enter: the
    text is taken back, not left to be glued to the next preview."""
    record = tmp_path / "record.jsonl"
    pane = standin("--late-startup", record=record)
    preview = render_preview(28, 3, TS, "early", 200)
    with pytest.raises(SubmissionNotConfirmed) as caught:
        submit_preview(
            server.mux,
            pane,
            preview,
            "standin",
            pacing=Pacing(settle=0, enter_retries=1, confirm_timeout=0.3, echo_timeout=2),
        )
    assert str(caught.value) == (
        f"the typed text was still in the input box of pane {pane} after 2 Enter presses; "
        "the submission is not confirmed; the typed text was removed."
    )
    assert kinds_and_texts(record) == [("key", "enter-while-starting")] * 2
    assert input_line(server, pane) == ">"


@pytest.mark.parametrize("body", ["see @src/parser.py", "look at @", "mail a@b.c"])
def test_a_trailing_mention_never_meets_an_open_completion(server, standin, tmp_path, body):
    record = tmp_path / "record.jsonl"
    pane = standin("--completion", record=record)
    submit_preview(server.mux, pane, render_preview(29, 3, TS, body, 200), "standin", pacing=Pacing(**FAST))
    # Submitted by the first Enter with the text as sent (one trailing blank): no
    # completion was open to swallow the Enter or rewrite the mention.
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 29 from 3 {TS}]⏎{body} ")]


def test_with_terminator_only_where_a_completion_could_open():
    from cafleet.delivery.submit import with_terminator

    assert with_terminator("[m]⏎see @src/x.py") == "[m]⏎see @src/x.py "
    assert with_terminator("[m]⏎@x") == "[m]⏎@x "
    assert with_terminator("[m]⏎cost $5") == "[m]⏎cost $5 "
    assert with_terminator("[m]⏎a/b") == "[m]⏎a/b "
    assert with_terminator("/review") == "/review "
    assert with_terminator("[m]⏎plain words") == "[m]⏎plain words"
    assert with_terminator("[m]⏎@x then words") == "[m]⏎@x then words"
    assert with_terminator("[m]⏎ends in a blank @x ") == "[m]⏎ends in a blank @x "


def test_a_long_echo_is_recognised_by_its_end(server, standin, tmp_path):
    """A preview as tall as the screen: after Enter only the end of its echo still shows
    (its start scrolled away). That end confirms it: one Enter, no retry."""
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    # a window small enough for a screen-tall preview within PREVIEW_MAX_LEN code points
    server.tmux("resize-window", "-t", pane, "-x", "40", "-y", "10")
    wait_for(lambda: classify("standin", server.mux.capture(pane)) == PaneState.IDLE, what="the redrawn stand-in")
    columns, rows = (
        int(n) for n in server.tmux("display-message", "-p", "-t", pane, "#{pane_width} #{pane_height}").split()
    )
    header = f"[cafleet msg 31 from 3 {TS}]⏎"
    # The stand-in wraps at columns - 1, after a two-column prompt or indent: the typed
    # line fills every row under the banner and the rule, so its echo cannot show whole
    # above the rule and the empty input line.
    size = (rows - 2) * (columns - 3)
    body = "".join(chr(ord("a") + i % 26) for i in range(size - len(header)))
    assert len(body) <= PREVIEW_MAX_LEN
    submit_preview(server.mux, pane, render_preview(31, 3, TS, body, size), "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", header + body)]
    assert f"[cafleet msg 31 from 3 {TS}]" not in server.mux.capture(pane)  # the start is gone


def test_a_preview_taken_after_the_attempt_gave_up_is_not_typed_again(server, standin, tmp_path):
    """The agent lags so much that the echo of the submitted preview comes after the
    attempt stopped waiting for it (the attempt fails, the message stays owed). The retry
    finds the preview's header in the transcript: it was delivered, and it is not typed a
    second time. A prompt line, which may be meant twice, is not skipped that way."""
    record = tmp_path / "record.jsonl"
    fast = dict(FAST, confirm_timeout=0.5)  # gives up after 1.5 s without an echo
    pane = standin("--late-echo", "3", record=record)
    preview = render_preview(29, 3, TS, "taken late", 200)
    with pytest.raises(SubmissionNotConfirmed, match="vanished"):
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**fast))
    line = f"[cafleet msg 29 from 3 {TS}]⏎taken late"
    wait_for(lambda: f"• {line}" in server.mux.capture(pane), what="the late echo")
    submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**fast))  # confirmed by the echo already there
    assert kinds_and_texts(record) == [("submit", line)]
    type_prompt(server.mux, pane, line, "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", line), ("submit", line)]


@pytest.mark.parametrize("drawn", ["inline", "in place"])
def test_a_preview_taken_late_whose_echo_scrolled_out_of_the_captured_rows(server, standin, tmp_path, drawn):
    """As above, but the agent then prints a long answer (80 rows), so by the time of the
    retry the preview's header has left the rows a submission captures. An agent that
    prints its transcript into the terminal (claude, codex; the stand-in's --inline) has
    pushed it up into the pane's history: the retry of a message an earlier attempt pressed
    Enter for reads the history a bounded number of rows back, finds the header and types
    nothing. A full-screen agent that redraws in place (opencode; the stand-in by default)
    keeps no history: the header is gone from the pane and the retry types the preview
    again, the one extra copy an interrupted attempt may add (docs/delivery.md)."""
    record = tmp_path / "record.jsonl"
    fast = dict(FAST, confirm_timeout=0.5)  # gives up after 1.5 s without an echo
    flags = ["--late-echo", "3", "--reply-lines", "80"] + (["--inline"] if drawn == "inline" else [])
    pane = standin(*flags, record=record)
    preview = render_preview(33, 3, TS, "taken late, then a long answer", 200)
    line = f"[cafleet msg 33 from 3 {TS}]⏎taken late, then a long answer"
    with pytest.raises(SubmissionNotConfirmed, match="vanished"):
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**fast))
    wait_for(lambda: "(reply line 80 of 80)" in server.mux.capture(pane), what="the late echo and the answer")
    assert "[cafleet msg 33 from 3 " not in server.mux.capture(pane, CAPTURE_LINES)  # scrolled out
    if drawn == "inline":
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**fast), earlier=True)
        assert kinds_and_texts(record) == [("submit", line)]
        return
    with pytest.raises(SubmissionNotConfirmed, match="vanished"):
        submit_preview(server.mux, pane, preview, "standin", pacing=Pacing(**fast), earlier=True)
    assert kinds_and_texts(record) == [("submit", line), ("submit", line)]
