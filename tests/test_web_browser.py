"""End to end: a real `cafleet server` subprocess on a free loopback port, driven by Debian's
headless Chromium through Playwright (which never downloads a browser here).

Set CAFLEET_WEBUI_SCREENSHOT=docs/webui.png to refresh the screenshot in the docs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from cafleet.broker import messages, notifications
from tests.support.web_server import ROOT, ServerProcess, free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOT_TARGET = os.environ.get("CAFLEET_WEBUI_SCREENSHOT")  # read before the tests isolate CAFLEET_*
WAIT_MS = 10_000


@pytest.fixture
def browser(env, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"Debian's chromium is missing at {CHROMIUM}; run `bash scripts/install.sh --test` to install it.")
    from playwright.sync_api import sync_playwright

    profile_env = dict(env, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, env=profile_env)
        yield chromium
        chromium.close()


@pytest.fixture
def fleet(build, store):
    """A small fleet with some history, built through the broker (pending panes, one concrete)."""
    fleet_id, director, _ = build.fleet("alpha", 0)
    planner = build.member(fleet_id, "planner")
    coder = build.member(fleet_id, "coder")
    tester = build.member(fleet_id, "tester", pane_id="%7")
    plan = messages.send(store, director, planner, "Plan the storage migration; reply with the steps.")["message_id"]
    messages.ack(store, plan)
    messages.send(store, planner, director, "Plan ready:\n1. add the column\n2. backfill\n3. switch reads")
    messages.send(store, tester, director, "All 214 tests pass on main.")
    messages.send(store, coder, coder, "note to self: rebase before pushing")
    return {"fleet_id": fleet_id, "director": director, "planner": planner, "coder": coder, "tester": tester}


@pytest.fixture
def server(env, fleet):
    process = ServerProcess(env, "--port", str(free_port()))
    yield process
    code, out, err = process.stop(signal.SIGTERM)
    assert (code, out, err) == (0, "", "")


def test_dashboard_shows_the_fleet_sends_as_director_and_updates_live(browser, server, fleet, store, env, tmp_path):
    from playwright.sync_api import expect

    assert server.url == server.first_line.removeprefix("serving the cafleet WebUI at ")
    page = browser.new_page(viewport={"width": 1280, "height": 860})
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    page.goto(server.url)

    # The fleet, its roster and its history.
    expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    expect(page.locator("#fleet-picker option:checked")).to_have_text(f"alpha · #{fleet['fleet_id']} · 4 active")
    rows = page.locator("#roster tbody tr")
    expect(rows).to_have_count(4, timeout=WAIT_MS)
    expect(rows.nth(0)).to_contain_text(f"Director#{fleet['director']}")
    assert [cell.strip() for cell in rows.nth(3).locator("td").all_inner_texts()[:6]] == [
        f"tester#{fleet['tester']}", "member", "active", "tmux", "claude", "%7"]
    assert rows.nth(1).locator("td").nth(5).inner_text() == "pending"
    timeline = page.locator("#timeline > li")
    expect(timeline).to_have_count(4, timeout=WAIT_MS)
    expect(timeline.nth(3)).to_contain_text("acked")
    expect(timeline.nth(0)).to_contain_text("notified")  # the self-send
    page.evaluate("window.__sameDocument = true")

    # Send as the Director through the composer; the body must stay text.
    body = "Deploy step 2 <b>after</b> the backfill & report back."
    page.select_option("#compose-to", str(fleet["coder"]))
    page.fill("#compose-text", body)
    page.click("#compose-send")
    expect(page.locator("#compose-status")).to_contain_text("sent message 5", timeout=WAIT_MS)
    stored = messages.poll(store, fleet["coder"])
    assert [(m["message_id"], m["from_member_id"], m["text"]) for m in stored] == [
        (5, fleet["director"], body), (4, fleet["coder"], "note to self: rebase before pushing")]
    expect(timeline.nth(0).locator(".msg-body")).to_have_text(body)
    assert page.locator("#timeline b").count() == 0

    # Another process sends and ACKs: both appear without a reload.
    cli = [sys.executable, "-m", "cafleet", "message"]
    subprocess.run([*cli, "send", "--from-member-id", str(fleet["planner"]), "--to-member-id", str(fleet["coder"]),
                    "Step 1 is merged; go ahead with step 2."], env=env, check=True, timeout=30, capture_output=True,
                   cwd=str(ROOT))
    expect(timeline).to_have_count(6, timeout=WAIT_MS)
    expect(timeline.nth(0)).to_contain_text("Step 1 is merged; go ahead with step 2.")
    expect(timeline.nth(0).locator(".route")).to_have_text(f"planner#{fleet['planner']}→coder#{fleet['coder']}")
    subprocess.run([*cli, "ack", "5"], env=env, check=True, timeout=30, capture_output=True, cwd=str(ROOT))
    expect(timeline.nth(1).locator(".badge.completed")).to_contain_text("acked", timeout=WAIT_MS)

    # A drain elsewhere stamps a preview; a member joins.
    to_tester = messages.send(store, fleet["planner"], fleet["tester"], "Please rerun the flaky suite.")["message_id"]
    expect(timeline).to_have_count(7, timeout=WAIT_MS)
    expect(timeline.nth(0).locator(".badge.not-notified")).to_have_text("not notified")
    assert notifications.stamp_notified(store, to_tester)
    expect(timeline.nth(0).locator(".badge.notified")).to_have_text("notified", timeout=WAIT_MS)
    from tests.conftest import FleetBuilder

    reviewer = FleetBuilder(store).member(fleet["fleet_id"], "reviewer")
    expect(rows).to_have_count(5, timeout=WAIT_MS)
    expect(rows.nth(4)).to_contain_text(f"reviewer#{reviewer}")
    expect(page.locator("#fleet-picker option:checked")).to_have_text(f"alpha · #{fleet['fleet_id']} · 5 active")
    assert page.evaluate("window.__sameDocument") is True

    # A member's inbox: its pending messages, in poll order.
    rows.nth(2).click()  # coder
    expect(page.locator("#inbox-title")).to_have_text(f"Inbox of coder #{fleet['coder']}", timeout=WAIT_MS)
    inbox = page.locator("#inbox > li .msg-body")
    expect(inbox).to_have_text([m["text"] for m in messages.poll(store, fleet["coder"])], timeout=WAIT_MS)
    expect(page.locator("#compose-to")).to_have_value(str(fleet["coder"]))

    # Dark scheme has its own palette.
    light = page.evaluate("getComputedStyle(document.documentElement).backgroundColor")
    page.emulate_media(color_scheme="dark")
    assert page.evaluate("getComputedStyle(document.documentElement).backgroundColor") != light
    page.emulate_media(color_scheme="light")

    shot = tmp_path / "webui.png"
    page.screenshot(path=str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if SCREENSHOT_TARGET:
        (ROOT / SCREENSHOT_TARGET).write_bytes(shot.read_bytes())
    assert page_errors == []
    page.close()
