"""Stored usage totals (docs/usage.md, "Stored totals"), on both stores: each member's usage
is read incrementally (only the bytes appended since the last read, from the file
identity, size and offset stored with the totals), a file cut short or replaced is read
again from the start, a half-written last line waits until it is complete, and the budget
gate decides from the stored totals without reading the agent's files. The fleet keeper
keeps the totals current, and `fleet watch` does when the keeper is off.

Bytes read are counted (``refresh`` returns them), never timed."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import shutil

import pytest

from cafleet.broker import usage
from cafleet.delivery import usage as spend
from cafleet.store.engines import open_store
from tests.conftest import FleetBuilder
from tests.support.keeper import assert_none_left, kill
from tests.support.pane_fleet import tmux_fleet
from tests.support.tmux_fixtures import wait_for
from tests.support.usage_records import call_lines, user_line, write_calls
from tests.support.watch_stream import Stream

SESSION = "3f1c2a4e-1111-4222-8333-444455556666"


def claude_member(store, member_id: int, config, **budget) -> None:
    usage.record_source(
        store, member_id, coding_agent="claude", session_id=SESSION, data_dir=str(config), cwd="/work", **budget
    )


def stored_tokens(store, member_id: int) -> int:
    """The member's token total as stored (no file read)."""
    return spend.member_usage(store, {}, member_id, fresh=False)["tokens"]["total"]


def stored_state(store, member_id: int) -> dict:
    return json.loads(usage.stored_totals(store, [member_id])[member_id][1])


def test_appending_reads_only_the_new_bytes(build, store, tmp_path):
    config = tmp_path / "claude"
    fleet_id, _, (alice,) = build.fleet("appends", 1)
    claude_member(store, alice, config)
    first = user_line("[cafleet msg 1 from 1] go") + call_lines("m1", 1000, 10, blocks=2)
    path = write_calls(config, SESSION, first)
    assert spend.refresh(store, fleet_id)[1] == len(first.encode())
    assert stored_tokens(store, alice) == 1010
    for number in range(2, 5):
        more = user_line("tool output " * 50) + call_lines(f"m{number}", 100 * number, number, blocks=3)
        write_calls(config, SESSION, more)
        assert spend.refresh(store, fleet_id)[1] == len(more.encode())  # only what was appended
    assert stored_tokens(store, alice) == 1010 + 202 + 303 + 404
    state = stored_state(store, alice)[str(path)]
    info = os.stat(path)
    assert (state["dev"], state["ino"], state["offset"]) == (info.st_dev, info.st_ino, info.st_size)
    updated = usage.stored_totals(store, [alice])[alice]
    assert spend.refresh(store, fleet_id)[1] == 0  # nothing new: nothing read
    assert usage.stored_totals(store, [alice])[alice] == updated  # and nothing written
    assert spend.member_usage(store, {}, alice)["tokens"]["total"] == 1919  # `member usage` goes on from there


def test_a_transcript_cut_short_or_replaced_is_read_again_from_the_start(build, store, tmp_path):
    config = tmp_path / "claude"
    fleet_id, _, (alice,) = build.fleet("rewrites", 1)
    claude_member(store, alice, config)
    path = write_calls(config, SESSION, call_lines("m1", 1000, 10) + call_lines("m2", 2000, 20))
    spend.refresh(store, fleet_id)
    assert stored_tokens(store, alice) == 3030
    shorter = call_lines("m3", 50, 5)
    path.write_text(shorter, encoding="utf-8")  # cut short and rewritten in place
    assert spend.refresh(store, fleet_id)[1] == len(shorter.encode())
    assert stored_tokens(store, alice) == 55
    # replaced by another file (a new inode) no shorter than what was read: read from 0
    replacement = call_lines("m4", 7, 7) + user_line("x" * 200)
    assert len(replacement) > len(shorter)
    other = path.with_suffix(".new")
    other.write_text(replacement, encoding="utf-8")
    os.replace(other, path)
    assert spend.refresh(store, fleet_id)[1] == len(replacement.encode())
    assert stored_tokens(store, alice) == 14


def test_a_half_written_last_line_is_counted_once_it_is_complete(build, store, tmp_path):
    config = tmp_path / "claude"
    fleet_id, _, (alice,) = build.fleet("halves", 1)
    claude_member(store, alice, config)
    whole = call_lines("m1", 1000, 10)
    line = call_lines("m2", 500, 5)
    write_calls(config, SESSION, whole + line[:40])  # the agent is still writing m2's line
    spend.refresh(store, fleet_id)
    assert stored_tokens(store, alice) == 1010
    assert spend.refresh(store, fleet_id)[1] == 0  # the file has not grown: nothing read
    write_calls(config, SESSION, line[40:])
    assert spend.refresh(store, fleet_id)[1] == len(line.encode())  # the half line is read again, whole
    assert stored_tokens(store, alice) == 1515
    spend.refresh(store, fleet_id)
    assert stored_tokens(store, alice) == 1515  # once


