"""Usage on the real claude (marker ``real_agent``): the scripted model API answers each
turn with usage numbers this test chooses, and `cafleet member usage` / `fleet usage` must
sum exactly those, per member, for two members of one agent in one working directory
(docs/usage.md). Skipped, with the reason, without the pinned claude.

SQLite only: what is read here is the agents' own files, the same whatever the store; the
store's half (sources, budgets, the gate on the send path, the WebUI's figures) runs on both
in tests/test_usage.py, without the real agents' minutes."""

from __future__ import annotations

import json
import threading
import time

import pytest

from tests.support import model_api as m
from tests.support.real_agents import composer_empty, real_fleet, skip_reason
from tests.support.watch_stream import Stream

pytestmark = pytest.mark.real_agent

TURN_TIMEOUT = 90.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    reason = skip_reason("claude")
    if reason:
        pytest.skip(reason)
    with real_fleet("claude", tmp_path_factory.mktemp("usage-claude")) as real:
        yield real


def usage_json(fleet, *args: str, environ=None) -> dict:
    done = fleet.cafleet(*args, "--json", environ=environ)
    assert done.code == 0, done
    return done.json()


def wait_calls(fleet, member_id: int, calls: int) -> dict:
    """`member usage` once the member's transcript holds ``calls`` calls (claude writes a
    call's lines when it completes); the timeout only bounds a failure."""
    deadline = time.monotonic() + TURN_TIMEOUT
    while True:
        report = usage_json(fleet, "member", "usage", str(member_id))
        if report["calls"] >= calls or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def create(fleet, name: str, reply: m.Reply) -> dict:
    """A claude member whose spawn-prompt turn is answered with ``reply``: exactly one turn."""
    fleet.api.script.push(reply)
    before = len(fleet.api.turns())
    record = fleet.create_member("claude", name)
    fleet.wait_screen(
        record["pane_id"],
        lambda s: fleet.api.script.pending() == 0 and composer_empty("claude", s),
        TURN_TIMEOUT,
        f"{name} to finish its spawn turn",
    )
    assert len(fleet.api.turns()) - before == 1
    return record


def test_usage_is_summed_exactly_per_member_in_one_cwd(fleet, tmp_path):
    alice = create(fleet, "alice", m.text("Ready.", input_tokens=1001, output_tokens=11))
    bob = create(fleet, "bob", m.text("Ready.", input_tokens=2002, output_tokens=22))
    # two more calls for alice, woken by a message: a reply of two content blocks (claude
    # writes one transcript line per block, each repeating the call's usage: counted once)
    # that runs a shell command, then the reply after its result
    poll = m.ToolCall("Bash", {"command": f"cafleet message poll {alice['member_id']}", "description": "Poll"})
    fleet.api.script.push(
        m.Reply(text="Checking my inbox.", tool_calls=[poll], input_tokens=3003, output_tokens=33),
        m.text("Noted.", input_tokens=4004, output_tokens=44),
    )
    before = len(fleet.api.turns())
    sent = fleet.send(alice["member_id"], "Note this, nothing else.")
    assert sent.code == 0, sent
    fleet.api.wait(lambda turns: len(fleet.api.turns()) > before, TURN_TIMEOUT)
    fleet.wait_screen(
        alice["pane_id"],
        lambda s: fleet.api.script.pending() == 0 and composer_empty("claude", s),
        TURN_TIMEOUT,
        "alice to finish the message's turn",
    )
    assert len(fleet.api.turns()) - before == 2

    a = wait_calls(fleet, alice["member_id"], 3)
    b = wait_calls(fleet, bob["member_id"], 1)
    assert (a["calls"], a["tokens"]) == (
        3,
        {"input": 8008, "cache_write": 0, "cache_read": 0, "output": 88, "total": 8096},
    )
    assert (b["calls"], b["tokens"]) == (
        1,
        {"input": 2002, "cache_write": 0, "cache_read": 0, "output": 22, "total": 2024},
    )
    assert a["no_records"] is None and len(a["files"]) == 1 and a["files"] != b["files"]
    with open(a["files"][0], encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    assistant = [line for line in lines if line.get("type") == "assistant"]
    assert (
        len(assistant) > len({(x["message"]["id"], x.get("requestId")) for x in assistant}) == 3
    )  # repeats were read once
    [model] = a["models"]
    assert "the /compact summary call" in a["lower_bound_because"]

    # dollars from the price table, here a user's price file for the model claude used
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"models": {model: {"input": 2.0, "output": 20.0}}}), encoding="utf-8")
    environ = dict(fleet.environ, CAFLEET_PRICE_FILE=str(prices))
    a = usage_json(fleet, "member", "usage", str(alice["member_id"]), environ=environ)
    assert a["usd"] == round((8008 * 2.0 + 88 * 20.0) / 1e6, 6)
    assert a["models"][model]["usd_source"] == "price table v1"

    whole = usage_json(fleet, "fleet", "usage", str(fleet.fleet_id), environ=environ)
    by_id = {r["member_id"]: r for r in whole["members"]}
    assert by_id[alice["member_id"]]["tokens"]["total"] == 8096
    assert by_id[bob["member_id"]]["tokens"]["total"] == 2024
    assert whole["tokens"]["total"] >= 8096 + 2024  # other members of the module's fleet may have spent too
    assert whole["calls"] == sum(r["calls"] for r in whole["members"])
    assert "no attribution recorded" in by_id[fleet.director]["no_records"]

    text = fleet.cafleet("member", "usage", str(bob["member_id"]), environ=environ)
    assert text.code == 0 and "2024 tokens (input 2002, cache write 0, cache read 0, output 22) in 1 calls" in text.out
    assert "a lower bound" in text.out

    bad = fleet.cafleet(
        "member",
        "usage",
        str(bob["member_id"]),
        environ=dict(fleet.environ, CAFLEET_PRICE_FILE=str(tmp_path / "missing.json")),
    )
    assert bad.code != 0 and bad.err.startswith("Error: cannot read the price file") and bad.err.count("\n") == 1


