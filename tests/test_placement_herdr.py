"""Members placed where they fit on herdr (docs/delivery.md, "Where members appear"): the
rule tmux's placement follows, with herdr's words: its panes' sizes from ``pane layout``
(a pane's border inside its rectangle), the fleet's own tabs found by their label and a
member of the fleet in them, a new tab's root shell running the member.

The herdr stand-in (tests/support/herdr_standin.py) reports tmux's pane sizes as herdr's
rectangles, so the rule is checked against the sizes the stand-in really draws; the real
command line and the stand-in agent run in it.
"""

from __future__ import annotations

import json

import pytest

from cafleet.delivery.spawning.layout import HERDR_FRAME, best_split
from tests.support.pane_fleet import PaneFleet, herdr_fleet, preview_line
from tests.support.tmux_fixtures import wait_for

MIN = (80, 20)
HERDR = {"divider": 0, "frame": HERDR_FRAME}


def test_herdr_halves_lose_its_border_on_each_side():
    assert best_split([("w1:p1", 200, 50)], *MIN, **HERDR) == ("w1:p1", True)  # 98 x 48 each, side by side
    assert best_split([("w1:p1", 164, 50)], *MIN, **HERDR) == ("w1:p1", True)  # 82 - 2 = 80 wide: just
    assert best_split([("w1:p1", 163, 50)], *MIN, **HERDR) == ("w1:p1", False)  # 79 wide: one above the other
    assert best_split([("w1:p1", 163, 44)], *MIN, **HERDR) == ("w1:p1", False)  # 22 - 2 = 20 rows: just
    assert best_split([("w1:p1", 163, 43)], *MIN, **HERDR) is None  # 19 rows
    assert best_split([("w1:p1", 100, 50)], *MIN, **HERDR) == ("w1:p1", False)  # the side not halved too: 98
    assert best_split([("w1:p1", 81, 50)], *MIN, **HERDR) is None  # 79 wide even unhalved
    assert best_split([("w1:p1", 163, 43)], *MIN, force=True, **HERDR) == ("w1:p1", False)  # 43/20 > 163/80
    assert best_split([("w1:p1", 200, 30)], *MIN, force=True, **HERDR) == ("w1:p1", True)  # 200/80 > 30/20


# -- a fleet on the herdr stand-in -----------------------------------------------------------


@pytest.fixture
def herdr(env, tmp_path, monkeypatch):
    with herdr_fleet(env, tmp_path, monkeypatch) as pane_fleet:  # tabs of 200 x 50
        yield pane_fleet


def herdr_json(fleet: PaneFleet, *args: str) -> dict:
    done = fleet.server.run(*args)
    assert done.returncode == 0, done
    return json.loads(done.stdout)["result"]


def tabs(fleet: PaneFleet) -> dict[str, dict]:
    """tab id -> {"label", "panes": {pane id: (width, height)}}, as herdr reports them."""
    found = {t["tab_id"]: {"label": t["label"], "panes": {}} for t in herdr_json(fleet, "tab", "list")["tabs"]}
    for tab_id, tab in found.items():
        first = next(p["pane_id"] for p in herdr_json(fleet, "pane", "list")["panes"] if p["tab_id"] == tab_id)
        layout = herdr_json(fleet, "pane", "layout", "--pane", first)["layout"]
        assert layout["tab_id"] == tab_id
        tab["panes"] = {p["pane_id"]: (p["rect"]["width"], p["rect"]["height"]) for p in layout["panes"]}
    return found


def tab_of(found: dict[str, dict], pane_id: str) -> str:
    return next(tab_id for tab_id, tab in found.items() if pane_id in tab["panes"])


def assert_room(found: dict[str, dict]) -> None:
    """Every pane at least 80 x 20 inside herdr's border (the stand-in draws no border:
    its panes are larger still)."""
    small = {
        pane: size
        for tab in found.values()
        for pane, size in tab["panes"].items()
        if len(tab["panes"]) > 1 and (size[0] - HERDR_FRAME < MIN[0] or size[1] - HERDR_FRAME < MIN[1])
    }
    assert not small, small


