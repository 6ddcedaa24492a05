"""`cafleet member answer` on the real claude's permission dialog (marker ``real_agent``).

The pinned claude, started by absolute path without cafleet's ``dontAsk`` flags, asks
before a shell command the scripted model calls (tests/support/real_agents.py). The notice
is the keeper's own (its noticer, one look in this process) and carries the digest of the
real screen; an answer with another digest, or with a label option 1 does not show, is
refused and sends nothing (the dialog stays, the command never runs); the answer with the
notice's digest picks the option (option 1, "Yes": the command runs) and prints its label
as drawn. Then, on each of claude, codex and opencode (tests/support/agent_drivers.py): the
notice's digest, over the agent's whole visible screen, holds over three looks (one notice)
and answers the permission dialog; the agent's question (claude's AskUserQuestion, codex's
request_user_input in Plan mode, opencode's question tool) is answered with option 2 and the
model receives "Blue". opencode's permission prompt has buttons without numbers (1 Allow
once, 2 Allow always, 3 Reject): each is answered with `member answer` (arrows, then Enter),
and what the model receives next shows which one was picked. Skipped with the reason when
the pinned program is absent.
"""

from __future__ import annotations

import pytest

from cafleet.delivery.keystrokes import dialog, screen
from tests.support import model_api as m
from tests.support.agent_drivers import AGENTS, keeper_fleet, missing
from tests.support.real_agents import real_fleet, skip_reason
from tests.support.tmux_fixtures import wait_for

pytestmark = pytest.mark.real_agent

TURN_TIMEOUT = 90.0  # bounds a failure only


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = skip_reason("claude")
    if reason:
        pytest.skip(reason)
    with real_fleet("claude", tmp_path_factory.mktemp("answer-claude")) as real:
        yield real


def notice_of(fleet, member_id: int) -> dict:
    """The awaiting_user notice the keeper posts for the member: its noticer, one look."""
    from cafleet.config import Settings
    from cafleet.delivery.supervision.notices import Noticer
    from cafleet.store.engines import open_store

    store = open_store(fleet.db)
    try:
        noticer = Noticer(store, Settings(fleet.environ), fleet.fleet_id)
        noticer.awaiting_after = 0.0
        noticer.look()
    finally:
        store.close()
    polled = fleet.cafleet("message", "poll", str(fleet.director), "--json")
    assert polled.code == 0, polled
    [notice] = [r for r in polled.json() if r.get("kind") == "awaiting_user"]
    assert notice["notice"]["member_id"] == member_id
    return notice


def test_member_answer_picks_an_option_of_claudes_permission_dialog_only_while_it_is_the_same(fleet):
    asker = fleet.start_plain("claude", "asker")
    pane, member_id = asker["pane_id"], asker["member_id"]
    fleet.wait_composer(pane, "claude", TURN_TIMEOUT)
    fleet.api.script.push(
        m.Reply(tool_calls=[m.ToolCall("Bash", {"command": "touch answered-yes", "description": "Create a file"})])
    )
    fleet.api.script.push(m.Reply(text="Done."))
    fleet.type_keys(pane, "make a file")
    fleet.wait_screen(pane, lambda s: "make a file" in " ".join(screen.input_box("claude", s) or []), 20, "the prompt")
    fleet.press(pane, "Enter")
    fleet.wait_state(pane, "claude", screen.PaneState.AWAITING_USER, TURN_TIMEOUT)
    notice = notice_of(fleet, member_id)
    digest = notice["notice"]["dialog"]
    rows = [line.strip() for line in notice["text"].splitlines()]
    assert "Do you want to proceed?" in rows and "touch answered-yes" in rows, notice["text"]
    other = "0" * dialog.DIGEST_LEN
    refused = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", other)
    assert refused.code == 1 and "nothing was sent" in refused.err, refused
    mislabelled = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", digest, "--label", "No")
    assert mislabelled.code == 1, mislabelled
    assert mislabelled.err.startswith('Error: option 1 reads "Yes", not "No" in the dialog on member'), mislabelled
    assert screen.classify("claude", fleet.capture(pane)) == screen.PaneState.AWAITING_USER
    assert not (fleet.workdir / "answered-yes").exists()
    answered = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", digest, "--label", "Yes")
    assert answered.code == 0, answered
    assert answered.out == f"answered option 1 (Yes) of the dialog on member {member_id}'s pane {pane}\n", answered
    fleet.wait_screen(
        pane,
        lambda s: (fleet.workdir / "answered-yes").exists() and screen.classify("claude", s) != "awaiting_user",
        TURN_TIMEOUT,
        "the approved command to run",
    )


