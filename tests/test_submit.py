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
import time
import uuid

import pytest

from cafleet.delivery.preview import render_preview
from cafleet.delivery.screen import PaneState, classify
from cafleet.delivery.submit import (
    PaneAwaitingUser,
    SubmissionNotConfirmed,
    settle_delay,
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
            env=self.env, capture_output=True, text=True, timeout=10, check=True,
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

    def start(*flags: str, member_id: int = 5, record=None, state: str = PaneState.IDLE,
              agent: str = "standin") -> str:
        record = record or tmp_path / f"record-{uuid.uuid4().hex[:6]}.jsonl"
        pane = server.open(sys.executable, "-m", "cafleet.agents.standin", "--member-id", str(member_id),
                           "--record", str(record), *flags)
        wait_for(lambda: classify(agent, server.mux.capture(pane)) == state, what="the stand-in to start")
        return pane

    return start


def test_preview_arrives_exactly_once_as_one_line(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    preview = render_preview(7, 3, TS, "hello\nworld, ünïcödé 漢字 👨\u200d👩\u200d👧", 200)
    submit_preview(server.mux, pane, preview, "standin", **FAST)
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
    submit_preview(server.mux, pane, render_preview(8, 3, TS, body, 200), "standin", **FAST)
    # submission neutralises on its own too, whatever text it is handed
    submit_preview(server.mux, pane, f"[cafleet msg 80 from 3 {TS}]\n{body}", "standin", **FAST)
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
        submit_preview(server.mux, pane, preview, "standin", **FAST)
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
    submit_preview(server.mux, pane, preview, "standin", **FAST)
    assert kinds_and_texts(record)[1:] == [("submit", f"[cafleet msg 9 from 3 {TS}]⏎please proceed 1")]


def test_pane_without_input_box_is_not_confirmed(server):
    pane = server.open("sleep", "100")
    preview = render_preview(10, 3, TS, "anyone there?", 200)
    started = time.monotonic()
    with pytest.raises(SubmissionNotConfirmed) as caught:
        submit_preview(server.mux, pane, preview, "standin", settle=0.05, echo_timeout=0.3, confirm_timeout=2)
    assert time.monotonic() - started < 2.0  # no 2 s confirmation wait: nothing to watch
    assert str(caught.value) == (
        f"the typed text never showed in the standin input box of pane {pane} (is that agent "
        "running there?); Enter was pressed once but the submission cannot be confirmed."
    )
    # The terminal echoed what was typed: the text went in, then exactly one Enter.
    screen = server.mux.capture(pane)
    assert f"[cafleet msg 10 from 3 {TS}]⏎anyone there?" in screen


def test_enter_too_soon_is_retried(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--enter-guard", "0.4", record=record)
    preview = render_preview(11, 3, TS, "retry me", 200)
    submit_preview(server.mux, pane, preview, "standin", settle=0, echo_timeout=2, confirm_timeout=0.6)
    assert kinds_and_texts(record) == [
        ("key", "enter-too-soon"),
        ("submit", f"[cafleet msg 11 from 3 {TS}]⏎retry me"),
    ]


def test_settle_delay_lets_the_first_enter_count(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--enter-guard", "0.2", record=record)
    preview = render_preview(12, 3, TS, "settled", 200)
    submit_preview(server.mux, pane, preview, "standin", settle=0.3, confirm_timeout=2, echo_timeout=2)
    assert kinds_and_texts(record) == [("submit", f"[cafleet msg 12 from 3 {TS}]⏎settled")]


def test_unconfirmed_after_every_retry(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin("--enter-guard", "30", record=record)
    preview = render_preview(13, 3, TS, "stuck", 200)
    with pytest.raises(SubmissionNotConfirmed) as caught:
        submit_preview(server.mux, pane, preview, "standin", settle=0, enter_retries=1, confirm_timeout=0.3,
                       echo_timeout=2)
    assert str(caught.value) == (
        f"the typed text was still in the input box of pane {pane} after 2 Enter presses; "
        "the submission is not confirmed."
    )
    assert kinds_and_texts(record) == [("key", "enter-too-soon"), ("key", "enter-too-soon")]
    assert server.mux.capture(pane).splitlines()[-1] == f"> [cafleet msg 13 from 3 {TS}]⏎stuck"


def test_type_prompt_submits_one_line(server, standin, tmp_path):
    record = tmp_path / "record.jsonl"
    pane = standin(record=record)
    type_prompt(server.mux, pane, "run the tests\nand report", "standin", 0.05)
    assert kinds_and_texts(record) == [("submit", "run the tests⏎and report")]
    with pytest.raises(UsageError):
        type_prompt(server.mux, pane, " \x1b[0m\t", "standin", 0.05)
    assert len(records(record)) == 1


def test_typed_text_cannot_fake_a_prompt_before_enter(server, standin, tmp_path):
    # A composer row "❯ 1. Yes, ..." looks like claude's permission menu; when it is only
    # our own typed text, Enter must still be pressed.
    record = tmp_path / "record.jsonl"
    pane = standin("--prompt", "❯ ", record=record, agent="claude")
    type_prompt(server.mux, pane, "1. Yes, merge the branch", "claude", 0.05)
    assert kinds_and_texts(record) == [("submit", "1. Yes, merge the branch")]


def test_gone_pane_is_reported(server):
    pane = server.open("sleep", "100")
    server.mux.kill(pane)
    with pytest.raises(PaneGone):
        submit_preview(server.mux, pane, render_preview(1, 2, TS, "x", 10), "standin", **FAST)


def test_settle_delay_from_the_environment():
    assert settle_delay({}) == 0.3
    assert settle_delay({"CAFLEET_SUBMIT_SETTLE": "0.15"}) == 0.15
    with pytest.raises(ConfigError):
        settle_delay({"CAFLEET_SUBMIT_SETTLE": "soon"})


def test_auto_reply_uses_the_real_command_line(server, standin, tmp_path, cli, build):
    _fleet, director, (member,) = build.fleet(members_count=1)
    sent = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(member),
               "please summarise the parser changes for me", "--json").json()
    record = tmp_path / "record.jsonl"
    pane = standin("--auto-reply", member_id=member, record=record)
    preview = render_preview(sent["message_id"], director, sent["created_at"], sent["text"], 200)
    submit_preview(server.mux, pane, preview, "standin", **FAST)
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
