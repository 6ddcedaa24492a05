"""Members placed where they fit (docs/delivery.md, "Where members appear"): every member's
pane and the Director's at least 80x20, a split beside the Director while one fits, then the
fleet's own tiled windows; `--placement split|window` and a fleet default.

The rules are pure (tmux's tiled grid is checked against a real tmux server once); the rest
is a real private tmux server, the real command line and the stand-in agent.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # the tests on a fleet run on both stores (tests/conftest.py)

from contextlib import ExitStack

import pytest

from cafleet.delivery.spawning.layout import best_split, tiled_fits, tiled_grid
from tests.support.keeper import end_every_keeper, keeper_on
from tests.support.pane_fleet import PaneFleet, preview_line, tmux_fleet
from tests.support.restart import kill_server, new_server
from tests.support.tmux_fixtures import running_tmux_server, wait_for

MIN = (80, 20)


# -- the rules ------------------------------------------------------------------------------


def test_the_tiled_grid_is_the_one_tmux_draws(env):
    """Each count of panes tiled in a real 220x60 window: every pane at least the size the
    rule computes, and the rule's verdict on 80x20 the one the real sizes give."""
    with running_tmux_server(env, width=220, height=60, command=("sleep", "600")) as server:
        for count in range(2, 11):
            server.run("split-window", "-d", "-t", "main:", "sleep", "600")
            server.run("select-layout", "-t", "main:", "tiled")
            sizes = [
                tuple(int(v) for v in line.split())
                for line in server.run("list-panes", "-t", "main:", "-F", "#{pane_width} #{pane_height}").split("\n")
                if line
            ]
            assert len(sizes) == count
            rows, columns = tiled_grid(count)
            assert min(w for w, _ in sizes) >= (220 - (columns - 1)) // columns, (count, sizes)
            assert min(h for _, h in sizes) >= (60 - (rows - 1)) // rows, (count, sizes)
            real = all(w >= MIN[0] and h >= MIN[1] for w, h in sizes)
            assert tiled_fits(220, 60, count, *MIN) == real, (count, sizes)


def test_a_split_is_chosen_only_while_both_halves_keep_the_minimum():
    assert best_split([("%0", 220, 60)], *MIN) == ("%0", True)  # side by side: 109 wide each
    assert best_split([("%0", 150, 50)], *MIN) == ("%0", False)  # 74 < 80 side by side: one above the other
    assert best_split([("%0", 110, 60), ("%1", 109, 60)], *MIN) == ("%0", False)  # the larger halves
    assert best_split([("%0", 110, 30), ("%1", 109, 30)], *MIN) is None  # nothing fits
    assert best_split([("%0", 110, 30)], *MIN, force=True) == ("%0", False)  # 30/20 rows > 110/80 columns
    assert best_split([], *MIN, force=True) is None


# -- a real fleet ---------------------------------------------------------------------------


@pytest.fixture
def wide_fleet(env, tmp_path, monkeypatch):
    keeper_on(env, monkeypatch)
    with tmux_fleet(env, tmp_path, monkeypatch, size=(220, 60)) as pane_fleet:
        try:
            yield pane_fleet
        finally:
            end_every_keeper(pane_fleet)


def layout(fleet: PaneFleet, server=None) -> dict[str, tuple[str, int, int]]:
    """Every pane of the server: pane id -> (window id, width, height)."""
    server = server or fleet.server
    out = server.run("list-panes", "-a", "-F", "#{pane_id} #{window_id} #{pane_width} #{pane_height}")
    return {p: (w, int(x), int(y)) for p, w, x, y in (line.split() for line in out.split("\n") if line)}


@pytest.mark.stores("sqlite")  # the rules and tmux are the same on both stores; the mixed test runs on both
def test_thirty_members_from_a_220x60_window_all_live_every_pane_at_least_80x20(wide_fleet):
    fleet = wide_fleet
    made = [fleet.placed(f"m{i}") for i in range(30)]
    for record in made:
        fleet.wait_ready(record["member_id"])
    panes = layout(fleet)
    director_window = panes[fleet.director_pane][0]
    assert set(panes) == {fleet.director_pane, *(r["pane_id"] for r in made)}, panes
    small = {p: size for p, size in panes.items() if size[1] < MIN[0] or size[2] < MIN[1]}
    assert not small, small  # the Director's pane too
    in_director_window = [r for r in made if panes[r["pane_id"]][0] == director_window]
    assert 1 <= len(in_director_window) <= 3, panes  # the split room, then the fleet's windows
    names = fleet.server.run("list-windows", "-a", "-F", "#{window_id} #{window_name}").split("\n")
    fleet_windows = {w for w, _, _ in panes.values()} - {director_window}
    assert all(
        line.split(" ", 1)[1] == f"cafleet-{fleet.fleet_id}-e2e"
        for line in names
        if line.split(" ")[0] in fleet_windows
    ), names
    # member show says where each member is
    shown = fleet.cafleet("member", "show", str(made[-1]["member_id"]), "--json").json()
    assert shown["placement"]["window_id"] == panes[made[-1]["pane_id"]][0], shown
    assert shown["placement"]["session"].startswith("$"), shown
    # a message to the last one is typed and submitted
    last = made[-1]["member_id"]
    sent = fleet.send(fleet.director, last, "you are the thirtieth", "--json")
    assert sent.code == 0, sent
    record = fleet.cafleet("message", "show", str(sent.json()["message_id"]), "--json").json()
    wait_for(lambda: preview_line(record) in fleet.submits(last), timeout=30, what="the preview to the thirtieth")


def test_split_and_window_placements_mixed_are_restored_and_deleted_cleanly(wide_fleet, tmp_path):
    fleet = wide_fleet
    split = [fleet.placed("s1", "--placement", "split"), fleet.placed("s2", "--placement", "split")]
    window = [fleet.placed("w1", "--placement", "window"), fleet.placed("w2", "--placement", "window")]
    for record in split + window:
        fleet.wait_ready(record["member_id"])
    panes = layout(fleet)
    director_window = panes[fleet.director_pane][0]
    assert all(panes[r["pane_id"]][0] == director_window for r in split), panes
    assert len({panes[r["pane_id"]][0] for r in window} - {director_window}) == 1, panes  # one fleet window, tiled
    refused = fleet.cafleet(
        "member", "create", "--fleet-id", str(fleet.fleet_id), "--name", "r", "--description", "d",
        "--coding-agent", "standin", "--host", "nowhere.invalid", "--placement", "window", "Wait.",
    )  # fmt: skip
    assert refused.code != 0 and refused.err.count("\n") == 1 and "--placement" in refused.err, refused

    kill_server(fleet)
    with ExitStack() as stack:
        environ = new_server(fleet, tmp_path, stack)
        restored = fleet.cafleet("fleet", "restore", str(fleet.fleet_id), "--json", environ=environ)
        assert restored.code == 0, restored
        outcomes = {r["member_id"]: r["outcome"] for r in restored.json()["members"]}
        assert set(outcomes.values()) == {"restored"}, restored
        after = layout(fleet, fleet.new_server)
        members_panes = [r["pane_id"] for r in restored.json()["members"] if r["member_id"] != fleet.director]
        assert set(members_panes) <= set(after), after
        assert all(w >= MIN[0] and h >= MIN[1] for _, w, h in after.values()), after
        end_every_keeper(fleet)
        deleted = fleet.cafleet("fleet", "delete", str(fleet.fleet_id), environ=environ)
        assert deleted.code == 0, deleted
        left = layout(fleet, fleet.new_server)
        assert set(left) == {environ["TMUX_PANE"]}, left  # every member's pane closed, the fleet's windows with them
