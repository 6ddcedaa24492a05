"""Member creation and deletion with real panes, through the real command line.

Each test gets a private tmux server whose first pane is the Director's (it runs a byte
recorder: nothing may ever be typed there) and a fleet created from that pane. Members run
the stand-in agent, or a fake ``claude`` that records the argv it was started with. What is
checked is what tmux, the process table and the database file say, not what cafleet
reports about itself.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from cafleet.broker import members
from cafleet.delivery.keystrokes.lock import pane_lock
from cafleet.store.engines import lock_space, open_store
from tests.support.pane_fleet import preview_line, tmux_fleet


@pytest.fixture
def fleet(env, tmp_path, monkeypatch):
    with tmux_fleet(env, tmp_path, monkeypatch) as pane_fleet:
        yield pane_fleet


def panes(server) -> dict[str, dict]:
    """Every pane of the server: id -> window, active flag, pid."""
    rows = server.run("list-panes", "-a", "-F", "#{pane_id}\t#{window_id}\t#{pane_active}\t#{pane_pid}")
    out = {}
    for row in rows.splitlines():
        pane_id, window_id, active, pid = row.split("\t")
        out[pane_id] = {"window_id": window_id, "active": active == "1", "pid": int(pid)}
    return out


def proc_argv(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def proc_environ(pid: int) -> dict[str, str]:
    entries = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace").split("\0")
    return dict(entry.split("=", 1) for entry in entries if "=" in entry)


def director_placement(fleet) -> dict:
    shown = fleet.cafleet("member", "show", str(fleet.director), "--json")
    assert shown.code == 0, shown
    return shown.json()["placement"]


def create_args(fleet, name: str, *extra: str) -> list[str]:
    return [
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        name,
        "--description",
        f"{name} worker",
        *extra,
    ]


def nothing_written(fleet) -> bool:
    """Only the Director's rows exist: no member row, no placement, pending or not."""
    return (
        fleet.query("SELECT COUNT(*) FROM members")[0][0],
        fleet.query("SELECT COUNT(*) FROM member_placements")[0][0],
    ) == (1, 1)


# --- member create ------------------------------------------------------------------------


def test_create_splits_a_pane_running_the_agent_and_keeps_the_directors_focus(fleet, store_kind):
    director = director_placement(fleet)
    environ = dict(fleet.environ, CAFLEET_PG_TRUSTED_OWNER="the_trusted_owner")  # passed on with the schema
    result = fleet.cafleet(*create_args(fleet, "alice", "--coding-agent", "standin"), "Hi {member_id}", environ=environ)
    assert (result.code, result.err) == (0, "")
    new_pane = sorted(set(panes(fleet.server)) - {fleet.director_pane})
    assert len(new_pane) == 1
    pane_id = new_pane[0]
    assert result.out == f"created member 2 (alice, standin) in pane {pane_id}\n"

    shown = panes(fleet.server)
    assert shown[pane_id]["window_id"] == director["window_id"]  # split off the Director's window
    assert shown[fleet.director_pane]["active"] is True  # focus stayed with the Director
    assert shown[pane_id]["active"] is False
    pid = shown[pane_id]["pid"]
    assert proc_argv(pid) == [sys.executable, "-m", "cafleet.agents.standin", "--member-id", "2"]
    pane_env = proc_environ(pid)
    assert (pane_env["CAFLEET_MEMBER_ID"], pane_env["CAFLEET_FLEET_ID"], pane_env["CAFLEET_DATABASE_URL"]) == (
        "2",
        str(fleet.fleet_id),
        fleet.db,
    )
    postgres = store_kind == "postgres"  # the member's cafleet must accept the same schema
    assert pane_env.get("CAFLEET_PG_SCHEMA") == ("cafleet" if postgres else None)
    assert pane_env.get("CAFLEET_PG_TRUSTED_OWNER") == ("the_trusted_owner" if postgres else None)

    record = fleet.cafleet("member", "show", "2", "--json").json()
    placement = dict(record["placement"])
    assert placement.pop("created_at") == record["registered_at"]
    assert placement.pop("identity").count(":") == 2  # <server pid>:<server start>:<pane pid>
    assert placement == {
        "backend": "tmux",
        "session": director["session"],
        "window_id": director["window_id"],
        "pane_id": pane_id,
        "coding_agent": "standin",
    }
    assert (record["status"], record["kind"], record["description"]) == ("active", "member", "alice worker")

    as_json = fleet.cafleet(*create_args(fleet, "bob", "--coding-agent", "standin"), "--json", "Hi")
    assert as_json.code == 0, as_json
    assert as_json.out.count("\n") == 1
    bob_pane = as_json.json()["pane_id"]
    assert as_json.json() == {
        "member_id": 3,
        "fleet_id": fleet.fleet_id,
        "name": "bob",
        "coding_agent": "standin",
        "backend": "tmux",
        "pane_id": bob_pane,
    }
    assert set(panes(fleet.server)) == {fleet.director_pane, pane_id, bob_pane}
    assert panes(fleet.server)[fleet.director_pane]["active"] is True
    roster = fleet.cafleet("member", "list", str(fleet.fleet_id), "--json").json()
    assert [(r["member_id"], r["kind"], r["pane_id"]) for r in roster] == [
        (1, "director", fleet.director_pane),
        (2, "member", pane_id),
        (3, "member", bob_pane),
    ]


