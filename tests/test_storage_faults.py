"""Storage faults tell the truth: a full disk, a read-only folder, a damaged page, a file
replaced under a running command, and refused files that keep every byte of their side
files. Each fault is real: SQLite's own page limit, a small tmpfs, a damaged page written
into a real file, a writer that really stopped mid-transaction."""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import subprocess
import sys
import uuid

import pytest

from cafleet.cli.context import Context
from cafleet.cli.main import main
from cafleet.store import schema
from cafleet.store.engines import open_store
from tests.conftest import FleetBuilder, Result

SIDES = ("", "-wal", "-shm", "-journal")


def snapshot(path) -> dict:
    """SHA-256 of the file and of each side file that exists."""
    found = {}
    for side in SIDES:
        name = str(path) + side
        if os.path.exists(name):
            with open(name, "rb") as handle:
                found[side] = hashlib.sha256(handle.read()).hexdigest()
    return found


def one_line_error(result: Result, fragment: str) -> None:
    assert result.code == 1, result
    assert result.err.startswith("Error: ") and result.err.count("\n") == 1, result.err
    assert fragment in result.err, result.err
    assert "internal error" not in result.err and "cannot rollback" not in result.err, result.err


def run_with_store(env, store, *args) -> Result:
    """A command run in-process on an already open store (so a per-connection limit such
    as ``max_page_count`` applies to the command's own connection)."""
    out, err = io.BytesIO(), io.BytesIO()
    ctx = Context(environ=dict(env), stdin=io.BytesIO(b""), stdout=out, stderr=err)
    ctx._store = store
    code = main(list(args), ctx)
    return Result(code, out.getvalue(), err.getvalue())


def python_cli(environ, *args, timeout=60) -> Result:
    done = subprocess.run([sys.executable, "-m", "cafleet", *args], env=environ, capture_output=True, timeout=timeout)
    return Result(done.returncode, done.stdout, done.stderr)


# --- a full disk ------------------------------------------------------------------------


def test_disk_full_during_send_is_one_clear_line(env, db_path):
    """SQLite's page limit makes SQLITE_FULL happen for real inside the send's transaction."""
    setup = open_store(db_path)
    _fleet_id, _director, (m1, m2) = FleetBuilder(setup).fleet()
    setup.close()
    printed = []
    failure = None
    for _ in range(400):
        store = open_store(db_path)
        pages = store.conn.execute("PRAGMA page_count").fetchone()[0]
        store.conn.execute(f"PRAGMA max_page_count={pages}")
        result = run_with_store(
            env, store, "message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "x" * 190, "--json"
        )
        if result.code == 0:
            printed.append(result.json()["message_id"])
            continue
        failure = result
        break
    assert failure is not None, "the page limit never filled"
    one_line_error(failure, "disk full")
    assert failure.out == ""
    check = open_store(db_path)
    stored = [row[0] for row in check.execute("SELECT message_id FROM messages ORDER BY message_id")]
    assert stored == printed  # every printed id is stored, the failed send stored nothing
    check.close()


def mount_tmpfs(folder, size: str) -> None:
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"this machine does not permit mounting a tmpfs here: {done.stderr.strip()}")