def test_clear_starts_a_new_session_and_counting_goes_on(fleet):
    """``/clear`` gives the member a session id cafleet did not choose; the live
    ``sessions/<pid>.json`` names it, the pane's process is the one started with the
    member's ``--session-id`` and the new session begins with the preview of a message to
    the member, so it is the member's: both sessions are counted."""
    bob = next(r for r in usage_json(fleet, "fleet", "usage", str(fleet.fleet_id))["members"] if r["name"] == "bob")
    before = bob["tokens"]["total"]
    pane = fleet.cafleet("member", "show", str(bob["member_id"]), "--json").json()["placement"]["pane_id"]
    cleared = fleet.cafleet("member", "prompt", str(bob["member_id"]), "/clear")
    assert cleared.code == 0, cleared
    fleet.wait_screen(pane, lambda s: composer_empty("claude", s), TURN_TIMEOUT, "bob's empty composer after /clear")
    fleet.api.script.push(m.text("Noted.", input_tokens=6006, output_tokens=66))
    turns = len(fleet.api.turns())
    assert fleet.send(bob["member_id"], "Note this after the clear.").code == 0
    fleet.api.wait(lambda _: len(fleet.api.turns()) > turns, TURN_TIMEOUT)
    report = wait_calls(fleet, bob["member_id"], bob["calls"] + 1)
    assert report["tokens"]["total"] == before + 6072 and len(report["files"]) == 2, report
    stored = fleet.query(
        "SELECT session_id FROM cafleet_aux_member_usage_sources WHERE member_id = ?", bob["member_id"]
    )[0][0].split()
    assert len(stored) == 2  # the new session is remembered for when the process is gone


def test_a_member_whose_first_call_has_not_completed_has_no_records_yet(fleet):
    hold = threading.Event()
    fleet.api.script.push(m.Reply(text="Working on it.", input_tokens=5005, output_tokens=55, hold=hold))
    before = len(fleet.api.turns())
    try:
        carol = fleet.create_member("claude", "carol", ready=False)
        fleet.api.wait(lambda turns: len(fleet.api.turns()) > before, TURN_TIMEOUT)
        report = usage_json(fleet, "member", "usage", str(carol["member_id"]))
        assert (report["no_records"], report["calls"], report["tokens"]["total"]) == ("no records yet", 0, 0)
        text = fleet.cafleet("member", "usage", str(carol["member_id"]))
        assert text.code == 0 and text.out.strip().endswith(": no records yet"), text
    finally:
        hold.set()
    report = wait_calls(fleet, carol["member_id"], 1)
    assert (report["calls"], report["tokens"]["input"], report["tokens"]["output"]) == (1, 5005, 55)


# --- opencode: its own database, two members in one directory --------------------------------


@pytest.fixture(scope="module")
def ocfleet(tmp_path_factory):
    reason = skip_reason("opencode")
    if reason:
        pytest.skip(reason)
    with real_fleet("opencode", tmp_path_factory.mktemp("usage-opencode")) as real:
        yield real


