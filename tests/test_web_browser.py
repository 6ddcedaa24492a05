"""End to end: a real `cafleet server` subprocess on a free loopback port, driven by Debian's
headless Chromium through Playwright (which never downloads a browser here).

Set CAFLEET_WEBUI_SCREENSHOT=docs/webui.png to refresh the screenshot in the docs.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # the dashboard test runs on both stores (tests/conftest.py)

import os
import signal
import subprocess
import sys
import time

import pytest

from cafleet.broker import messages, notifications
from tests.support.browser import PHONE, chromium
from tests.support.tmux_fixtures import wait_for
from tests.support.web_server import ROOT, ServerProcess, free_port

SCREENSHOT_TARGET = os.environ.get("CAFLEET_WEBUI_SCREENSHOT")  # read before the tests isolate CAFLEET_*
WAIT_MS = 60_000  # bounds a failure only: every wait below ends as soon as its condition holds


@pytest.fixture
def browser(env):
    with chromium(env) as launched:
        yield launched


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
    page.set_default_timeout(WAIT_MS)  # actions (click, fill, inner_text) ...
    expect.set_options(timeout=WAIT_MS)  # ... and the expects below that name no timeout
    page_errors = []
    page.on("pageerror", lambda error: page_errors.append(str(error)))
    page.goto(server.login)  # the login link: the session cookie, then the page
    assert page.url == server.url, page.url

    # The fleet, its roster and its history.
    expect(page.locator("#live")).to_have_text("live", timeout=WAIT_MS)
    expect(page.locator("#fleet-picker option:checked")).to_have_text(f"alpha · #{fleet['fleet_id']} · 4 active")
    rows = page.locator("#roster tbody tr")
    expect(rows).to_have_count(4, timeout=WAIT_MS)
    expect(rows.nth(0)).to_contain_text(f"Director#{fleet['director']}")
    expect(page.locator("#fleet-meta")).to_contain_text("keeper off")  # the test environment turns it off
    assert [cell.strip() for cell in rows.nth(3).locator("td").all_inner_texts()[:6]] == [
        f"tester#{fleet['tester']}",
        "member",
        "active",
        "tmux",
        "claude",
        "@0 · %7",  # where it is: window · pane
    ]
    assert rows.nth(1).locator("td").nth(5).inner_text() == "pending"
    # spend (docs/usage.md): these members were registered without attribution, so no records
    expect(page.locator("#roster-spend")).to_have_text("fleet spend $0.0000 · 0 tokens", timeout=WAIT_MS)
    expect(rows.nth(3).locator("td.spend")).to_have_text("—")
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
        (5, fleet["director"], body),
        (4, fleet["coder"], "note to self: rebase before pushing"),
    ]
    expect(timeline.nth(0).locator(".msg-body")).to_have_text(body)
    assert page.locator("#timeline b").count() == 0

    # Another process sends and ACKs: both appear without a reload.
    cli = [sys.executable, "-m", "cafleet", "message"]
    subprocess.run(
        [
            *cli,
            "send",
            "--from-member-id",
            str(fleet["planner"]),
            "--to-member-id",
            str(fleet["coder"]),
            "Step 1 is merged; go ahead with step 2.",
        ],
        env=env,
        check=True,
        timeout=30,
        capture_output=True,
        cwd=str(ROOT),
    )
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


# --- member screens, the graph and attention, against real panes -------------------------

from tests.support.web_panes import HOSTILE  # the panes fixture is in conftest

COLOURED = (  # a pane with some colour, for the screenshot
    "printf '\\033[1mcargo test\\033[0m\\n'; "
    "for t in storage::wal storage::lock broker::send broker::ack drain::retry; do "
    "printf 'test %s ... \\033[32mok\\033[0m\\n' $t; done; "
    "printf 'test drain::stale ... \\033[31mFAILED\\033[0m\\n\\n\\033[33mwarning\\033[0m: 1 test failed\\n'; "
    "exec sleep 600"
)


@pytest.fixture
def pane_server(env, panes):
    process = ServerProcess(env, "--port", str(free_port()))
    yield process
    code, out, err = process.stop(signal.SIGTERM)
    assert (code, out, err) == (0, "", "")


NOTIFICATION_RECORDER = """
window.__notified = [];
window.Notification = function (title, options) { window.__notified.push([title, options && options.body]); };
window.Notification.permission = "granted";
window.Notification.requestPermission = async () => "granted";
"""


def open_page(browser, server, fleet_id, init_script=None):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    if init_script:
        page.add_init_script(init_script)  # runs before the page's own scripts
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(server.login)
    page.goto(f"{server.url}#fleet={fleet_id}")
    return page, errors


# SQLite only, for the suite's time (a browser test costs seconds): what it adds is the page
# drawing pane text; the screens route it draws from runs on both stores in test_web_screens.py
# and the dashboard test above proves the page against both.
@pytest.mark.stores("sqlite")
def test_member_screens_show_typed_text_and_render_hostile_panes_inert(browser, pane_server, panes, tmux_server):
    from playwright.sync_api import expect

    typist, typist_pane = panes["add"]("typist")
    hostile, _ = panes["add"]("hostile", ["sh", "-c", HOSTILE], ready="after-dcs")
    page, page_errors = open_page(browser, pane_server, panes["fleet_id"])
    requests = []
    page.on("request", lambda request: requests.append(request.url) if "/screens?" in request.url else None)

    # A stand-in member's typed text appears in its tile.
    tile = page.locator(f'.tile[data-member-id="{typist}"]')
    expect(tile.locator(".badge")).to_have_text("alive", timeout=WAIT_MS)
    expect(tile.locator("pre.screen")).to_contain_text("cafleet stand-in agent", timeout=WAIT_MS)
    tmux_server.run("send-keys", "-l", "-t", typist_pane, "typed into the pane <b>bold?</b>")
    expect(tile.locator("pre.screen")).to_contain_text("typed into the pane <b>bold?</b>", timeout=WAIT_MS)
    expect(tile.locator(".tile-counts")).to_have_text("0 pending0 unnotified")

    # The hostile pane: its markup is text, its colours are classes, its escapes are gone.
    screen = page.locator(f'.tile[data-member-id="{hostile}"] pre.screen')
    expect(screen).to_contain_text("after-dcs", timeout=WAIT_MS)
    text = screen.text_content()
    assert "<script>window.__pwned=1</script>" in text and '<img src=x onerror="window.__pwned=2">' in text
    assert "\x1b" not in text and "\x07" not in text and "cHduZWQ" not in text and "evil.example" not in text
    assert screen.locator("script, img, a, iframe, b").count() == 0
    assert screen.locator("span.fg-1").first.text_content() == "red alert"
    assert page.evaluate("window.__pwned") is None
    assert page.title() == "cafleet"

    # The page's own parser: colours become classes or computed rgb(), other sequences vanish,
    # even when the server's filter is bypassed.
    drawn = page.evaluate("""() => {
        const pre = document.createElement("pre");
        FleetView.renderAnsi(pre, "a\x1b[1;31mB\x1b[0m\x1b]52;c;eA==\x07c\x1b[38;5;196;48;2;1;2;300mD\x1b[7mE"
            + "\x1b[2J<i>x</i>\x1b[999999999999m");
        return {text: pre.textContent, html: [...pre.childNodes].map((n) => n.nodeType === 3 ? ["#text", n.data]
            : [n.className, n.textContent, n.style.color, n.style.backgroundColor]), elements: pre.querySelectorAll("i").length};
    }""")
    assert drawn["text"] == "aBcDE<i>x</i>" and drawn["elements"] == 0
    assert drawn["html"] == [
        ["#text", "a"],
        ["ansi-bold fg-1", "B", "", ""],
        ["#text", "c"],
        ["", "D", "rgb(255, 0, 0)", "rgb(1, 2, 255)"],
        ["ansi-inverse", "E", "rgb(1, 2, 255)", "rgb(255, 0, 0)"],
        ["ansi-inverse", "<i>x</i>", "rgb(1, 2, 255)", "rgb(255, 0, 0)"],
    ]

    # The large view of one member.
    tile.click()
    dialog = page.locator("#screen-dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#screen-dialog-title")).to_have_text(f"typist#{typist}")
    expect(page.locator("#screen-dialog-text")).to_contain_text("typed into the pane", timeout=WAIT_MS)
    page.click("#screen-dialog-close")
    expect(dialog).to_be_hidden()

    # A hidden tab stops asking for screens; showing it again resumes at once.
    page.evaluate("""() => {
        Object.defineProperty(document, "hidden", {configurable: true, get: () => true});
        document.dispatchEvent(new Event("visibilitychange"));
    }""")
    page.wait_for_timeout(300)  # a request already on its way may still finish
    asked = len(requests)
    page.wait_for_timeout(3000)  # three intervals
    assert len(requests) == asked
    page.evaluate("""() => {
        Object.defineProperty(document, "hidden", {configurable: true, get: () => false});
        document.dispatchEvent(new Event("visibilitychange"));
    }""")
    deadline = page.evaluate("Date.now()") + WAIT_MS
    while len(requests) == asked:
        assert page.evaluate("Date.now()") < deadline, "screens did not resume after the tab was shown"
        page.wait_for_timeout(50)
    assert page_errors == []
    page.close()


# SQLite only, for the suite's time (it waits out the state and owed-preview intervals): what it
# adds is the page's banner, title and graph; the attention items, the owed preview pushed without
# a write and the kept-up graph they draw run on both stores in test_web_screens.py.
@pytest.mark.stores("sqlite")
def test_blocked_member_raises_attention_and_the_graph_shows_a_send(
    browser, pane_server, panes, tmux_server, store, tmp_path
):
    from playwright.sync_api import expect

    # The stand-in draws a permission prompt once its first run ends (Ctrl-D), in the same pane
    # (a Python parent, not a shell, so the pane never looks like it is back at a prompt).
    script = (
        "import os, subprocess, sys; standin = [sys.executable, '-m', 'cafleet.agents.standin', '--member-id', '0']; "
        "subprocess.run(standin); os.execv(sys.executable, [*standin, '--permission-prompt'])"
    )
    asker, asker_pane = panes["add"]("asker", [sys.executable, "-c", script])
    tests_id, _ = panes["add"]("tests", ["sh", "-c", COLOURED], ready="test failed")
    writer, _ = panes["add"]("writer")
    director = panes["director"]
    for sender, recipient, text in [
        (director, asker, "Plan the migration"),
        (asker, director, "Plan ready"),
        (director, writer, "Write step 1"),
        (writer, tests_id, "Run the suite"),
        (tests_id, writer, "1 failure in drain::stale"),
    ]:
        messages.ack(store, messages.send(store, sender, recipient, text)["message_id"])
    # Desktop notifications are allowed; the recorder stands in for the browser's pop-ups.
    page, page_errors = open_page(browser, pane_server, panes["fleet_id"], init_script=NOTIFICATION_RECORDER)
    expect(page.locator(f'.tile[data-member-id="{asker}"] .badge')).to_have_text("alive", timeout=WAIT_MS)
    expect(page.locator("#notify-enable")).to_be_hidden()
    expect(page.locator(f'#graph g.edge[data-from="{writer}"][data-to="{tests_id}"]')).to_have_count(1, timeout=WAIT_MS)
    assert page.locator("#attention").is_hidden() and page.title() == "cafleet"

    # Made blocked: the banner and the title count, from the supervision states.
    tmux_server.run("send-keys", "-t", asker_pane, "C-d")
    expect(page.locator("#attention")).to_be_visible(timeout=20_000)
    expect(page.locator(f'#attention-list li[data-kind="blocked"][data-member-id="{asker}"]')).to_contain_text(
        f"asker#{asker} is blocked: pane {asker_pane} shows a prompt awaiting its user"
    )
    expect(page.locator("#attention-list code")).to_have_text([f"cafleet member capture {asker}"])
    expect(page).to_have_title("(1) cafleet")
    expect(page.locator(f'.tile[data-member-id="{asker}"]')).to_have_attribute("data-state", "blocked")
    expect(page.locator(f'.tile[data-member-id="{asker}"] pre.screen')).to_contain_text(
        "Do you want to proceed?", timeout=WAIT_MS
    )
    assert page.evaluate("window.__notified") == [
        [f"cafleet: asker#{asker} is blocked", f"pane {asker_pane} shows a prompt awaiting its user"]
    ]

    # A send shows in the graph: a new edge, highlighted while its preview is owed.
    edge = page.locator(f'#graph g.edge[data-from="{tests_id}"][data-to="{asker}"]')
    assert edge.count() == 0
    sent = time.monotonic()
    messages.send(store, tests_id, asker, "Can you look at drain::stale?")
    expect(edge).to_have_count(1, timeout=WAIT_MS)
    shown = time.monotonic() - sent
    assert edge.get_attribute("class") == "edge edge-unnotified"
    assert (edge.get_attribute("data-count"), edge.get_attribute("data-unnotified")) == ("1", "1")
    expect(page.locator(f'.tile[data-member-id="{asker}"] .tile-counts')).to_have_text("1 pending1 unnotified")
    spark = page.locator(f'#sparklines tr[data-member-id="{tests_id}"] .spark-total')
    expect(spark).to_have_text("3")
    print(f"graph showed the send after {shown:.2f} s")

    # Nobody delivers that preview (the asker is blocked): once it is owed for longer than
    # `fleet watch`'s interval it is a second item.
    owed = page.locator(f'#attention-list li[data-kind="notify"][data-member-id="{asker}"]')
    expect(owed).to_contain_text(f"asker#{asker} is owed a preview", timeout=30_000)
    expect(page).to_have_title("(2) cafleet")
    assert len(page.evaluate("window.__notified")) == 2

    # Tiles below the fold are fetched once they scroll into view.
    page.locator(f'.tile[data-member-id="{writer}"]').scroll_into_view_if_needed()
    expect(page.locator(f'.tile[data-member-id="{writer}"] pre.screen')).to_contain_text(
        "cafleet stand-in agent", timeout=WAIT_MS
    )
    if SCREENSHOT_TARGET:
        target = ROOT / SCREENSHOT_TARGET
        page.locator(".screens-panel").screenshot(path=str(target.with_name("webui-screens.png")))
        page.locator(".graph-panel").screenshot(path=str(target.with_name("webui-graph.png")))
    assert page_errors == []
    page.close()


# SQLite only, for the suite's time: the answer route it clicks runs on both stores in
# test_web_screens.py; what this adds is the page drawing the dialog and its buttons.
@pytest.mark.stores("sqlite")
def test_attention_shows_a_blocked_members_dialog_and_its_buttons_answer_it(
    browser, pane_server, panes, tmux_server, tmp_path
):
    from playwright.sync_api import expect

    record = tmp_path / "asker.jsonl"
    argv = [sys.executable, "-m", "cafleet.agents.standin", "--member-id", "0", "--permission-prompt"]
    asker, _asker_pane = panes["add"]("asker", [*argv, "--record", str(record)], ready="1. Yes")
    page, page_errors = open_page(browser, pane_server, panes["fleet_id"])
    item = page.locator(f'#attention-list li[data-kind="blocked"][data-member-id="{asker}"]')
    expect(item.locator("pre.attention-dialog-text")).to_contain_text("Do you want to proceed?", timeout=WAIT_MS)
    buttons = item.locator(".attention-dialog-options button")
    expect(buttons).to_have_text(["1. Yes", "2. No"])
    assert page.evaluate("window.__pwned === undefined")
    buttons.nth(0).click()
    expect(page.locator(f'#attention-list li[data-member-id="{asker}"]')).to_have_count(0, timeout=WAIT_MS)
    answered = [line for line in record.read_text().splitlines() if '"permission"' in line]
    assert len(answered) == 1 and '"text": "1"' in answered[0]
    expect(page.locator("#attention")).to_be_hidden()
    assert page_errors == []


# SQLite only: what it shows is the page's own requests; the route's bound runs on both
# stores in test_web_screens.py.
@pytest.mark.stores("sqlite")
def test_more_tiles_on_screen_than_one_request_may_name_are_asked_for_in_several(browser, build, env):
    fleet_id, _director, _ = build.fleet("wide", 0)
    wanted = {build.member(fleet_id, f"m{i}", pane_id=f"%{100 + i}") for i in range(70)}
    process = ServerProcess(env, "--port", str(free_port()))
    try:
        page = browser.new_page(viewport={"width": 4000, "height": 8000})  # every tile on screen at once
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        asked: list[list[int]] = []
        page.on(
            "request",
            lambda request: (
                asked.append([int(v) for v in request.url.split("members=")[1].split("&")[0].split(",")])
                if "/screens?" in request.url
                else None
            ),
        )
        page.goto(process.login)
        page.goto(f"{process.url}#fleet={fleet_id}")
        deadline = time.monotonic() + WAIT_MS / 1000
        while not wanted <= {member for ids in asked for member in ids}:
            assert time.monotonic() < deadline, f"not every tile's screen was asked for: {asked}"
            page.wait_for_timeout(50)
        assert all(len(ids) <= 64 for ids in asked), [len(ids) for ids in asked]
        page.wait_for_timeout(1500)  # a refresh after the first answers
        assert not page.locator("#screens-status").text_content().startswith("screens paused"), asked
        assert errors == []
        page.close()
    finally:
        code, out, err = process.stop(signal.SIGTERM)
    assert (code, out, err) == (0, "", "")


# SQLite only, for the suite's time: the route it reads runs on both stores in test_web_login.py.
@pytest.mark.stores("sqlite")
def test_the_attention_page_on_a_phone_lists_every_fleets_blocked_members_oldest_first_and_answers(
    browser, pane_server, panes, tmux_server, store, tmp_path
):
    from playwright.sync_api import expect

    from cafleet.broker import fleets, members, notices

    prompt = [sys.executable, "-m", "cafleet.agents.standin", "--member-id", "0", "--permission-prompt"]
    first_record, later_record = tmp_path / "first.jsonl", tmp_path / "later.jsonl"
    later, _ = panes["add"]("later", [*prompt, "--record", str(later_record)], ready="1. Yes")
    # a second fleet, whose member has waited longer
    night = fleets.create_fleet(
        store, name="night", coding_agent="standin", backend="tmux", session=panes["session"], window_id="@0",
        pane_id=tmux_server.new_pane([sys.executable, "-c", "import time; time.sleep(600)"]),
    )  # fmt: skip
    first = members.register_member(
        store, fleet_id=night["fleet_id"], name="first", description="first", backend="tmux",
        session=panes["session"], window_id="@0", coding_agent="standin",
    )  # fmt: skip
    pane = tmux_server.new_pane([*prompt, "--record", str(first_record)])
    members.set_pane_id(
        store,
        first,
        pane,
        tmux_server.run("display-message", "-p", "-t", pane, "#{pid}:#{start_time}:#{pane_pid}").strip(),
    )
    wait_for(lambda: "1. Yes" in tmux_server.run("capture-pane", "-p", "-t", pane), what="the first dialog")
    for fleet_id, director, member_id in ((night["fleet_id"], night["director_member_id"], first),
                                          (panes["fleet_id"], panes["director"], later)):  # fmt: skip
        notice = notices.Notice("awaiting_user", f"member:{member_id}", member_id, None, "waiting")
        assert notices.post(store, fleet_id, director, notice) is not None  # as the keeper posts it

    context = browser.new_context(**PHONE)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(f"{pane_server.url}attention")
    expect(page.locator("#banner")).to_contain_text("Not logged in", timeout=WAIT_MS)
    page.goto(pane_server.login)
    page.goto(f"{pane_server.url}attention")
    items = page.locator("#waiting > li")
    expect(items).to_have_count(2, timeout=WAIT_MS)
    assert [items.nth(i).get_attribute("data-member-id") for i in range(2)] == [str(first), str(later)]
    expect(items.nth(0)).to_contain_text(f"first#{first} in night#{night['fleet_id']}")
    expect(items.nth(0).locator("pre.attention-dialog-text")).to_contain_text("Do you want to proceed?")
    expect(items.nth(0).locator(".attention-dialog-options button")).to_have_text(["1. Yes", "2. No"])
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the phone
    button = items.nth(0).locator(".attention-dialog-options button").nth(1)
    assert button.bounding_box()["height"] >= 40  # a finger's target
    if SCREENSHOT_TARGET:
        page.screenshot(path=str((ROOT / SCREENSHOT_TARGET).with_name("webui-phone.png")))
    button.tap()
    expect(items).to_have_count(1, timeout=WAIT_MS)
    assert items.nth(0).get_attribute("data-member-id") == str(later)
    answered = [line for line in first_record.read_text().splitlines() if '"permission"' in line]
    assert len(answered) == 1 and '"text": "2"' in answered[0], answered
    assert errors == []
    context.close()