@pytest.fixture(params=AGENTS)
def driven(request, tmp_path):
    """One agent's fleet, the keeper off: the test runs the keeper's noticer itself, one look
    at a time."""
    reason = missing(request.param)  # before the `env` fixture: it hides CAFLEET_AGENT_PREFIX
    if reason:
        pytest.skip(reason)
    env = monkeypatch = None  # claude and opencode build their own isolated environment
    if request.param == "codex":
        env, monkeypatch = request.getfixturevalue("env"), request.getfixturevalue("monkeypatch")
    with keeper_fleet(request.param, tmp_path, env, monkeypatch, {"CAFLEET_KEEPER": "off"}) as driven:
        yield driven


def look(driven, times: int = 1) -> list[dict]:
    """The keeper's noticer looks ``times`` times; the awaiting_user notices in the
    Director's inbox (each poll returns the ones not yet polled)."""
    from cafleet.config import Settings
    from cafleet.delivery.supervision.notices import Noticer
    from cafleet.store.engines import open_store

    fleet = driven.fleet
    store = open_store(str(fleet.db))
    try:
        noticer = Noticer(store, Settings(fleet.environ), fleet.fleet_id)
        noticer.awaiting_after = 0.0
        for _ in range(times):
            noticer.look()
    finally:
        store.close()
    polled = fleet.cafleet("message", "poll", str(fleet.director), "--json")
    assert polled.code == 0, polled
    return [r for r in polled.json() if r.get("kind") == "awaiting_user"]


def test_each_real_agents_dialog_gets_one_notice_whose_digest_answers_it(driven):
    """The digest covers the agent's whole visible screen: it must not change while the same
    dialog stays up, or every look would notice it again and every answer be refused. Three
    looks of the keeper's noticer give one notice; its digest answers the dialog with
    `--label` (claude and codex: option 1, the command runs; opencode: its button 1, "Allow
    once", the command runs)."""
    fleet, agent = driven.fleet, driven.agent
    made = driven.workdir / "made-by-the-agent"
    member_id, pane = driven.ask_permission(str(made))
    [notice] = look(driven, 3)
    assert notice["notice"]["member_id"] == member_id
    digest = notice["notice"]["dialog"]
    assert not made.exists()
    if agent == "opencode":
        assert "no numbered option" not in notice["text"] and "answer it in pane" not in notice["text"]
        assert notice["text"].endswith(
            f"(CHOICE: its buttons numbered left to right: 1 Allow once, 2 Allow always, 3 Reject), or in pane {pane}."
        ), notice["text"]
        label = "Allow once"
    else:
        first = next(
            line.strip() for line in notice["text"].splitlines() if line.strip().lstrip("❯› ").startswith("1. ")
        )
        label = first.lstrip("❯› ")[len("1. ") :].split("  ")[0]
    answered = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", digest, "--label", label)
    assert answered.code == 0, answered
    assert answered.out == f"answered option 1 ({label}) of the dialog on member {member_id}'s pane {pane}\n"
    wait_for(lambda: made.exists(), timeout=TURN_TIMEOUT, what=f"{agent} to run the approved command")


