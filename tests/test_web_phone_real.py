"""The WebUI's phone page answers the real claude's permission dialog (marker
``real_agent``): a real `cafleet server`, Debian's Chromium at a phone's viewport, logged in
with the link the server printed, taps "Yes" on the dialog the pinned claude draws before a
shell command the scripted model calls; the command runs. Skipped with the reason when the
pinned claude is absent."""

from __future__ import annotations

import signal

import pytest

from cafleet.delivery.keystrokes import screen
from tests.support.agent_drivers import TURN_TIMEOUT, keeper_fleet, missing
from tests.support.browser import PHONE, chromium
from tests.support.tmux_fixtures import wait_for
from tests.support.web_server import ServerProcess, free_port

pytestmark = pytest.mark.real_agent


def test_a_tap_on_the_phone_page_answers_the_real_claudes_permission_dialog(tmp_path):
    from playwright.sync_api import expect

    reason = missing("claude")
    if reason:
        pytest.skip(reason)
    with keeper_fleet("claude", tmp_path, None, None, {"CAFLEET_KEEPER": "off"}) as driven:
        made = driven.workdir / "tapped-yes"
        member_id, pane = driven.ask_permission(made.name)  # claude runs in the workdir: a short line
        server = ServerProcess(driven.fleet.environ, "--port", str(free_port()))
        try:
            assert server.login, server.first_line
            with chromium(driven.fleet.environ) as browser:
                context = browser.new_context(**PHONE)
                page = context.new_page()
                errors: list[str] = []
                page.on("pageerror", lambda error: errors.append(str(error)))
                page.goto(server.login)
                page.goto(f"{server.url}attention")
                item = page.locator(f'#waiting > li[data-member-id="{member_id}"]')
                expect(item.locator("pre.attention-dialog-text")).to_contain_text(f"touch {made.name}", timeout=60_000)
                buttons = item.locator(".attention-dialog-options button")
                expect(buttons.first).to_have_text("1. Yes")
                assert not made.exists()
                buttons.first.tap()
                wait_for(made.exists, timeout=TURN_TIMEOUT, what="the approved command to run")
                driven.wait_screen(
                    pane, lambda s: driven.classify(s) != screen.PaneState.AWAITING_USER, TURN_TIMEOUT, "the answer"
                )
                expect(page.locator("#waiting > li")).to_have_count(0, timeout=60_000)
                assert errors == []
                context.close()
        finally:
            code, out, err = server.stop(signal.SIGTERM)
        assert (code, out, err) == (0, "", "")