@pytest.fixture
def small_fs(tmp_path):
    """A real 2 MiB file system (tmpfs), unmounted at teardown."""
    folder = tmp_path / "small"
    folder.mkdir()
    mount_tmpfs(folder, "2m")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder) -> None:
    """Write a filler file until the file system refuses another byte."""
    fd = os.open(os.path.join(folder, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (65536, 4096, 512, 1):
            try:
                while os.write(fd, b"\0" * size) > 0:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)


def test_disk_full_at_commit_on_a_real_full_file_system(env, small_fs):
    path = small_fs / "cafleet.db"
    environ = dict(env, CAFLEET_DATABASE_URL=str(path))
    setup = open_store(str(path))
    _fleet_id, _director, (m1, m2) = FleetBuilder(setup).fleet()
    setup.close()
    fill(small_fs)
    results = [
        python_cli(
            environ, "message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), f"note {i}", "--json"
        )
        for i in range(3)
    ]
    printed = [r.json()["message_id"] for r in results if r.code == 0]
    failed = [r for r in results if r.code != 0]
    assert failed, results
    for result in failed:
        one_line_error(result, "disk full")
    os.remove(small_fs / "filler")
    check = open_store(str(path))
    assert [r[0] for r in check.execute("SELECT message_id FROM messages ORDER BY message_id")] == printed
    check.close()


def test_cold_open_on_a_full_disk_says_disk_full(env, small_fs):
    path = small_fs / "cafleet.db"
    environ = dict(env, CAFLEET_DATABASE_URL=str(path))
    setup = open_store(str(path))
    FleetBuilder(setup).fleet()
    setup.close()
    assert not os.path.exists(str(path) + "-wal")  # cold: the last connection cleaned up
    fill(small_fs)
    before = snapshot(path)
    result = python_cli(environ, "message", "send", "--from-member-id", "2", "--to-member-id", "3", "hello")
    one_line_error(result, "disk full")
    assert "ledger" not in result.err
    doctor = python_cli(environ, "doctor", "--json")
    section = __import__("json").loads(doctor.out)["database"]
    assert section["ok"] is False and "disk full" in section["error"]
    assert "move" not in section["fix"] or "do not move" in section["fix"]
    assert snapshot(path)[""] == before[""]


def test_read_only_folder_on_a_cold_open_says_so(env, small_fs):
    path = small_fs / "cafleet.db"
    environ = dict(env, CAFLEET_DATABASE_URL=str(path))
    setup = open_store(str(path))
    FleetBuilder(setup).fleet()
    setup.close()
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    result = python_cli(environ, "message", "send", "--from-member-id", "2", "--to-member-id", "3", "hello")
    one_line_error(result, "read-only")
    assert "ledger" not in result.err
    doctor = python_cli(environ, "doctor", "--json")
    section = __import__("json").loads(doctor.out)["database"]
    assert section["ok"] is False and "read-only" in section["error"]
    assert "do not move" in section["fix"]


# --- a damaged page -----------------------------------------------------------------------


def damage_table(path: str, table: str) -> None:
    """Overwrite the root page of ``table`` (the file is checkpointed and closed first)."""
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    root, size = conn.execute(
        "SELECT rootpage, (SELECT page_size FROM pragma_page_size) FROM sqlite_master WHERE name = ?", (table,)
    ).fetchone()
    conn.close()
    with open(path, "r+b") as handle:
        handle.seek((root - 1) * size)
        handle.write(b"\xa5" * size)


def test_damaged_page_is_a_clear_error(cli, env, db_path):
    store = open_store(db_path)
    fleet_id, _director, (m1, m2) = FleetBuilder(store).fleet()
    for i in range(3):
        cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), f"m{i}")
    store.close()
    damage_table(db_path, "messages")
    for args in (("message", "poll", str(m2)), ("message", "show", "1"), ("member", "list", str(fleet_id))):
        result = cli(*args)
        one_line_error(result, "is damaged (database disk image is malformed)")


def test_damaged_page_is_a_503_in_the_webui(env, db_path):
    pytest.importorskip("starlette")
    from tests.support.web_server import make_app, web_client

    store = open_store(db_path)
    _fleet_id, _director, (m1, m2) = FleetBuilder(store).fleet()
    from cafleet.broker import messages

    messages.send(store, m1, m2, "hello")
    store.close()
    damage_table(db_path, "messages")
    with web_client(make_app(db_path, env), raise_server_exceptions=False) as client:
        response = client.get(f"/api/members/{m2}/inbox")
    assert response.status_code == 503, response.text
    assert "is damaged (database disk image is malformed)" in response.json()["error"]