@pytest.mark.stores("sqlite")  # the rule and herdr are the same on both stores
def test_eight_members_three_beside_the_director_then_fleet_tabs_of_four_all_live(herdr):
    fleet = herdr
    made = [fleet.placed(f"m{i}") for i in range(8)]
    for record in made:
        fleet.wait_ready(record["member_id"])
    found = tabs(fleet)
    director_tab = tab_of(found, fleet.director_pane)
    panes = [r["pane_id"] for r in made]
    # a 200 x 50 tab: beside the Director (98 wide each), then below it and below the first
    # (23 rows each); a fourth split would leave 10 rows
    assert set(found[director_tab]["panes"]) == {fleet.director_pane, *panes[:3]}, found
    assert found[director_tab]["label"] == "1", found  # the Director's tab is left as it was
    fleet_tabs = [tab_of(found, pane) for pane in panes[3:]]
    assert fleet_tabs[:4] == [fleet_tabs[0]] * 4 and fleet_tabs[4] not in (fleet_tabs[0], director_tab), found
    assert set(found[fleet_tabs[0]]["panes"]) == set(panes[3:7]), found  # four, then a new tab
    assert set(found[fleet_tabs[4]]["panes"]) == {panes[7]}, found
    assert {found[t]["label"] for t in fleet_tabs} == {f"cafleet-{fleet.fleet_id}-e2e"}, found
    assert set(found) == {director_tab, fleet_tabs[0], fleet_tabs[4]}, found
    assert_room(found)
    # the first split is side by side, the next ones one above the other
    sizes = found[director_tab]["panes"]
    assert sizes[fleet.director_pane][1] < 50 and sizes[panes[0]][1] < 50 and sizes[panes[0]][0] < 200, sizes
    # member show says where each member is: its tab is the window
    for record in (made[0], made[3], made[7]):
        shown = fleet.cafleet("member", "show", str(record["member_id"]), "--json").json()["placement"]
        assert (shown["window_id"], shown["pane_id"]) == (tab_of(found, record["pane_id"]), record["pane_id"]), shown
        assert shown["session"] == f"w1@{fleet.server.socket}", shown
    # a message to the last one, alone in its tab, is typed and submitted
    last = made[-1]["member_id"]
    sent = fleet.send(fleet.director, last, "you are the eighth", "--json")
    assert sent.code == 0, sent
    record = fleet.cafleet("message", "show", str(sent.json()["message_id"]), "--json").json()
    wait_for(lambda: preview_line(record) in fleet.submits(last), timeout=30, what="the preview to the eighth")


def test_window_and_split_placements_a_lookalike_tab_and_delete(herdr):
    fleet = herdr
    label = f"cafleet-{fleet.fleet_id}-e2e"
    lookalike = herdr_json(fleet, "tab", "create", "--label", label, "--no-focus")  # not one of this fleet's
    window = [fleet.placed("w1", "--placement", "window"), fleet.placed("w2", "--placement", "window")]
    split = [fleet.placed(f"s{i}", "--placement", "split") for i in range(4)]
    for record in window + split:
        fleet.wait_ready(record["member_id"])
    found = tabs(fleet)
    director_tab = tab_of(found, fleet.director_pane)
    window_tab = tab_of(found, window[0]["pane_id"])
    assert tab_of(found, window[1]["pane_id"]) == window_tab, found  # the second joins the first's tab
    assert window_tab not in (director_tab, lookalike["tab"]["tab_id"]) and found[window_tab]["label"] == label, found
    assert set(found[lookalike["tab"]["tab_id"]]["panes"]) == {lookalike["root_pane"]["pane_id"]}, found
    # --placement split: the Director's tab, even past the room (the fourth)
    assert set(found[director_tab]["panes"]) == {fleet.director_pane, *(r["pane_id"] for r in split)}, found
    # member delete closes the member's pane; the fleet's tab closes with its last
    for record in [split[3], split[2], *window]:
        deleted = fleet.cafleet("member", "delete", str(record["member_id"]))
        assert deleted.code == 0, deleted
    after = tabs(fleet)
    assert window_tab not in after and lookalike["tab"]["tab_id"] in after, after
    assert set(after[director_tab]["panes"]) == {fleet.director_pane, *(r["pane_id"] for r in split[:2])}, after
    # the room the third left (the fourth's was below the minimum) is taken again (auto)
    again = fleet.placed("again")
    fleet.wait_ready(again["member_id"])
    assert tab_of(tabs(fleet), again["pane_id"]) == director_tab
    assert_room(tabs(fleet))


@pytest.fixture
def short_herdr(env, tmp_path, monkeypatch):
    with herdr_fleet(env, tmp_path, monkeypatch, size=(200, 43)) as pane_fleet:
        yield pane_fleet


def test_restore_places_a_member_whose_pane_closed_where_it_fits(short_herdr):
    fleet = short_herdr
    made = [fleet.placed(f"m{i}") for i in range(4)]
    for record in made:
        fleet.wait_ready(record["member_id"])
    before = tabs(fleet)
    director_tab = tab_of(before, fleet.director_pane)
    # 43 rows: below the Director would leave 21 - 2 = 19 inside herdr's border, so one
    # beside it, then fleet tabs of two
    assert set(before[director_tab]["panes"]) == {fleet.director_pane, made[0]["pane_id"]}, before
    assert tab_of(before, made[1]["pane_id"]) == tab_of(before, made[2]["pane_id"]) != director_tab, before
    assert tab_of(before, made[3]["pane_id"]) not in (director_tab, tab_of(before, made[1]["pane_id"])), before
    assert fleet.server.run("pane", "close", made[0]["pane_id"]).returncode == 0  # its agent's pane is gone
    restored = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), "--json")
    assert restored.code == 0, restored
    outcomes = {r["member_id"]: (r["outcome"], r["pane_id"]) for r in restored.json()["members"]}
    outcome, pane_id = outcomes[made[0]["member_id"]]
    assert outcome == "restored" and pane_id != made[0]["pane_id"], restored
    fleet.wait_ready(made[0]["member_id"])
    after = tabs(fleet)
    assert set(after[director_tab]["panes"]) == {fleet.director_pane, pane_id}, after  # the room it left
    assert_room(after)
