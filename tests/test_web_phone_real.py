"""The WebUI's phone page answers the real claude's permission dialog (marker
``real_agent``): a real `cafleet server`, Debian's Chromium at a phone's viewport, logged in
with the link the server printed, taps "Yes" on the dialog the pinned claude draws before a
shell command the scripted model calls; the command runs. Skipped with the reason when the
pinned claude is absent."""

from __future__ import annotations

import signal

import pytest

from cafleet.delivery import screen
from tests.support import model_api as m
from tests.support.browser import PHONE, chromium
from tests.support.real_agents import real_fleet, skip_reason
from tests.support.web_server import ServerProcess, free_port

pytestmark = pytest.mark.real_agent

TURN_TIMEOUT = 90.0  # bounds a failure only


def test_a_tap_on_the_phone_page_answers_the_real_claudes_permission_dialog(tmp_path):
    from playwright.sync_api import expect

    reason = skip_reason("claude")
    if reason:
        pytest.skip(reason)
    with real_fleet("claude", tmp_path / "fleet") as fleet:
        asker = fleet.start_plain("claude", "asker")
        pane, member_id = asker["pane_id"], asker["member_id"]
        fleet.wait_composer(pane, "claude", TURN_TIMEOUT)
        fleet.api.script.push(
            m.Reply(tool_calls=[m.ToolCall("Bash", {"command": "touch tapped-yes", "description": "Create a file"})])
        )
        fleet.api.script.push(m.Reply(text="Done."))
        fleet.type_keys(pane, "make a file")
        fleet.wait_screen(pane, lambda s: "make a file" in " ".join(screen.input_box("claude", s) or []), 20, "prompt")
        fleet.press(pane, "Enter")
        fleet.wait_state(pane, "claude", screen.PaneState.AWAITING_USER, TURN_TIMEOUT)
        server = ServerProcess(fleet.environ, "--port", str(free_port()))
        try:
            assert server.login, server.first_line
            with chromium(fleet.environ) as browser:
                context = browser.new_context(**PHONE)
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.goto(server.login)
                page.goto(f"{server.url}attention")
                item = page.locator(f'#waiting > li[data-member-id="{member_id}"]')
                expect(item.locator("pre.attention-dialog-text")).to_contain_text("touch tapped-yes", timeout=60_000)
                buttons = item.locator(".attention-dialog-options button")
                expect(buttons.first).to_have_text("1. Yes")
                assert not (fleet.workdir / "tapped-yes").exists()
                buttons.first.tap()
                fleet.wait_screen(
                    pane,
                    lambda s: (
                        (fleet.workdir / "tapped-yes").exists() and screen.classify("claude", s) != "awaiting_user"
                    ),
                    TURN_TIMEOUT,
                    "the approved command to run",
                )
                expect(page.locator("#waiting > li")).to_have_count(0, timeout=60_000)
                assert errors == []
                context.close()
        finally:
            code, out, err = server.stop(signal.SIGTERM)
        assert (code, out, err) == (0, "", "")