def test_spawn_prompt_reaches_the_agent_with_placeholders_and_identity(fleet):
    prompt = "-- You are {member_id} of fleet {fleet_id} ({coding_agent}); report to {director_member_id}. {{literal}}"
    result = fleet.cafleet(
        *create_args(fleet, "carol", "--coding-agent", "claude", "--model", "opus", "--effort", "high"),
        "--json",
        "--",
        prompt,
    )
    assert result.code == 0, result
    member = result.json()["member_id"]
    fleet.wait_ready(member, prompt="\u276f")  # the fake claude became a stand-in with claude's composer
    received = json.loads((fleet.records_dir / f"argv-{member}.json").read_text(encoding="utf-8"))
    # the transcript's name, chosen by cafleet (and recorded for `member usage` on SQLite,
    # where the usage tables live: docs/usage.md)
    session_id = received[7]
    assert received[6] == "--session-id" and str(uuid.UUID(session_id)) == session_id
    if not fleet.db.startswith(("postgresql:", "postgres:")):
        conn = sqlite3.connect(fleet.db)
        recorded = conn.execute(
            "SELECT session_id FROM cafleet_aux_member_usage_sources WHERE member_id = ?", (member,)
        ).fetchone()[0]
        conn.close()
        assert recorded == session_id
    del received[6:8]
    assert received == [
        "--permission-mode",
        "dontAsk",
        "--allowedTools",
        "Bash(cafleet message *)",
        "--name",
        "carol",
        "--model",
        "opus",
        "--effort",
        "high",
        "--",
        f"-- You are {member} of fleet {fleet.fleet_id} (claude); report to 1. {{literal}}\n\n"
        "cafleet identity:\n"
        f"- fleet id: {fleet.fleet_id}\n"
        f"- your member id: {member}\n"
        "- Director member id: 1\n"
        f"- messages wake you as `[cafleet msg ID from SENDER TIME]` lines; read them with "
        f"`cafleet message poll {member}` and the full body with `cafleet message show ID`\n"
        "- acknowledge each message once handled: `cafleet message ack ID`\n"
        f'- reply: `cafleet message send --from-member-id {member} --to-member-id 1 "TEXT"`\n'
        "- a send that printed a message id is stored, even if the recipient was not woken: never resend it",
    ]
    # The claude cues (composer ❯) drive delivery into this pane too.
    sent = fleet.send(fleet.director, member, "first task", "--json")
    assert (sent.code, sent.err, sent.json()["notified"]) == (0, "", True)
    assert fleet.submits(member) == [preview_line(sent.json())]


