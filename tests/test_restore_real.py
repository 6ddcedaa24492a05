"""`cafleet member revive` on the real claude, codex and opencode (marker ``real_agent``;
docs/delivery.md, "A fleet outlives its panes").

A real member is told a word only its conversation holds; once its model has seen it, its
agent is killed with SIGKILL (the pane's process, and the agent's own process when the
pane's process only started it), so its pane closes and the member reads dead. A person
(the test process) runs `cafleet member revive`: the member is started again in a new pane,
its agent resuming its own session (claude ``--resume``, ``codex resume``, opencode
``--session``), and what its model receives next is that conversation, the word included,
with cafleet's one line saying it was started again as the newest prompt, not a second spawn
prompt.

The programs are the pinned ones (tests/support/agent_drivers.py), offline against the
scripted model APIs; the keeper is on (it pins codex's and opencode's sessions early).
Every wait is bounded (it bounds a failure only); without the pinned program the test is
skipped with the reason. opencode's TUI drops ``--prompt`` when ``--session`` is given (its
App opens the session route, and only the home route submits the prompt), so cafleet gives
it no line: there the next request is the one a new message's preview wakes, and it must
carry the old conversation.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

import pytest

from tests.support.agent_drivers import TURN_TIMEOUT, Driven, keeper_fleet, missing
from tests.support.tmux_fixtures import wait_for

pytestmark = pytest.mark.real_agent

RESTORED = "[cafleet] Your pane was lost and cafleet started you again"
DEAD_BOUND = 30.0  # the member list reading a pane whose agent was killed dead; bounds a failure only


def states(driven: Driven) -> dict[int, tuple[str, str]]:
    fleet = driven.fleet
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json")
    assert listed.code == 0, listed
    return {r["member_id"]: (r["state"], r["state_detail"]) for r in listed.json()}


def turn_texts(driven: Driven, turn) -> list[str]:
    """The user-side texts of one model request, oldest first."""
    if driven.agent == "codex":
        from tests.support import openai_responses

        return [text for _id, text in openai_responses.user_texts(turn)]
    from tests.support.model_api_anthropic import user_texts

    return user_texts(turn.body)


def records_folder(driven: Driven) -> Path:
    """Where the agent writes its conversations (its throw-away config and data folders)."""
    environ = driven.fleet.environ
    if driven.agent == "claude":
        return Path(environ["CLAUDE_CONFIG_DIR"]) / "projects"
    if driven.agent == "codex":
        return Path(environ["CODEX_HOME"]) / "sessions"
    data = environ.get("XDG_DATA_HOME") or os.path.join(environ["HOME"], ".local", "share")
    return Path(data) / "opencode"


def recorded(folder: Path, word: str) -> list[str]:
    """The files under ``folder`` that hold ``word`` (a database's write-ahead log too)."""
    found = []
    for path in folder.rglob("*") if folder.is_dir() else ():
        try:
            if path.is_file() and word.encode() in path.read_bytes():
                found.append(str(path))
        except OSError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (from /proc's children lists), nearest first."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop(0)
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except (OSError, ValueError):
                continue
            found += children
            queue += children
    return found


def pane_pid(driven: Driven, pane: str) -> int:
    return int(driven.server.run("display-message", "-p", "-t", pane, "#{pane_pid}"))


def pane_argv(driven: Driven, pane: str) -> str:
    """The command line of the pane's process (for a failure's message)."""
    try:
        return Path(f"/proc/{pane_pid(driven, pane)}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError) as error:
        return f"unreadable: {error}"


def kill_agent(driven: Driven, pane: str) -> list[int]:
    """SIGKILL the pane's process and every process under it (the pids looked up here)."""
    pid = pane_pid(driven, pane)
    pids = [pid, *descendants(pid)]
    for each in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(each, signal.SIGKILL)
    return pids


@pytest.mark.parametrize("agent", ["claude", "codex", "opencode"])
def test_a_real_member_whose_agent_was_killed_is_revived_into_its_own_conversation(agent, tmp_path, request):
    revived_into_its_conversation(agent, tmp_path, request, by_keeper=False)


@pytest.mark.parametrize("agent", ["claude", "codex", "opencode"])
def test_the_keeper_revives_a_real_member_that_quit_with_exit_into_its_own_conversation(agent, tmp_path, request):
    revived_into_its_conversation(agent, tmp_path, request, by_keeper=True)


def revived_into_its_conversation(agent: str, tmp_path, request, by_keeper: bool) -> None:
    """A member told a word; its agent ended (``by_keeper``: it quits by its own ``/exit``
    command and the keeper of a fleet that opted in revives it; else SIGKILL and a person's
    ``member revive``); its next model request carries the word."""
    reason = missing(agent)  # before the `env` fixture: it hides CAFLEET_AGENT_PREFIX
    if reason:
        pytest.skip(reason)
    env = monkeypatch = None  # claude and opencode build their own isolated environment
    if agent == "codex":
        env, monkeypatch = request.getfixturevalue("env"), request.getfixturevalue("monkeypatch")
    extra = {"CAFLEET_NOTICE_INTERVAL": "0.5"} if by_keeper else None  # the keeper looks for deaths twice a second
    with keeper_fleet(agent, tmp_path, env, monkeypatch, extra, codex_approval=None) as driven:
        fleet = driven.fleet
        if by_keeper:
            turned = fleet.cafleet("fleet", "auto-revive", str(fleet.fleet_id), "--per-hour", "2")
            assert turned.code == 0, turned
        member_id, pane = driven.create("remembers")
        word = f"quokka-{secrets.token_hex(6)}"
        driven.send(member_id, f"Remember this word, it is yours alone: {word}.")
        wait_for(lambda: driven.received_text(word), TURN_TIMEOUT, 0.1, f"{agent}'s model to receive {word}")
        driven.settle(pane)
        # the agent writes its conversation a little after the turn (claude batches its
        # transcript): what a SIGKILL before that loses is not the conversation it wrote
        folder = records_folder(driven)
        wait_for(lambda: recorded(folder, word), TURN_TIMEOUT, 0.1, f"{agent} to write {word} into {folder}")
        before = len(driven.api.turns())
        if by_keeper:
            new_pane = quit_and_wait_for_the_keeper(driven, member_id, pane)
        else:
            killed = kill_agent(driven, pane)
            wait_for(
                lambda: states(driven)[member_id][0] == "dead",
                DEAD_BOUND,
                0.1,
                f"member {member_id} to read dead after pids {killed} were killed",
            )
            revived = fleet.cafleet("member", "revive", str(member_id), "--json")  # a person's shell
            assert revived.code == 0, revived
            outcome = revived.json()
            assert outcome["outcome"] == "restored", outcome
            assert "resumed its session" in outcome["detail"], outcome
            new_pane = outcome["pane_id"]
            assert new_pane != pane, outcome
        if agent == "opencode":  # no first line beside a session: a message's preview wakes it
            driven.settle(new_pane)
            driven.send(member_id, "Are you back?")
        # the model's next request: the old conversation, the word in it, and the restored line
        try:
            wait_for(lambda: len(driven.api.turns()) > before, TURN_TIMEOUT, 0.1, f"{agent}'s next request")
        except pytest.fail.Exception:
            pytest.fail(
                f"no request after the revive ({pane_argv(driven, new_pane)}); it shows:\n{driven.capture(new_pane)}"
            )
        texts = turn_texts(driven, driven.api.turns()[before])
        assert any(word in text for text in texts), texts
        if agent == "opencode":
            assert "Are you back?" in texts[-1] and not any(RESTORED in text for text in texts), texts
        else:
            assert RESTORED in texts[-1], texts  # the newest prompt, after the earlier conversation
        assert sum("Wait for messages" in text for text in texts) == 1, texts  # its spawn prompt, not a second
        assert states(driven)[member_id][0] != "dead", states(driven)
        shown = fleet.cafleet("member", "show", str(member_id), "--json").json()
        assert shown["placement"]["pane_id"] == new_pane, shown
        driven.settle(new_pane)


def quit_and_wait_for_the_keeper(driven: Driven, member_id: int, pane: str) -> str:
    """The agent quits by its own ``/exit``; the keeper revives it (its pane closed with
    it): the new pane, once the Director's notice says the session was resumed."""
    fleet = driven.fleet
    driven.type_keys(pane, "/exit")
    driven.wait_screen(pane, lambda shown: "/exit" in shown, 10, "/exit typed")  # and its command menu drawn
    driven.press(pane, "Enter")

    def placed() -> str | None:
        shown = fleet.cafleet("member", "show", str(member_id), "--json").json()
        return shown["placement"]["pane_id"] if shown["placement"]["pane_id"] != pane else None

    try:
        new_pane = wait_for(placed, DEAD_BOUND, 0.2, f"the keeper to revive member {member_id} after /exit")
    except pytest.fail.Exception:
        pytest.fail(f"not revived; the old pane shows:\n{driven.capture(pane)}")
    polled = fleet.cafleet("message", "poll", str(fleet.director), "--json")
    said = [r for r in polled.json() if r.get("kind") == "revived"]
    assert len(said) == 1 and "resumed its session" in said[0]["text"], said
    return new_pane
