"""A stored message is never reported as a failure: every fault of the delivery path after
the commit (the lock folder, the lock file, the multiplexer client) becomes the ordinary
not-notified warning, exit 0, with the id printed, for `message send` (text and --json),
`message broadcast`, `message wait`'s retry step and the WebUI's POST /api/messages.

The members here have a concrete pane on a socket that does not exist: the drain takes
the pane-input lock before any multiplexer call, so a broken lock folder is reached
without a tmux server; the multiplexer fault is a PATH whose `tmux` cannot be executed.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import os
from pathlib import Path

import pytest

from cafleet.broker import messages
from cafleet.store.engines import lock_space

SESSION = "$0@/nonexistent/socket"  # the placement FleetBuilder records


def warning(message_id: int, member_id: int, reason: str) -> str:
    return (
        f"Warning: message {message_id} is stored but member {member_id} was not notified: {reason}. "
        # the keeper is off in tests, and the test's only fleet is fleet 1
        "The fleet keeper is off (CAFLEET_KEEPER=off; `cafleet fleet watch 1` does its work while it runs). "
        f"The preview will be retried by the next send to member {member_id} or a later "
        "`cafleet message wait`. Do not resend.\n"
    )


@pytest.fixture
def paned(build):
    """A fleet whose two members each have a concrete (unreachable) pane: %5 and %6."""
    fleet_id, director, _ = build.fleet(members_count=0)
    return director, build.member(fleet_id, "p1", pane_id="%5"), build.member(fleet_id, "p2", pane_id="%6")


def lock_folder(db_path: str) -> str:
    return lock_space(db_path).folder


def block_lock_folder(db_path: str) -> str:
    """A regular file where the lock folder should be."""
    folder = lock_folder(db_path)
    with open(folder, "w") as handle:
        handle.write("not a folder\n")
    return folder


def folder_under_a_file(db_path: str, tmp_path) -> str:
    """The lock folder is a symlink to a path below a regular file (ENOTDIR below it)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file\n")
    os.symlink(blocker / "locks", lock_folder(db_path))
    return lock_folder(db_path)


def block_lock_file(db_path: str, pane_id: str) -> str:
    """A folder where one pane's lock file should be."""
    path = Path(lock_space(db_path).pane_path("tmux", SESSION, pane_id))
    path.mkdir(parents=True)
    return str(path)


def stored_ids(store) -> list[tuple[int, object]]:
    return store.execute("SELECT message_id, notified_at FROM messages ORDER BY message_id").fetchall()


# --- message send ------------------------------------------------------------------------------


@pytest.mark.stores("sqlite")  # it breaks the lock file; an advisory lock has none
def test_send_with_the_lock_folder_a_file_is_stored_warned_and_exits_0(cli, db_path, paned, store):
    director, member, _ = paned
    folder = block_lock_folder(db_path)
    reason = (
        f"the pane-input lock for pane %5 cannot be taken ([Errno 17] File exists: {folder!r}); "
        f"{folder} must be a folder this user can write"
    )
    result = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(member), "task")
    assert (result.code, result.out, result.err) == (
        0,
        f"sent message 1 to member {member}\n",
        warning(1, member, reason),
    )
    as_json = cli(
        "message", "send", "--from-member-id", str(director), "--to-member-id", str(member), "again", "--json"
    )
    assert (as_json.code, as_json.err) == (0, warning(2, member, reason))
    record = as_json.json()
    assert (record["message_id"], record["text"], record["notified"]) == (2, "again", False)
    assert stored_ids(store) == [(1, None), (2, None)]  # stored, still owed


@pytest.mark.stores("sqlite")  # it breaks the lock file; an advisory lock has none
def test_send_with_the_lock_folder_below_a_file_is_stored_and_warned(cli, db_path, paned, store, tmp_path):
    director, member, _ = paned
    folder = folder_under_a_file(db_path, tmp_path)
    result = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(member), "task", "--json")
    assert result.code == 0
    assert result.json()["notified"] is False
    assert result.err.startswith(
        f"Warning: message 1 is stored but member {member} was not notified: "
        "the pane-input lock for pane %5 cannot be taken ("
    )
    assert f"{folder} must be a folder this user can write." in result.err
    assert stored_ids(store) == [(1, None)]


@pytest.mark.stores("sqlite")  # it breaks the lock file; an advisory lock has none
def test_send_with_the_lock_file_a_folder_is_stored_and_warned(cli, db_path, paned, store):
    director, member, _ = paned
    path = block_lock_file(db_path, "%5")
    result = cli("message", "send", "--from-member-id", str(director), "--to-member-id", str(member), "task")
    reason = (
        f"the pane-input lock for pane %5 cannot be taken ([Errno 21] Is a directory: {path!r}); "
        f"{lock_folder(db_path)} must be a folder this user can write"
    )
    assert (result.code, result.out, result.err) == (
        0,
        f"sent message 1 to member {member}\n",
        warning(1, member, reason),
    )
    assert stored_ids(store) == [(1, None)]


