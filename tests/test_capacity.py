"""Room for a member: ``member create`` refuses, before anything is written, a member its
host has no memory for or its fleet has no place for, unless ``--force``; ``doctor`` shows
each host's headroom (docs/decisions.md, "Room for a member").

A machine short of memory is a real file in /proc/meminfo's format with a small
``MemAvailable``, named by ``CAFLEET_MEMINFO``; on another host (a real sshd on this
machine, tests/support/sshd.py) the same path is read there, over SSH. Members run the
stand-in agent (30 MiB a member). The gate reads no store, so its memory half runs on
SQLite; the member cap counts the fleet's members, and runs on both stores.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")

from pathlib import Path

import pytest

from cafleet.config import declarations
from cafleet.errors import shown
from tests.support.pane_fleet import tmux_fleet
from tests.support.remote_fleet import create_remote_args, fleet_with_hosts, remote_panes, short_directory

MARGIN = declarations.DEFAULT_MEMORY_MARGIN_MIB
STANDIN = 30  # MiB a stand-in member is counted to need


def meminfo(folder: Path, available_kib: int) -> Path:
    """A file in /proc/meminfo's format whose MemAvailable is ``available_kib`` kB."""
    path = folder / "meminfo"
    path.write_text(
        "MemTotal:        4030464 kB\n"
        "MemFree:           91236 kB\n"
        f"MemAvailable:   {available_kib:>8} kB\n"
        "Buffers:           12044 kB\n"
        "Cached:           301828 kB\n"
        "SwapCached:            0 kB\n",
        encoding="ascii",
    )
    return path


def panes(fleet) -> list[str]:
    return fleet.server.run("list-panes", "-a", "-F", "#{pane_id}").split()


def names(fleet) -> list[str]:
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--json")
    assert listed.code == 0, listed
    return [row["name"] for row in listed.json()]


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


@pytest.mark.stores("sqlite")  # the refusal comes before any store is written
def test_a_host_short_of_memory_refuses_the_member_in_one_line_and_writes_nothing(fleet, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.chdir(repo)  # --worktree takes the repository from here: none is made
    short = dict(fleet.environ, CAFLEET_MEMINFO=str(meminfo(tmp_path, 300 * 1024)))
    before_panes, before_names = panes(fleet), names(fleet)
    refused = fleet.try_create("ann", "--worktree", environ=short)
    assert (refused.code, refused.out) == (1, ""), refused
    assert refused.err == (
        f"Error: this machine has 300 MiB of memory available; a standin member needs about {STANDIN} MiB "
        f"and {MARGIN} MiB kept free (CAFLEET_MEMORY_MARGIN); nothing was created; "
        "give --force to create the member anyway.\n"
    )
    assert names(fleet) == before_names == ["Director"]
    assert fleet.member_count() == 1 and fleet.query("SELECT COUNT(*) FROM members")[0][0] == 1  # no row at all
    assert panes(fleet) == before_panes
    assert not (Path(fleet.environ["XDG_DATA_HOME"]) / "cafleet" / "worktrees").exists()

    # a claude member names its own estimate and the setting behind it
    claude = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "bea",
        "--description",
        "d",
        "--coding-agent",
        "claude",
        "Hi",
        environ=dict(short, CAFLEET_MEMORY_MARGIN="0"),
    )
    assert claude.code == 1 and claude.err == (
        f"Error: this machine has 300 MiB of memory available; a claude member needs about "
        f"{declarations.AGENT_MEMORY_MIB['claude']} MiB (CAFLEET_AGENT_MEMORY_CLAUDE); nothing was created; "
        "give --force to create the member anyway.\n"
    ), claude

    # just enough: the estimate and the margin fit exactly
    enough = dict(fleet.environ, CAFLEET_MEMINFO=str(meminfo(tmp_path, (STANDIN + MARGIN) * 1024)))
    made = fleet.try_create("cid", environ=enough)
    assert made.code == 0, made