def create_opencode(fleet, name: str, reply: m.Reply) -> dict:
    fleet.api.script.push(reply)
    before = len(fleet.api.turns())
    record = fleet.create_member("opencode", name)
    fleet.wait_screen(
        record["pane_id"],
        lambda s: fleet.api.script.pending() == 0 and composer_empty("opencode", s),
        TURN_TIMEOUT,
        f"{name} to finish its spawn turn",
    )
    assert len(fleet.api.turns()) - before == 1
    return record


def test_opencode_usage_is_summed_exactly_per_member_in_one_cwd(ocfleet):
    fleet = ocfleet
    dora = create_opencode(fleet, "dora", m.text("Ready.", input_tokens=1001, output_tokens=11))
    eve = create_opencode(fleet, "eve", m.text("Ready.", input_tokens=2002, output_tokens=22))
    fleet.api.script.push(m.text("Noted.", input_tokens=3003, output_tokens=33))
    before = len(fleet.api.turns())
    assert fleet.send(dora["member_id"], "Note this, nothing else.").code == 0
    fleet.api.wait(lambda turns: len(fleet.api.turns()) > before, TURN_TIMEOUT)
    fleet.wait_screen(
        dora["pane_id"],
        lambda s: fleet.api.script.pending() == 0 and composer_empty("opencode", s),
        TURN_TIMEOUT,
        "dora to finish the message's turn",
    )

    d = wait_calls(fleet, dora["member_id"], 2)
    e = wait_calls(fleet, eve["member_id"], 1)
    assert (d["calls"], d["tokens"]) == (
        2,
        {"input": 4004, "cache_write": 0, "cache_read": 0, "output": 44, "total": 4048},
    )
    assert (e["calls"], e["tokens"]) == (
        1,
        {"input": 2002, "cache_write": 0, "cache_read": 0, "output": 22, "total": 2024},
    )
    [model] = d["models"].values()
    assert model["usd_source"] == "recorded"  # opencode's own dollars (its price for the model it used)
    assert d["usd"] == pytest.approx((4004 * 3 + 44 * 15) / 1e6) and e["usd"] == pytest.approx(
        (2002 * 3 + 22 * 15) / 1e6
    )
    whole = usage_json(fleet, "fleet", "usage", str(fleet.fleet_id))
    assert whole["tokens"]["total"] == 4048 + 2024 and whole["calls"] == 3


# --- budgets ---------------------------------------------------------------------------------


def test_a_member_over_its_budget_gets_no_new_work_unless_forced(fleet):
    fleet.api.script.push(m.text("Ready.", input_tokens=900, output_tokens=150))
    before = len(fleet.api.turns())
    created = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "frank",
        "--description",
        "frank, capped",
        "--coding-agent",
        "claude",
        "--budget-tokens",
        "1000",
        "--json",
        "Wait for messages.",
    )
    assert created.code == 0, created
    frank = created.json()
    fleet.api.wait(lambda turns: len(fleet.api.turns()) > before, TURN_TIMEOUT)
    assert wait_calls(fleet, frank["member_id"], 1)["tokens"]["total"] == 1050

    count = fleet.query("SELECT count(*) FROM messages")[0][0]
    refused = fleet.send(frank["member_id"], "More work.")
    assert refused.code == 1 and refused.out == "", refused
    assert refused.err == (
        f"Error: member {frank['member_id']} is over its budget (1050 tokens spent of a "
        "1000-token budget); it gets no new work; give --force to send anyway.\n"
    )
    assert fleet.query("SELECT count(*) FROM messages")[0][0] == count  # nothing stored
    report = usage_json(fleet, "member", "usage", str(frank["member_id"]))
    assert report["budget"] == {"usd": None, "tokens": 1000, "over": True}
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id))
    assert any(
        line.startswith(f"{frank['member_id']} ") and line.endswith("1050/1000 tok (over)")
        for line in listed.out.splitlines()
    ), listed.out

    # its own report to the Director still goes, and a forced send goes to it
    own = fleet.cafleet(
        "message", "send", "--from-member-id", str(frank["member_id"]), "--to-member-id", str(fleet.director), "spent"
    )
    assert own.code == 0, own
    forced = fleet.send(frank["member_id"], "One last thing.", "--force")
    assert forced.code == 0 and forced.out.startswith("sent message "), forced  # stored (its preview aside)