@pytest.fixture
def broken_tmux(env, tmp_path, monkeypatch):
    """A PATH whose only `tmux` cannot be executed (a folder: EACCES; a later working
    one would be found instead), for this process too: the in-process command's
    multiplexer client runs with this process's PATH."""
    bad = tmp_path / "bad-bin"
    (bad / "tmux").mkdir(parents=True)
    path = str(bad)
    monkeypatch.setenv("PATH", path)
    return dict(env, PATH=path)


def test_send_when_the_multiplexer_cannot_be_run_is_stored_and_warned(cli, paned, store, broken_tmux):
    director, member, _ = paned
    result = cli(
        "message", "send", "--from-member-id", str(director), "--to-member-id", str(member), "task", environ=broken_tmux
    )
    assert (result.code, result.out) == (0, f"sent message 1 to member {member}\n")
    assert result.err.startswith(
        f"Warning: message 1 is stored but member {member} was not notified: "
        "pane input failed with an operating-system error ([Errno 13] Permission denied"
    )
    assert "(pane %5)" in result.err and "internal error" not in result.err
    as_json = cli(
        "message",
        "send",
        "--from-member-id",
        str(director),
        "--to-member-id",
        str(member),
        "again",
        "--json",
        environ=broken_tmux,
    )
    assert (as_json.code, as_json.json()["notified"]) == (0, False)
    assert stored_ids(store) == [(1, None), (2, None)]


# --- message broadcast -------------------------------------------------------------------------


def test_broadcast_reports_every_id_and_each_failure(cli, db_path, paned, build, store, store_kind):
    director, first, second = paned
    fleet_id = messages.member_standing(store, director)[1]
    third = build.member(fleet_id, "pending")  # no pane: nothing to type, nothing to fail
    if store_kind == "sqlite":  # a broken lock file; an advisory lock has none (the panes are unreachable anyway)
        block_lock_file(db_path, "%5")
        block_lock_file(db_path, "%6")
    result = cli("message", "broadcast", "--from-member-id", str(director), "all hands")
    assert result.code == 0
    assert result.out == "".join(f"sent message {i} to member {m}\n" for i, m in ((1, first), (2, second), (3, third)))
    lines = result.err.splitlines()
    assert [line.split(" was not notified: ")[0] for line in lines] == [
        f"Warning: message 1 is stored but member {first}",
        f"Warning: message 2 is stored but member {second}",
    ]
    assert all("internal error" not in line for line in lines)
    assert stored_ids(store) == [(1, None), (2, None), (3, None)]

    as_json = cli("message", "broadcast", "--from-member-id", str(director), "again", "--json")
    assert as_json.code == 0
    assert [r["message_id"] for r in as_json.json()["sent"]] == [4, 5, 6]
    assert len(as_json.err.splitlines()) == 2


# --- message wait ------------------------------------------------------------------------------


@pytest.mark.stores("sqlite")  # it breaks the lock file; an advisory lock has none
def test_wait_retry_step_reports_a_broken_lock_and_still_waits(cli, db_path, paned, store):
    director, first, second = paned
    messages.send(store, director, first, "owed to p1")  # owed a preview; the lock cannot be had
    folder = block_lock_folder(db_path)
    reason = (
        f"the pane-input lock for pane %5 cannot be taken ([Errno 17] File exists: {folder!r}); "
        f"{folder} must be a folder this user can write"
    )
    waited = cli("message", "wait", str(second), "--timeout", "0")
    assert (waited.code, waited.out) == (3, "")
    assert waited.err == warning(1, first, reason)  # the id, like a send's line
    own = cli("message", "wait", str(first), "--timeout", "0", "--json")
    assert own.code == 0
    assert [r["text"] for r in own.json()] == ["owed to p1"]


def test_wait_retry_step_survives_a_multiplexer_that_cannot_run(cli, paned, store, broken_tmux):
    director, first, second = paned
    messages.send(store, director, first, "owed to p1")
    messages.send(store, director, second, "for p2")
    waited = cli("message", "wait", str(second), "--timeout", "0", "--json", environ=broken_tmux)
    assert waited.code == 0
    assert [r["text"] for r in waited.json()] == ["for p2"]
    assert "operating-system error" in waited.err and "internal error" not in waited.err


# --- the WebUI -----------------------------------------------------------------------------------


@pytest.mark.stores("sqlite")  # it breaks the lock file; an advisory lock has none
def test_webui_send_with_a_broken_lock_answers_201_with_the_stored_id(db_path, env, paned, store):
    from tests.support.web_server import make_app, web_client

    director, member, _ = paned
    folder = block_lock_folder(db_path)
    with web_client(make_app(db_path, env), raise_server_exceptions=False) as client:
        response = client.post(
            "/api/messages", json={"from_member_id": director, "to_member_id": member, "text": "from the dashboard"}
        )
    assert response.status_code == 201
    body = response.json()
    assert (body["message_id"], body["text"], body["notified"]) == (1, "from the dashboard", False)
    reason = (
        f"the pane-input lock for pane %5 cannot be taken ([Errno 17] File exists: {folder!r}); "
        f"{folder} must be a folder this user can write"
    )
    assert body["warning"] + "\n" == warning(1, member, reason)
    assert stored_ids(store) == [(1, None)]