# --- the file replaced under a running command ---------------------------------------------


def test_file_replaced_detects_deletion_and_replacement(tmp_path):
    path = str(tmp_path / "x.db")
    store = open_store(path)
    assert not store.file_replaced()
    store.check_file()
    os.rename(path, path + ".moved")
    assert store.file_replaced()
    other = open_store(path)  # a new file at the same path
    assert store.file_replaced() and not other.file_replaced()
    with pytest.raises(Exception, match="was replaced by another file"):
        store.check_file()
    os.remove(path)
    with pytest.raises(Exception, match="was deleted"):
        store.check_file()
    store.close()
    other.close()


# --- refused files keep their side files byte for byte ---------------------------------------


CRASHED_WAL_WRITER = r"""
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
conn.execute(sys.argv[2])
os._exit(0)  # a writer that dies: its commit lives only in the -wal, beside its -shm
"""


@pytest.mark.parametrize(
    "damage, refusal",
    [
        ("INSERT INTO refinery_schema_history VALUES (2, 'future', 'x', 'y')", "newer than this cafleet"),
        ("DROP TABLE asset_installs", "table asset_installs is missing"),
    ],
)
def test_refused_file_beside_a_crashed_writers_wal_stays_byte_identical(cli, env, tmp_path, damage, refusal):
    path = tmp_path / "crashed.db"
    open_store(str(path)).close()
    subprocess.run([sys.executable, "-c", CRASHED_WAL_WRITER, str(path), damage], check=True)
    before = snapshot(path)
    assert set(before) == {"", "-wal", "-shm"}
    result = cli("message", "poll", "1", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    one_line_error(result, refusal)
    assert snapshot(path) == before
    doctor = cli("doctor", "--json", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    assert refusal in doctor.json()["database"]["error"]
    assert snapshot(path) == before


def test_refused_file_with_a_wal_but_no_shm_gains_a_shm_and_nothing_else(cli, env, tmp_path):
    """The one side file a refusal can add: a -wal without its -shm (a writer crashed,
    then the index was removed) cannot be read without an index, so SQLite builds a -shm.
    The file and the -wal keep every byte; no -journal appears (docs/storage.md)."""
    path = tmp_path / "crashed.db"
    open_store(str(path)).close()
    damage = "INSERT INTO refinery_schema_history VALUES (2, 'future', 'x', 'y')"
    subprocess.run([sys.executable, "-c", CRASHED_WAL_WRITER, str(path), damage], check=True)
    os.remove(str(path) + "-shm")
    before = snapshot(path)
    assert set(before) == {"", "-wal"}
    result = cli("message", "poll", "1", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    one_line_error(result, "newer than this cafleet")
    after = snapshot(path)
    assert set(after) == {"", "-wal", "-shm"}
    assert {side: after[side] for side in before} == before


HOT_JOURNAL_WRITER = r"""
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA journal_mode=DELETE")
conn.execute("PRAGMA cache_size=2")
conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO refinery_schema_history VALUES (2, 'future', 'x', 'y')")
conn.execute("CREATE TABLE bulk (b BLOB)")
conn.execute("INSERT INTO bulk SELECT randomblob(3000) FROM (WITH RECURSIVE r(i) AS "
             "(SELECT 1 UNION ALL SELECT i + 1 FROM r WHERE i < 60) SELECT i FROM r)")
os._exit(0)  # dies mid-transaction: the pages it spilled are in the file, the originals in -journal
"""


def test_hot_journal_is_refused_and_left_alone(cli, env, tmp_path):
    path = tmp_path / "hot.db"
    open_store(str(path)).close()
    subprocess.run([sys.executable, "-c", HOT_JOURNAL_WRITER, str(path)], check=True)
    before = snapshot(path)
    assert set(before) == {"", "-journal"}
    result = cli("message", "poll", "1", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    one_line_error(result, "has a hot journal")
    assert snapshot(path) == before


def test_refused_zero_identity_wal_file_leaves_no_side_files(cli, env, tmp_path):
    path = tmp_path / "foreign.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE things (x)")
    conn.commit()
    conn.close()
    before = snapshot(path)
    assert set(before) == {""}
    result = cli("message", "poll", "1", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    one_line_error(result, "is not a cafleet database (populated")
    assert snapshot(path) == before


# --- database URLs ------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["sqlite:///relative-{tag}.db", "sqlite:///~/cafleet-{tag}.db"])
def test_relative_sqlite_urls_are_refused(cli, env, url):
    url = url.format(tag=uuid.uuid4().hex[:8])
    name = url[len("sqlite:///") :]
    result = cli("fleet", "list", environ=dict(env, CAFLEET_DATABASE_URL=url))
    one_line_error(result, "names a relative path")
    assert not os.path.exists("/" + name) and not os.path.exists("/" + name.lstrip("~/"))


# --- the auxiliary pending index ----------------------------------------------------------


AUX = "idx_cafleet_aux_messages_pending"


def drop_aux(path) -> None:
    conn = sqlite3.connect(path)
    conn.execute(f"DROP INDEX {AUX}")
    conn.commit()
    conn.close()


def test_file_without_the_auxiliary_index_works_and_setup_adds_it(cli, env, db_path):
    store = open_store(db_path)
    _fleet_id, _director, (m1, m2) = FleetBuilder(store).fleet()
    store.close()
    drop_aux(db_path)
    sent = cli("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "hi", "--json")
    assert sent.code == 0, sent
    polled = cli("message", "poll", str(m2), "--json")
    assert [m["message_id"] for m in polled.json()] == [sent.json()["message_id"]]
    doctor = cli("doctor", "--json").json()["database"]
    assert doctor["ok"] is True and doctor["auxiliary_indexes"] == {AUX: "missing"}
    assert "cafleet setup" in doctor["advice"]
    text = cli("doctor").out
    assert f"! index {AUX} is missing" in text and "cafleet setup" in text
    setup = cli("setup", "--json", environ=dict(env, CAFLEET_AGENT_PREFIX=env.get("CAFLEET_AGENT_PREFIX", "")))
    assert setup.code == 0, setup
    # every auxiliary index: the pending one, and those that come with the tables setup made
    assert setup.json()["database"]["indexes_added"] == [index.name for index in schema.DECLARED_AUX_INDEXES]
    conn = sqlite3.connect(db_path)
    assert conn.execute("SELECT version FROM refinery_schema_history").fetchall() == [(1,)]
    conn.close()
    assert cli("doctor", "--json").json()["database"]["auxiliary_indexes"] == {}


def test_fast_diagnosis_accepts_a_file_with_the_auxiliary_index(db_path, monkeypatch):
    from cafleet.store import diagnosis

    open_store(db_path).close()

    def slow_path(*args):
        raise AssertionError("the fast path fell back to the detailed diagnosis")

    monkeypatch.setattr(diagnosis, "check_ledger", slow_path)
    open_store(db_path).close()


def test_the_partial_index_never_stands_in_for_the_required_one(cli, env, tmp_path):
    """A file that kept the auxiliary index but lost the required recipient index is
    refused: the detailed diagnosis does not take a partial index for the required one."""
    path = tmp_path / "lost.db"
    open_store(str(path)).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX idx_messages_to_member_status_ts")
    conn.commit()
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()
    result = cli("message", "poll", "1", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))
    one_line_error(result, "index idx_messages_to_member_status_ts")


def test_activity_walk_is_bounded_with_equal_timestamps(store, build, monkeypatch):
    """Sent messages sharing one status_timestamp (a bulk import) cost one step, and the
    walk stays bounded; the answer is still the newest send."""
    from cafleet.broker import activity
    from cafleet.store import sqlite

    _fleet_id, _director, (m1, m2) = build.fleet()
    same = "2025-03-01T00:00:00.000000+00:00"
    rows = [(m1, m2, f"2025-02-01T00:00:{i % 60:02d}.000000+00:00", "completed", same, f"t{i}") for i in range(3000)]
    rows += [
        (
            m1,
            m2,
            "2025-01-01T00:00:00.000000+00:00",
            "completed",
            f"2025-01-{2 + i % 27:02d}T00:00:00.000000+00:00",
            f"o{i}",
        )
        for i in range(300)
    ]
    with store.write():
        store.conn.executemany(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
    calls = []
    original = sqlite.SqliteStore.execute

    def counting(self, sql, params=()):
        calls.append(sql)
        return original(self, sql, params)

    monkeypatch.setattr(sqlite.SqliteStore, "execute", counting)
    steps = []  # SQLite virtual-machine work, in units of 100 instructions: counts rows read
    store.conn.set_progress_handler(lambda: steps.append(1), 100)
    assert activity.last_activity(store, m1) == "2025-02-01T00:00:59.000000+00:00"
    store.conn.set_progress_handler(None, 0)
    assert len(steps) < 30, len(steps)  # walking the 3,000 equal rows costs several hundred
    assert len(calls) <= 3
    # many distinct ACK instants after the last send: the walk stops at its bound
    with store.write():
        store.conn.executemany(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text)"
            " VALUES (?, ?, ?, 'completed', ?, 'x')",
            [
                (m2, m1, "2024-01-01T00:00:00.000000+00:00", f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}.000000+00:00")
                for i in range(500)
            ],
        )
    calls.clear()
    activity.last_activity(store, m2)
    assert len(calls) <= activity.WALK_LIMIT + 2


# --- the writers' queue ---------------------------------------------------------------------


QUEUE_HOLDER = r"""
import fcntl, os, sys, time
fd = os.open(sys.argv[1] + "-writers.lock", os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(60)
"""


def test_writers_queue_is_bounded_and_freed_by_a_dying_holder(cli, env, db_path):
    store = open_store(db_path)
    _fleet_id, _director, (m1, m2) = FleetBuilder(store).fleet()
    store.close()
    holder = subprocess.Popen([sys.executable, "-c", QUEUE_HOLDER, db_path], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"held\n"
        args = ("message", "send", "--from-member-id", str(m1), "--to-member-id", str(m2), "queued")
        result = cli(*args, environ=dict(env, CAFLEET_BUSY_TIMEOUT="0.3"))
        assert result.code == 1
        assert result.err == f"Error: database {db_path} is locked by another process (waited 0.3 s); try again.\n"
    finally:
        holder.kill()  # SIGKILL: the OS releases its lock
        holder.wait()
    sent = cli(*args, "--json")
    assert sent.code == 0, sent
    check = open_store(db_path)
    assert [r[0] for r in check.execute("SELECT text FROM messages")] == ["queued"]
    check.close()


def test_writers_queue_serialises_concurrent_writers(env, db_path):
    """Eight processes send at once through the queue: every send succeeds and is stored
    exactly once, none reports a locked database."""
    store = open_store(db_path)
    _fleet_id, _director, (m1, m2) = FleetBuilder(store).fleet()
    store.close()
    script = (
        "import sys\nfrom cafleet.store.engines import open_store\nfrom cafleet.broker import messages\n"
        "s = open_store(sys.argv[1])\n"
        "for i in range(20):\n    messages.send(s, int(sys.argv[2]), int(sys.argv[3]), f'{sys.argv[4]}-{i}')\n"
        "s.close()\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, db_path, str(m1), str(m2), f"w{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(8)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outputs
    check = open_store(db_path)
    texts = sorted(r[0] for r in check.execute("SELECT text FROM messages"))
    check.close()
    assert texts == sorted(f"w{n}-{i}" for n in range(8) for i in range(20))