@pytest.mark.parametrize(
    ("extra", "prompt", "code", "error"),
    [
        (
            ["--coding-agent", "standin"],
            "Do {task} for {director_member_id}",
            2,
            "unknown placeholder {task} in the prompt; use {fleet_id}, {member_id}, {director_member_id}, "
            "{coding_agent} or {{ }} for literal braces.",
        ),
        (
            ["--coding-agent", "claude", "--effort", "huge"],
            "Hi",
            2,
            "invalid --effort 'huge' for claude; choose low, medium, high, xhigh or max",
        ),
        (["--coding-agent", "standin", "--effort", "high"], "Hi", 2, "standin takes no --effort; leave it out"),
        (
            ["--coding-agent", "claude"],
            "Hi",
            1,
            "claude not found on PATH; install Claude Code or pass --coding-agent with an installed agent "
            "(codex, opencode)",
        ),
    ],
    ids=["unknown-placeholder", "bad-effort", "effort-for-standin", "missing-binary"],
)
def test_create_refuses_before_writing_anything(fleet, tmp_path, extra, prompt, code, error):
    # A PATH with tmux and nothing else: claude is missing whatever this machine has.
    only_tmux = tmp_path / "only-tmux"
    only_tmux.mkdir()
    (only_tmux / "tmux").symlink_to(shutil.which("tmux"))
    environ = dict(fleet.environ, PATH=str(only_tmux))
    before = panes(fleet.server)
    result = fleet.cafleet(*create_args(fleet, "dave", *extra), prompt, environ=environ)
    assert (result.code, result.out, result.err) == (code, "", f"Error: {error}\n")
    assert nothing_written(fleet)
    assert panes(fleet.server) == before


def test_only_the_directors_pane_may_create_members(fleet):
    other = fleet.server.new_pane(["sleep", "300"])
    environ = dict(fleet.environ, **fleet.server.environ_for(other))
    before = panes(fleet.server)
    result = fleet.cafleet(*create_args(fleet, "eve", "--coding-agent", "standin"), "Hi", environ=environ)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"Error: only fleet {fleet.fleet_id}'s Director (pane {fleet.director_pane}) can create "
        f"members; this command runs in pane {other}.\n"
    )
    assert nothing_written(fleet)
    assert panes(fleet.server) == before


def test_deleted_working_directory_is_refused_before_any_write(fleet, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    before = panes(fleet.server)
    # The shell enters the directory, removes it, then becomes cafleet inside it.
    done = subprocess.run(
        [
            "sh",
            "-c",
            'cd "$1" && rmdir "$1" && shift && exec "$@"',
            "sh",
            str(gone),
            sys.executable,
            "-m",
            "cafleet",
            *create_args(fleet, "frank", "--coding-agent", "standin"),
            "Hi",
        ],
        env=fleet.environ,
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr.decode() == (
        "Error: the current directory no longer exists, so the new pane has nowhere "
        "to start; cd to an existing directory and retry.\n"
    )
    assert nothing_written(fleet)
    assert panes(fleet.server) == before


def test_split_failure_deregisters_the_member(fleet):
    fleet.server.run("resize-window", "-t", fleet.director_pane, "-x", "2", "-y", "2")  # no room to split
    before = panes(fleet.server)
    # --placement split: a split even without room (auto would open the fleet's own window)
    result = fleet.cafleet(*create_args(fleet, "gina", "--coding-agent", "standin", "--placement", "split"), "Hi")
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        "Error: member creation failed: tmux split-window failed: no space for new pane; "
        "cleaned up: deregistered member 2.\n"
    )
    assert panes(fleet.server) == before
    assert fleet.member_count("active") == 1
    assert fleet.query("SELECT status, deregistered_at IS NOT NULL FROM members WHERE member_id = 2") == [
        ("deregistered", 1)
    ]
    assert fleet.query("SELECT COUNT(*) FROM member_placements WHERE member_id = 2") == [(0,)]


def test_failure_after_the_split_closes_the_new_pane(fleet):
    """The pane-id patch times out on its lock: the pane that was opened must be closed."""
    session = director_placement(fleet)["session"]
    existing = panes(fleet.server)
    next_pane = f"%{max(int(p[1:]) for p in existing) + 1}"  # tmux numbers panes in order
    environ = dict(fleet.environ, CAFLEET_LOCK_TIMEOUT="0.3")
    with pane_lock(lock_space(fleet.db), "tmux", session, next_pane, 5):
        result = fleet.cafleet(*create_args(fleet, "hank", "--coding-agent", "standin"), "Hi", environ=environ)
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"Error: member creation failed: the pane-input lock for pane {next_pane} is still held by another "
        "cafleet process after 0.3 s; try again when that delivery has finished; "
        f"cleaned up: closed pane {next_pane}, deregistered member 2.\n"
    )
    assert panes(fleet.server) == existing  # no stray pane
    assert fleet.member_count("active") == 1
    assert fleet.query("SELECT COUNT(*) FROM member_placements") == [(1,)]