@pytest.mark.stores("sqlite")  # the create that --force lets through is the ordinary one, tested on both
def test_force_creates_the_member_on_a_host_short_of_memory(fleet, tmp_path):
    short = dict(fleet.environ, CAFLEET_MEMINFO=str(meminfo(tmp_path, 1024)))
    assert fleet.try_create("ann", environ=short).code == 1
    forced = fleet.try_create("ann", "--force", environ=short)
    assert forced.code == 0 and forced.err == "", forced
    member = forced.json()
    assert member["pane_id"] in panes(fleet)
    fleet.wait_ready(member["member_id"])
    assert names(fleet) == ["Director", "ann"]


def test_the_member_cap_refuses_one_more_member_and_force_passes_it(fleet):
    capped = dict(fleet.environ, CAFLEET_FLEET_MAX_MEMBERS="2")
    for name in ("ann", "bob"):
        assert fleet.try_create(name, environ=capped).code == 0
    before_panes = panes(fleet)
    refused = fleet.try_create("cid", environ=capped)
    assert (refused.code, refused.out) == (1, ""), refused
    assert refused.err == (
        f"Error: fleet {fleet.fleet_id} has 2 members besides its Director, its cap (CAFLEET_FLEET_MAX_MEMBERS=2); "
        "nothing was created; give --force to create the member anyway.\n"
    )
    assert names(fleet) == ["Director", "ann", "bob"] and panes(fleet) == before_panes
    forced = fleet.try_create("cid", "--force", environ=capped)
    assert forced.code == 0, forced
    assert names(fleet) == ["Director", "ann", "bob", "cid"]

    # a deleted member leaves its place: the cap counts active members only
    ann = next(r for r in fleet.cafleet("member", "list", str(fleet.fleet_id), "--json").json() if r["name"] == "ann")
    assert fleet.cafleet("member", "delete", str(ann["member_id"])).code == 0
    assert fleet.cafleet("member", "delete", str(forced.json()["member_id"])).code == 0
    assert fleet.try_create("dan", environ=capped).code == 0
    assert fleet.try_create("eve", environ=capped).code == 1


@pytest.mark.stores("sqlite")  # read before any store is written
def test_an_unusable_meminfo_setting_is_one_line_and_writes_nothing(fleet, tmp_path):
    cases = {
        "relative/meminfo": (2, "Error: CAFLEET_MEMINFO must be an absolute path, got 'relative/meminfo'.\n"),
        str(tmp_path / "absent"): (
            1,
            f"Error: CAFLEET_MEMINFO names {shown(tmp_path / 'absent')}, which cannot be read "
            "(No such file or directory).\n",
        ),
    }
    empty = tmp_path / "empty"
    empty.write_text("MemTotal:        4030464 kB\n", encoding="ascii")
    cases[str(empty)] = (
        1,
        f"Error: the file CAFLEET_MEMINFO names on this machine, {shown(empty)}, has no 'MemAvailable: N kB' line.\n",
    )
    for value, (code, err) in cases.items():
        refused = fleet.try_create("ann", environ=dict(fleet.environ, CAFLEET_MEMINFO=value))
        assert (refused.code, refused.out, refused.err) == (code, "", err), value
    assert names(fleet) == ["Director"]


@pytest.mark.stores("sqlite")  # doctor's memory lines read no store
def test_doctor_prints_this_machines_headroom_per_agent(cli, env, tmp_path):
    available = MARGIN + 2 * max(declarations.AGENT_MEMORY_MIB.values())  # room for two of each at least
    environ = dict(env, CAFLEET_MEMINFO=str(meminfo(tmp_path, available * 1024)), CAFLEET_AGENT_MEMORY_CODEX="100")
    report = cli("doctor", environ=environ)
    room = {
        agent: (available - MARGIN) // (100 if agent == "codex" else mib)
        for agent, mib in declarations.AGENT_MEMORY_MIB.items()
    }
    expected = ", ".join(f"{n} {agent}" for agent, n in room.items())
    estimates = ", ".join(
        f"{agent} {100 if agent == 'codex' else mib}" for agent, mib in declarations.AGENT_MEMORY_MIB.items()
    )
    lines = report.out.splitlines()
    assert f"✓ memory (MiB a member: {estimates}; {MARGIN} MiB kept free):" in lines
    assert f"    ✓ this machine: {available} MiB available, room for {expected} members" in lines
    memory = cli("doctor", "--json", environ=environ).json()["memory"]
    assert memory["hosts"] == [{"host": None, "available_mib": available, "room": room}]

    short = cli("doctor", environ=dict(environ, CAFLEET_MEMINFO=str(meminfo(tmp_path, 600 * 1024))))
    assert "    ! this machine: 600 MiB available, room for 0 claude, 0 codex, 0 opencode members" in short.out
    assert short.code == report.code  # a warning: the exit status is the other sections'