def test_a_fleet_over_its_budget_gets_no_new_work(fleet):
    members = usage_json(fleet, "fleet", "usage", str(fleet.fleet_id))["members"]
    spent = usage_json(fleet, "fleet", "usage", str(fleet.fleet_id))["tokens"]["total"]
    target = next(r["member_id"] for r in members if r["member_id"] != fleet.director and r["budget"] is None)
    shown = usage_json(fleet, "fleet", "budget", str(fleet.fleet_id), "--tokens", str(spent + 10**9))
    assert shown["budget"] == {"usd": None, "tokens": spent + 10**9, "over": False}
    usage_json(fleet, "fleet", "budget", str(fleet.fleet_id), "--tokens", str(spent))
    refused = fleet.send(target, "More work.")
    assert refused.code == 1 and refused.err.startswith(f"Error: fleet {fleet.fleet_id} is over its budget ("), refused
    assert refused.err.count("\n") == 1
    # fleet watch: one over-budget event per crossing: the capped member (frank, over since
    # the test above) once, then the fleet once when its budget is set below its spend,
    # and neither again in the rounds after
    frank = next(r["member_id"] for r in members if r["budget"] is not None)
    usage_json(fleet, "fleet", "budget", str(fleet.fleet_id), "--clear")
    stream = Stream(fleet.environ, fleet.fleet_id, "--interval", "0.2")
    try:
        stream.wait_event(lambda e: e["event"] == "over-budget" and e["member_id"] == frank, timeout=60)
        usage_json(fleet, "fleet", "budget", str(fleet.fleet_id), "--tokens", "1")
        crossed = stream.wait_event(lambda e: e["event"] == "over-budget" and e["member_id"] is None, timeout=60)
        assert crossed["detail"].startswith(f"fleet {fleet.fleet_id} is over its budget (")
        assert crossed["command"] == f"cafleet fleet usage {fleet.fleet_id}"
        stream.drain_for(1.0)
    finally:
        stream.stop()
    assert stream.count("over-budget", frank) == 1 and stream.count("over-budget", None) == 1, stream.events
    bad = fleet.cafleet("fleet", "budget", str(fleet.fleet_id), "--usd", "-3")
    assert (bad.code, bad.err) == (2, "Error: --usd must be a number of dollars from 0.01 to 1000000000, got '-3'.\n")
    cleared = usage_json(fleet, "fleet", "budget", str(fleet.fleet_id), "--clear")
    assert cleared["budget"] is None


# --- the WebUI ---------------------------------------------------------------------------------


def test_webui_serves_spend_per_member_and_for_the_fleet(fleet):

    from tests.support.web_server import make_app, web_client

    expected = usage_json(fleet, "fleet", "usage", str(fleet.fleet_id))
    with web_client(make_app(fleet.db, fleet.environ)) as client:
        served = client.get(f"/api/fleets/{fleet.fleet_id}/usage")
        again = client.get(f"/api/fleets/{fleet.fleet_id}/usage")  # the kept reader: same totals
        missing = client.get("/api/fleets/999/usage")
    assert served.status_code == 200 and again.json() == served.json()
    got = served.json()
    assert got["tokens"] == expected["tokens"] and got["usd"] == expected["usd"]
    assert [(r["member_id"], r["tokens"]["total"], r["budget"]) for r in got["members"]] == [
        (r["member_id"], r["tokens"]["total"], r["budget"]) for r in expected["members"]
    ]
    assert missing.status_code == 404


def test_opencode_subagent_spend_is_included(ocfleet):
    """A subagent runs in a child session whose totals the parent leaves out: the member's
    usage adds them."""
    fleet = ocfleet
    task = m.ToolCall(
        "task", {"description": "Say done", "prompt": "Reply with the word done.", "subagent_type": "general"}
    )
    fleet.api.script.push(
        m.Reply(tool_calls=[task], input_tokens=1111, output_tokens=11),
        m.text("done", input_tokens=2222, output_tokens=22),
        m.text("Finished.", input_tokens=3333, output_tokens=33),
    )
    turns = len(fleet.api.turns())
    record = fleet.create_member("opencode", "fay", "Delegate one task, then stop.", ready=False)
    fleet.api.wait(lambda _: len(fleet.api.turns()) >= turns + 3, TURN_TIMEOUT)
    report = wait_calls(fleet, record["member_id"], 3)
    assert (report["calls"], report["tokens"]["input"], report["tokens"]["output"]) == (3, 6666, 66), report
    import sqlite3

    conn = sqlite3.connect(f"file:{report['files'][0]}?mode=ro", uri=True)
    children = conn.execute("SELECT tokens_input FROM session WHERE parent_id IS NOT NULL").fetchall()
    conn.close()
    assert children == [(2222,)]  # the subagent's call was in a child session