def test_each_real_agents_question_is_answered_with_member_answer(driven):
    """The agent's own question tool draws its numbered options; `member answer 2 --label
    Blue` with the notice's digest picks Blue, and the model receives it as the answer."""
    fleet, agent = driven.fleet, driven.agent
    member_id, pane = driven.asker()
    driven.question_mode(pane)
    driven.script_question()
    driven.type_keys(pane, "ask me")
    driven.wait_screen(pane, lambda s: "ask me" in driven.box(s), 20, "the typed prompt")
    driven.press(pane, "Enter")
    driven.wait_screen(
        pane, lambda s: driven.classify(s) == screen.PaneState.AWAITING_USER, TURN_TIMEOUT, "the question"
    )
    [notice] = look(driven)
    assert "Which colour should the button be?" in notice["text"], notice["text"]
    assert "(CHOICE: 1, 2, 3" in notice["text"], notice["text"]  # claude adds 4, "Chat about this"
    digest = notice["notice"]["dialog"]
    answered = fleet.cafleet("member", "answer", str(member_id), "2", "--dialog", digest, "--label", "Blue")
    assert answered.code == 0, answered
    assert answered.out == f"answered option 2 (Blue) of the dialog on member {member_id}'s pane {pane}\n"
    wait_for(lambda: "Blue" in driven.question_answer(), TURN_TIMEOUT, 0.1, f"{agent}'s model to receive the answer")
    assert "Red" not in driven.question_answer().replace("Which colour", "")


@pytest.fixture
def opencode(tmp_path):
    reason = missing("opencode")
    if reason:
        pytest.skip(reason)
    with keeper_fleet("opencode", tmp_path, None, None, {"CAFLEET_KEEPER": "off"}) as driven:
        yield driven


@pytest.mark.parametrize("button", ["Allow once", "Allow always", "Reject"])
def test_opencodes_permission_buttons_are_answered_with_member_answer(opencode, button):
    """Each button of opencode's permission prompt, by its number in the notice: "Allow
    once" runs the command (the model next receives its output); "Allow always" draws
    opencode's confirmation, noticed with its own digest and buttons (1 Confirm, 2 Cancel),
    whose Confirm runs it; "Reject" does not run it (the model, asked again, receives the
    rejection as the command's result)."""
    driven, fleet = opencode, opencode.fleet
    made = driven.workdir / "made-by-the-agent"
    member_id, pane = driven.ask_permission(str(made))
    [notice] = look(driven)
    number = {"Allow once": "1", "Allow always": "2", "Reject": "3"}[button]
    digest = notice["notice"]["dialog"]
    answered = fleet.cafleet("member", "answer", str(member_id), number, "--dialog", digest, "--label", button)
    assert answered.code == 0, answered
    assert answered.out == f"answered option {number} ({button}) of the dialog on member {member_id}'s pane {pane}\n"
    if button == "Allow always":
        driven.wait_screen(pane, lambda s: "Always allow" in s, TURN_TIMEOUT, "opencode's confirmation")
        [confirmation] = [n for n in look(driven) if n["notice"]["dialog"] != digest]  # the first is unACKed
        assert "(CHOICE: its buttons numbered left to right: 1 Confirm, 2 Cancel)" in confirmation["text"]
        again = fleet.cafleet(
            "member", "answer", str(member_id), "1", "--dialog", confirmation["notice"]["dialog"], "--label", "Confirm"
        )
        assert again.code == 0, again
    if button != "Reject":
        wait_for(lambda: made.exists(), TURN_TIMEOUT, 0.1, "opencode to run the allowed command")
        wait_for(lambda: driven.tool_outputs() == ["(no output)"], TURN_TIMEOUT, 0.1, "the model to get its output")
        return
    shown = driven.wait_idle_empty(pane)
    assert "Permission required" not in shown
    driven.api.script.push(m.Reply(text="Understood."))
    driven.type_keys(pane, "go on")
    driven.wait_screen(pane, lambda s: "go on" in driven.box(s), 20, "the typed prompt")
    driven.press(pane, "Enter")
    wait_for(lambda: driven.tool_outputs(), TURN_TIMEOUT, 0.1, "the model to be asked again")
    [result] = driven.tool_outputs()
    assert "reject" in result.lower(), result
    assert not made.exists()