# --- another host, over SSH ------------------------------------------------------------------


def create_remote(fleet, host, name: str, *extra: str, environ=None):
    args = create_remote_args(fleet, host, name)
    return fleet.cafleet(*args, *extra, "Wait for tasks from {director_member_id}.", environ=environ)


@pytest.fixture
def remote(env, tmp_path, monkeypatch):
    with (
        short_directory() as short_dir,
        fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (pane_fleet, [host]),
    ):
        yield pane_fleet, host


@pytest.mark.slow
@pytest.mark.tmux
@pytest.mark.stores("sqlite")  # the remote members reach the test's SQLite file by its path
def test_a_remote_host_short_of_memory_refuses_with_its_figures_and_force_creates(remote, tmp_path):
    fleet, host = remote
    short = dict(fleet.environ, CAFLEET_MEMINFO=str(meminfo(tmp_path, 200 * 1024)))
    refused = create_remote(fleet, host, "far", environ=short)
    assert (refused.code, refused.out) == (1, ""), refused
    assert refused.err == (
        f"Error: host {host.alias} has 200 MiB of memory available; a standin member needs about {STANDIN} MiB "
        f"and {MARGIN} MiB kept free (CAFLEET_MEMORY_MARGIN); nothing was created; "
        "give --force to create the member anyway.\n"
    )
    assert fleet.query("SELECT COUNT(*) FROM members")[0][0] == 1
    assert remote_panes(host) == {}  # no session was opened there

    absent = dict(fleet.environ, CAFLEET_MEMINFO=str(tmp_path / "absent"))
    unread = create_remote(fleet, host, "far", environ=absent)
    assert unread.code == 1 and unread.err.startswith(
        f"Error: host {host.alias} cannot read the file CAFLEET_MEMINFO names, {shown(tmp_path / 'absent')} (cat: "
    ), unread
    assert len(unread.err.splitlines()) == 1 and remote_panes(host) == {}

    forced = create_remote(fleet, host, "far", "--force", "--json", environ=short)
    assert forced.code == 0, forced
    assert forced.json()["pane_id"] in remote_panes(host)


@pytest.mark.slow
@pytest.mark.tmux
@pytest.mark.stores("sqlite")  # the remote members reach the test's SQLite file by its path
def test_doctor_prints_a_headroom_line_for_each_host_with_members(remote, tmp_path):
    fleet, host = remote
    made = create_remote(fleet, host, "far", "--json")
    assert made.code == 0, made
    available = MARGIN + max(declarations.AGENT_MEMORY_MIB.values())  # room for one of each at least
    environ = dict(fleet.environ, CAFLEET_MEMINFO=str(meminfo(tmp_path, available * 1024)))
    report = fleet.cafleet("doctor", environ=environ)
    room = ", ".join(f"{(available - MARGIN) // mib} {agent}" for agent, mib in declarations.AGENT_MEMORY_MIB.items())
    lines = report.out.splitlines()
    at = lines.index(f"    ✓ this machine: {available} MiB available, room for {room} members")
    assert lines[at + 1] == f"    ✓ host {host.alias}: {available} MiB available, room for {room} members"
    memory = fleet.cafleet("doctor", "--json", environ=environ).json()["memory"]
    assert [entry["host"] for entry in memory["hosts"]] == [None, host.alias]
    assert host.accepted() == 1  # the memory came with the hosts section's one call: no new connection