# --- member delete / fleet delete ----------------------------------------------------------


def test_delete_closes_the_pane_deregisters_and_keeps_messages(fleet):
    alice = fleet.create("alice")
    to_alice = fleet.send(fleet.director, alice["member_id"], "task for alice", "--json").json()
    from_alice = fleet.send(alice["member_id"], fleet.director, "done", "--json").json()
    assert to_alice["notified"] is True

    result = fleet.cafleet("member", "delete", "2")
    assert (result.code, result.out, result.err) == (0, "deleted member 2; pane closed\n", "")
    assert alice["pane_id"] not in panes(fleet.server)
    record = fleet.cafleet("member", "show", "2", "--json").json()
    assert (record["status"], record["placement"]) == ("deregistered", None)
    assert record["deregistered_at"] is not None
    for sent in (to_alice, from_alice):
        shown = fleet.cafleet("message", "show", str(sent["message_id"]), "--json").json()
        assert shown == {k: v for k, v in sent.items() if k != "notified"}
    assert [r["message_id"] for r in fleet.cafleet("message", "poll", "1", "--json").json()] == [
        from_alice["message_id"]
    ]

    again = fleet.cafleet("member", "delete", "2")
    assert (again.code, again.err) == (
        1,
        f"Error: member 2 is already deregistered (at {record['deregistered_at']}).\n",
    )
    refused = fleet.send(fleet.director, 2, "are you there?")
    assert (refused.code, refused.err) == (
        1,
        "Error: recipient member 2 is deregistered; it can no longer send or receive messages.\n",
    )


def test_delete_of_a_member_whose_pane_is_already_gone(fleet):
    bob = fleet.create("bob")
    fleet.server.run("kill-pane", "-t", bob["pane_id"])
    result = fleet.cafleet("member", "delete", str(bob["member_id"]), "--json")
    assert (result.code, result.err) == (0, "")
    assert result.json() == {"member_id": bob["member_id"], "pane_status": "already gone"}
    assert fleet.member_count("active") == 1


def test_delete_of_a_pending_member_touches_no_pane(fleet):
    placement = director_placement(fleet)
    store = open_store(fleet.db)
    try:
        pending = members.register_member(
            store,
            fleet_id=fleet.fleet_id,
            name="pending",
            description="still starting",
            backend="tmux",
            session=placement["session"],
            window_id=placement["window_id"],
            coding_agent="standin",
        )
    finally:
        store.close()
    before = panes(fleet.server)
    result = fleet.cafleet("member", "delete", str(pending))
    assert (result.code, result.out, result.err) == (0, f"deleted member {pending}; pane none\n", "")
    assert panes(fleet.server) == before
    assert fleet.query("SELECT status FROM members WHERE member_id = ?", pending) == [("deregistered",)]


def test_the_root_director_cannot_be_deleted(fleet):
    result = fleet.cafleet("member", "delete", str(fleet.director))
    assert (result.code, result.out) == (1, "")
    assert result.err == (
        f"Error: member {fleet.director} is the root Director of fleet {fleet.fleet_id}; "
        f"use `cafleet fleet delete {fleet.fleet_id}`.\n"
    )
    assert fleet.query("SELECT status FROM members WHERE member_id = ?", fleet.director) == [("active",)]
    assert fleet.director_pane in panes(fleet.server)


