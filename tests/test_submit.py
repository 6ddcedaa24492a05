"""Submission against a real private tmux server with the stand-in agent in its
panes: what arrives, exactly once; hostile text inert; a prompt awaiting the user blocks
typing; a pane without an input box never confirms; Enter retries; auto-reply drives the
real command line. This is the integration tier: the submission's decisions on every pinned
agent's recorded screens (held, refused, retried, vanished, taken back) are tested without
tmux, in milliseconds, in tests/test_submit_steps.py."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import uuid

import pytest

from cafleet.delivery.keystrokes.preview import PREVIEW_MAX_LEN, render_preview
from cafleet.delivery.keystrokes.screen import PaneState, classify
from cafleet.delivery.keystrokes.submit import (
    CAPTURE_LINES,
    Pacing,
    PaneAwaitingUser,
    PaneNotReady,
    SubmissionNotConfirmed,
    submit_preview,
    type_prompt,
)
from cafleet.errors import PaneGone, UsageError
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


def test_type_prompt_submits_one_line(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    type_prompt(server.mux, pane, "run the tests\nand report", "standin", pacing=Pacing(0.05))
    assert kinds_and_texts(record) == [("submit", "run the tests⏎and report")]
    with pytest.raises(UsageError):
        type_prompt(server.mux, pane, " \x1b[0m\t", "standin", pacing=Pacing(0.05))
    assert len(records(record)) == 1


def test_gone_pane_is_reported(server):
    pane = server.open("sleep", "100")
    server.mux.kill(pane)
    with pytest.raises(PaneGone):
        submit_preview(server.mux, pane, render_preview(1, 2, TS, "x", 10), "standin", pacing=Pacing(**FAST))


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


def test_a_dim_hint_the_table_does_not_know_is_an_empty_box(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--placeholder", "Ask me anything at all", record=record)
    assert input_line(server, pane) == "> Ask me anything at all"
    submit_preview(server.mux, pane, render_preview(30, 3, TS, "go", 200), "standin", pacing=Pacing(**FAST))
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 30 from 3 {TS}]⏎go")]


@pytest.mark.parametrize("body", ["see @src/parser.py", "look at @", "mail a@b.c"])
def test_a_trailing_mention_never_meets_an_open_completion(server, standin, tmp_path, body):
    record = tmp_path / "record.jsonl"
    pane = standin("--completion", record=record)
    submit_preview(server.mux, pane, render_preview(29, 3, TS, body, 200), "standin", pacing=Pacing(**FAST))
    # Submitted by the first Enter with the text as sent (one trailing blank): no
    # completion was open to swallow the Enter or rewrite the mention.
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 29 from 3 {TS}]⏎{body} ")]


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