def test_a_send_over_budget_is_refused_from_stored_totals_with_the_files_gone(cli, build, store, tmp_path):
    """The gate reads the stored totals: with the agent's files unreadable or deleted, a
    member over its budget (or a fleet over its) is still refused, and `member usage`
    keeps what was counted (spend stays spent)."""
    config = tmp_path / "claude"
    fleet_id, director, (alice, bob) = build.fleet("gone", 2)
    claude_member(store, alice, config, budget_tokens=1000)
    path = write_calls(config, SESSION, call_lines("m1", 1000, 10))
    assert cli("member", "usage", str(alice), "--json").json()["budget"]["over"] is True  # read and stored
    path.write_text("not json at all\n" * 10, encoding="utf-8")  # what a send would read now counts nothing
    os.utime(path, (0, 0))
    over = (
        f"Error: member {alice} is over its budget (1010 tokens spent of a 1000-token budget); "
        "it gets no new work; give --force to send anyway.\n"
    )

    def send(to: int):
        return cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(to), "task")

    refused = send(alice)
    assert (refused.code, refused.err) == (1, over), refused
    shutil.rmtree(config)
    refused = send(alice)
    assert (refused.code, refused.err) == (1, over), refused
    assert send(bob).code == 0
    assert cli("fleet", "budget", str(fleet_id), "--tokens", "1000").code == 0
    to_bob = send(bob)
    assert to_bob.code == 1 and to_bob.err.startswith(
        f"Error: fleet {fleet_id} is over its budget (1010 tokens spent of a 1000-token budget)"
    ), to_bob
    assert cli("member", "usage", str(alice), "--json").json()["tokens"]["total"] == 1010


def test_a_member_never_read_is_read_once_by_the_gate_within_its_bound(cli, build, store, tmp_path, monkeypatch):
    """A member whose totals were never stored (no keeper ran since its records grew, or a
    database from before the stored totals) is read by the gate, at most GATE_READ_BYTES,
    and stored; the next read goes on from where that one stopped."""
    config = tmp_path / "claude"
    fleet_id, director, (alice,) = build.fleet("unread", 1)
    claude_member(store, alice, config, budget_tokens=2000)
    calls = [call_lines(f"m{n}", 1000, 0) for n in range(1, 4)]
    write_calls(config, SESSION, "".join(calls))
    monkeypatch.setattr(spend, "GATE_READ_BYTES", len(calls[0]) + len(calls[1]) + 1)
    assert usage.stored_totals(store, [alice]) == {}
    refused = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(alice), "task")
    assert refused.code == 1 and "(2000 tokens spent of a 2000-token budget)" in refused.err, refused
    assert stored_tokens(store, alice) == 2000  # the bound stopped it after two calls
    assert spend.refresh(store, fleet_id)[1] == len(calls[2])  # the keeper's next read goes on from there
    assert stored_tokens(store, alice) == 3000


# --- kept current by the fleet keeper, or by `fleet watch` when the keeper is off ---------------


@pytest.fixture
def pane_fleet(env, tmp_path, monkeypatch, request):
    keeper = request.param
    env["CAFLEET_KEEPER"] = keeper
    monkeypatch.setenv("CAFLEET_KEEPER", keeper)
    with tmux_fleet(env, tmp_path, monkeypatch) as fleet:
        try:
            yield fleet
        finally:
            assert_none_left(fleet.db, lambda: recorded_keeper(fleet))


def recorded_keeper(fleet) -> list[int]:
    """The pid the fleet's keeper record names (ended by pid at teardown)."""
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["keeper"]
    return [shown["pid"]] if shown["running"] and shown["pid"] else []


def watched_member(fleet, tmp_path) -> tuple:
    store = open_store(fleet.db)
    member = FleetBuilder(store).member(fleet.fleet_id, "spender")
    claude_member(store, member, tmp_path / "claude", budget_tokens=1500)
    return store, member


@pytest.mark.parametrize("pane_fleet", ["on"], indirect=True)
def test_the_keeper_keeps_the_stored_totals_current(pane_fleet, tmp_path):
    store, member = watched_member(pane_fleet, tmp_path)
    try:
        path = write_calls(tmp_path / "claude", SESSION, call_lines("m1", 1000, 10))
        wait_for(lambda: stored_or_none(store, member) == 1010, timeout=30, what="the keeper to store 1010")
        write_calls(tmp_path / "claude", SESSION, call_lines("m2", 500, 5))
        wait_for(lambda: stored_or_none(store, member) == 1515, timeout=30, what="the keeper to store 1515")
        assert stored_state(store, member)[str(path)]["offset"] == os.stat(path).st_size
    finally:
        store.close()


@pytest.mark.parametrize("pane_fleet", ["off", "on"], indirect=True)
def test_with_the_keeper_off_fleet_watch_keeps_them_and_reports_the_crossing(pane_fleet, tmp_path):
    """With the keeper turned off, or on but not running (killed, and nothing owed for a
    command to start another), the watch reads the records itself."""
    if pane_fleet.environ["CAFLEET_KEEPER"] == "on":
        pid = wait_for(lambda: recorded_keeper(pane_fleet), timeout=20, what="the fleet's keeper to run")[0]
        kill(pid)
    store, member = watched_member(pane_fleet, tmp_path)
    watch = Stream(pane_fleet.environ, pane_fleet.fleet_id, "--interval", "0.2")
    try:
        write_calls(tmp_path / "claude", SESSION, call_lines("m1", 1000, 10))
        wait_for(lambda: stored_or_none(store, member) == 1010, timeout=30, what="the watch to store 1010")
        write_calls(tmp_path / "claude", SESSION, call_lines("m2", 500, 5))
        event = watch.wait_event(lambda e: e["event"] == "over-budget")
        assert event["member_id"] == member and "1515 tokens spent of a 1500-token budget" in event["detail"]
    finally:
        watch.stop()
        store.close()


def stored_or_none(store, member_id: int) -> int | None:
    return stored_tokens(store, member_id) if usage.stored_totals(store, [member_id]) else None