def test_fleet_delete_closes_member_panes_but_never_the_directors(fleet):
    alice, bob = fleet.create("alice"), fleet.create("bob")
    sent = fleet.send(fleet.director, alice["member_id"], "hello", "--json").json()
    recorder_pid = panes(fleet.server)[fleet.director_pane]["pid"]

    result = fleet.cafleet("fleet", "delete", str(fleet.fleet_id))
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        f"deleted fleet {fleet.fleet_id}; deregistered 3 member(s)\n"
        f"member {alice['member_id']}: pane closed\nmember {bob['member_id']}: pane closed\n"
    )
    assert set(panes(fleet.server)) == {fleet.director_pane}
    assert panes(fleet.server)[fleet.director_pane]["pid"] == recorder_pid
    os.kill(recorder_pid, 0)  # the Director's program still runs
    assert fleet.member_count("active") == 0
    assert fleet.cafleet("message", "show", str(sent["message_id"]), "--json").json()["text"] == "hello"
    again = fleet.cafleet("fleet", "delete", str(fleet.fleet_id), "--json")
    assert (again.code, again.json()) == (0, {"fleet_id": fleet.fleet_id, "deregistered_count": 0, "panes": []})


def test_fleet_delete_leaves_a_pane_whose_lock_is_held_alone_and_says_so(fleet):
    """A pane somebody is typing into is not closed under them: it stays, and the output
    says which one and why; the registry change still happens. (The lock is the flock
    file on SQLite, the advisory lock on PostgreSQL, held here by the test's own process.)"""

    alice, bob = fleet.create("alice"), fleet.create("bob")
    session = director_placement(fleet)["session"]
    environ = dict(fleet.environ, CAFLEET_LOCK_TIMEOUT="0.3")
    locks = lock_space(fleet.db)
    with pane_lock(locks, "tmux", session, alice["pane_id"], 5):
        result = fleet.cafleet("fleet", "delete", str(fleet.fleet_id), environ=environ)
        assert alice["pane_id"] in panes(fleet.server)  # still there while the holder works
    assert (result.code, result.err) == (0, "")
    assert result.out == (
        f"deleted fleet {fleet.fleet_id}; deregistered 3 member(s)\n"
        f"member {alice['member_id']}: pane not closed (its pane-input lock is held by another cafleet process; "
        f"close pane {alice['pane_id']} by hand when it is free)\n"
        f"member {bob['member_id']}: pane closed\n"
    )
    assert set(panes(fleet.server)) == {fleet.director_pane, alice["pane_id"]}
    assert fleet.member_count("active") == 0
    if not fleet.db.startswith(("postgresql:", "postgres:")):
        assert os.path.exists(locks.pane_path("tmux", session, alice["pane_id"]))  # lock files are never deleted
    with pane_lock(locks, "tmux", session, alice["pane_id"], 0):
        pass  # free again at once (timeout 0: one try) once its holder let go


def test_a_member_created_while_fleet_delete_runs_leaves_no_orphan_pane(fleet, tmp_path):
    """fleet delete has listed the fleet's panes and waits for one of their locks; a member
    created meanwhile is deregistered by the same delete, so its pane must be closed too."""
    from tests.support.pane_fleet import start
    from tests.support.tmux_fixtures import wait_for

    alice = fleet.create("alice")
    session = director_placement(fleet)["session"]
    locks = lock_space(fleet.db)
    # Each try that finds a pane-input lock held is counted here (cafleet.faults): only
    # alice's is held, so a count means fleet delete has listed the panes and is waiting.
    trace = tmp_path / "delete-trace.txt"
    with pane_lock(locks, "tmux", session, alice["pane_id"], 5):
        deleting = start(
            ["fleet", "delete", str(fleet.fleet_id)],
            dict(fleet.environ, CAFLEET_LOCK_TIMEOUT="60", CAFLEET_TEST_TRACE=str(trace)),
        )
        try:
            wait_for(
                lambda: trace.exists() and "lock.busy" in trace.read_text(encoding="utf-8").split(),
                timeout=30,
                what="fleet delete waiting for alice's pane lock",
            )
            carol = fleet.create("carol")
            assert carol["pane_id"] in panes(fleet.server)
        except BaseException:
            deleting.kill()
            raise
    out, err = deleting.communicate(timeout=60)
    assert (deleting.returncode, err) == (0, b""), (out, err)
    assert out.decode() == (
        f"deleted fleet {fleet.fleet_id}; deregistered 3 member(s)\n"
        f"member {alice['member_id']}: pane closed\nmember {carol['member_id']}: pane closed\n"
    )
    assert set(panes(fleet.server)) == {fleet.director_pane}
    assert fleet.member_count("active") == 0
