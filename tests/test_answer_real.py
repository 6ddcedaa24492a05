"""`cafleet member answer` on the real claude's permission dialog (marker ``real_agent``).

The pinned claude, started by absolute path without cafleet's ``dontAsk`` flags, asks
before a shell command the scripted model calls (tests/support/real_agents.py). The digest
the notice would carry is read from the real screen; an answer with another digest is
refused and sends nothing (the dialog stays, the command never runs); the answer with the
dialog's own digest picks the option (option 1, "Yes": the command runs). Skipped with the
reason when the pinned program is absent.
"""

from __future__ import annotations

import pytest

from cafleet.delivery import dialog, screen
from tests.support import model_api as m
from tests.support.real_agents import real_fleet, skip_reason

pytestmark = pytest.mark.real_agent

TURN_TIMEOUT = 90.0  # bounds a failure only


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = skip_reason("claude")
    if reason:
        pytest.skip(reason)
    with real_fleet("claude", tmp_path_factory.mktemp("answer-claude")) as real:
        yield real


def read_dialog(fleet, member_id: int):
    """The dialog as a notice reads it: the last 30 lines of the pane (its window)."""
    shown = fleet.cafleet("member", "capture", str(member_id), "--lines", "30")
    assert shown.code == 0, shown
    return dialog.read("claude", shown.out)


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
    shown = fleet.wait_state(pane, "claude", screen.PaneState.AWAITING_USER, TURN_TIMEOUT)
    seen = read_dialog(fleet, member_id)
    assert seen is not None and 1 in dict(seen.options), shown
    assert "Do you want to proceed?" in seen.text, seen.text
    other = "0" * dialog.DIGEST_LEN
    refused = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", other)
    assert refused.code == 1 and "nothing was sent" in refused.err, refused
    assert screen.classify("claude", fleet.capture(pane)) == screen.PaneState.AWAITING_USER
    assert not (fleet.workdir / "answered-yes").exists()
    now = read_dialog(fleet, member_id)
    assert now is not None and now.digest == seen.digest
    answered = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", now.digest)
    assert answered.code == 0, answered
    assert answered.out.startswith("answered option 1 ("), answered
    fleet.wait_screen(
        pane,
        lambda s: (fleet.workdir / "answered-yes").exists() and screen.classify("claude", s) != "awaiting_user",
        TURN_TIMEOUT,
        "the approved command to run",
    )
