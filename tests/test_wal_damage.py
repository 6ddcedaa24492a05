"""A damaged write-ahead log never loses messages silently (docs/storage.md, "A damaged
write-ahead log").

The log is real: a process writes a fleet, a member and a few messages through cafleet
with automatic checkpoints off and is killed with SIGKILL, so every write of it lives only
in the ``-wal`` beside its ``-shm``. Each test works on a copy of those three files, with
one byte changed where the test says, and checks what cafleet says, what it reads and that
a refused file and its side files keep every byte.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from cafleet.store import wal

SIDES = ("", "-wal", "-shm", "-journal", "-writers.lock")
HEADER, FRAME_HEADER = 32, 24

WRITER = r"""
import sys, time
from cafleet.broker import fleets, members, messages
from cafleet.store.engines import open_store

store = open_store(sys.argv[1])
store.conn.execute("PRAGMA wal_autocheckpoint=0")  # every write stays in the -wal
fleet = fleets.create_fleet(store, name="crashed", coding_agent="claude", backend="tmux",
                            session="$0@/nonexistent/socket", window_id="@0", pane_id="%0")
member = members.register_member(store, fleet_id=fleet["fleet_id"], name="m1", description="worker",
                                 backend="tmux", session="$0@/nonexistent/socket", window_id="@0",
                                 coding_agent="claude")
ids = [messages.send(store, fleet["director_member_id"], member, f"message {i}")["message_id"] for i in range(4)]
if sys.argv[2] == "restarted":  # a checkpoint, then one more send: the log starts again at its first frame
    store.conn.execute("PRAGMA wal_checkpoint").fetchone()
    ids.append(messages.send(store, fleet["director_member_id"], member, "after the checkpoint")["message_id"])
print(member, *ids, flush=True)
time.sleep(600)  # killed here, before any (further) checkpoint
"""


def killed_writer(folder: Path, mode: str) -> dict:
    """The files a killed cafleet writer left: ``{"files": {side: bytes}, "member", "ids"}``."""
    path = folder / "cafleet.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), mode], stdout=subprocess.PIPE)
    try:
        line = proc.stdout.readline().split()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and line, "the writer did not get to its writes"
    files = {side: Path(str(path) + side).read_bytes() for side in ("", "-wal", "-shm")}
    assert len(files["-wal"]) > HEADER
    return {"files": files, "member": int(line[0]), "ids": [int(i) for i in line[1:]]}


@pytest.fixture(scope="module")
def crashed(tmp_path_factory) -> dict:
    """Every write of the killed process is in the -wal, one generation of frames."""
    return killed_writer(tmp_path_factory.mktemp("crashed"), "plain")


@pytest.fixture(scope="module")
def restarted(tmp_path_factory) -> dict:
    """A log restarted after a checkpoint: the last send's frames (new salts) at its start,
    then what is left of the older generation, all of it already in the database file."""
    return killed_writer(tmp_path_factory.mktemp("restarted"), "restarted")


def page_size(log: bytes) -> int:
    return int.from_bytes(log[8:12], "big")


def frames(log: bytes) -> int:
    return (len(log) - HEADER) // (FRAME_HEADER + page_size(log))


def frame_offset(log: bytes, number: int) -> int:
    return HEADER + (number - 1) * (FRAME_HEADER + page_size(log))


def flipped(data: bytes, offset: int) -> bytes:
    changed = bytearray(data)
    changed[offset] ^= 0x10
    return bytes(changed)


def place(folder: Path, files: dict) -> Path:
    """Write the three files (and nothing else) into ``folder``; return the database path."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "cafleet.db"
    for side in SIDES:
        Path(str(path) + side).unlink(missing_ok=True)
    for side, data in files.items():
        Path(str(path) + side).write_bytes(data)
    return path


def snapshot(path: Path) -> dict:
    return {
        side: hashlib.sha256(Path(str(path) + side).read_bytes()).hexdigest()
        for side in SIDES
        if os.path.exists(str(path) + side)
    }


def poll(cli, env, path: Path, member: int):
    return cli("message", "poll", str(member), "--json", environ=dict(env, CAFLEET_DATABASE_URL=str(path)))


def assert_refused(result, path: Path, where: str) -> None:
    assert result.code == 1, result
    assert result.out == ""
    assert result.err.startswith("Error: ") and result.err.count("\n") == 1, result.err
    assert f"database {path} cannot be opened safely" in result.err, result.err
    assert f"write-ahead log {path}-wal is damaged at {where}" in result.err, result.err
    assert "restore from a backup" in result.err


def with_checksums(log: bytes, big_endian: bool) -> bytes:
    """``log`` rewritten with the other magic and every checksum computed again in that
    order (written out here, one word pair at a time, as the file format describes it)."""

    def checksum(data: bytes, s0: int, s1: int) -> tuple[int, int]:
        order = "big" if big_endian else "little"
        for i in range(0, len(data), 8):
            s0 = (s0 + int.from_bytes(data[i : i + 4], order) + s1) & 0xFFFFFFFF
            s1 = (s1 + int.from_bytes(data[i + 4 : i + 8], order) + s0) & 0xFFFFFFFF
        return s0, s1

    out = bytearray(log)
    out[0:4] = (0x377F0683 if big_endian else 0x377F0682).to_bytes(4, "big")
    sums = checksum(bytes(out[:24]), 0, 0)
    out[24:32] = sums[0].to_bytes(4, "big") + sums[1].to_bytes(4, "big")
    size = page_size(log)
    for number in range(1, frames(log) + 1):
        at = frame_offset(log, number)
        sums = checksum(bytes(out[at : at + 8]) + bytes(out[at + FRAME_HEADER : at + FRAME_HEADER + size]), *sums)
        out[at + 16 : at + 24] = sums[0].to_bytes(4, "big") + sums[1].to_bytes(4, "big")
    return bytes(out)


# Where the changed byte sits in the frame, in turn: its page, then each field of its header.
FRAME_SPOTS = (FRAME_HEADER + 100, 2, 5, 9, 14, 17, 22, -1)


@pytest.mark.parametrize("byte_order", ["little-endian", "big-endian"])
def test_damage_in_any_frame_but_the_last_is_refused_and_every_byte_kept(cli, env, tmp_path, crashed, byte_order):
    """The issue's case (one byte of frame 15 of 30 changed: poll showed ids 1-3, exit 0,
    doctor said ✓ and the checkpoint made the loss permanent), at every frame: refused in
    one line, the three files unchanged and no file added; the last frame is the torn last
    frame of a crash and stays accepted, SQLite dropping only that last transaction."""
    files = dict(crashed["files"])
    files["-wal"] = with_checksums(files["-wal"], big_endian=byte_order == "big-endian")
    log, member, ids = files["-wal"], crashed["member"], crashed["ids"]
    count = frames(log)
    assert count >= 20
    healthy = poll(cli, env, place(tmp_path / "healthy", files), member)
    assert healthy.code == 0, healthy
    assert sorted(m["message_id"] for m in healthy.json()) == ids  # SQLite reads the rewritten log
    for number in range(1, count + 1):
        spot = FRAME_SPOTS[number % len(FRAME_SPOTS)]
        offset = frame_offset(log, number) + (spot if spot >= 0 else FRAME_HEADER + page_size(log) - 1)
        path = place(tmp_path / "damaged", {**files, "-wal": flipped(log, offset)})
        before = snapshot(path)
        result = poll(cli, env, path, member)
        if number < count:
            assert_refused(result, path, f"frame {number} of {count}")
            assert snapshot(path) == before, f"frame {number}: a refused file changed"
        else:
            assert result.code == 0, result
            assert sorted(m["message_id"] for m in result.json()) == ids[:-1]


def test_a_restarted_log_is_read_to_its_current_end_and_its_older_frames_never_count(cli, env, tmp_path, restarted):
    """After a checkpoint the log starts again at frame 1 with new salts, so an older
    generation's frames follow the current ones: not part of the log, damaged or not.
    Damage in the current frames before the last commit is refused."""
    files, member, ids = restarted["files"], restarted["member"], restarted["ids"]
    log = files["-wal"]
    salts = log[16:24]
    current = [
        n for n in range(1, frames(log) + 1) if log[frame_offset(log, n) + 8 : frame_offset(log, n) + 16] == salts
    ]
    assert current == list(range(1, len(current) + 1)) and len(current) < frames(log) - 10, current
    healthy = poll(cli, env, place(tmp_path / "healthy", files), member)
    assert sorted(m["message_id"] for m in healthy.json()) == ids
    for number in range(1, frames(log) + 1):
        path = place(tmp_path / "damaged", {**files, "-wal": flipped(log, frame_offset(log, number) + 100)})
        before = snapshot(path)
        result = poll(cli, env, path, member)
        if number < len(current):
            assert_refused(result, path, f"frame {number} of {frames(log)}")
            assert snapshot(path) == before
        else:  # the current last frame (a torn write), or an older generation's frame
            assert result.code == 0, (number, result)
            kept = ids[:-1] if number == len(current) else ids
            assert sorted(m["message_id"] for m in result.json()) == kept, number


@pytest.mark.parametrize("cut", ["inside the frame header", "inside the page"])
def test_an_honest_torn_last_frame_is_accepted(cli, env, tmp_path, crashed, cut):
    """A crash while the last frame was being written leaves it short, or with part of
    its page never written: SQLite ends the log before it and so does cafleet."""
    log, member, ids = crashed["files"]["-wal"], crashed["member"], crashed["ids"]
    last = frame_offset(log, frames(log))
    if cut == "inside the frame header":
        torn = log[: last + 10]
        kept = ids[:-1]  # the short frame is no frame at all: the last transaction has no commit
    else:
        middle = last + FRAME_HEADER + page_size(log) // 2
        torn = log[:middle] + bytes(len(log) - middle)
        kept = ids[:-1]
    result = poll(cli, env, place(tmp_path / "torn", {**crashed["files"], "-wal": torn}), member)
    assert result.code == 0, result
    assert sorted(m["message_id"] for m in result.json()) == kept


@pytest.mark.parametrize("offset", [3, 6, 10, 13, 17, 21, 26, 30])
def test_a_damaged_log_header_is_refused(cli, env, tmp_path, crashed, offset):
    """A header that fails its checksum makes SQLite ignore the whole log: every write of
    the killed process. The byte-order bit of the magic (offset 3), the version, the page
    size, the checkpoint sequence, either salt and either checksum."""
    files = crashed["files"]
    path = place(tmp_path / "header", {**files, "-wal": flipped(files["-wal"], offset)})
    before = snapshot(path)
    assert_refused(poll(cli, env, path, crashed["member"]), path, "its header")
    assert snapshot(path) == before


def test_doctor_reports_a_damaged_log(cli, env, tmp_path, crashed):
    files = crashed["files"]
    log = files["-wal"]
    path = place(tmp_path / "doctor", {**files, "-wal": flipped(log, frame_offset(log, 15) + 100)})
    before = snapshot(path)
    environ = dict(env, CAFLEET_DATABASE_URL=str(path))
    report = cli("doctor", "--json", environ=environ)
    assert report.code == 1
    database = report.json()["database"]
    assert database["ok"] is False
    assert f"damaged at frame 15 of {frames(log)}" in database["error"]
    assert "keep the database file and its -wal and -shm" in database["fix"]
    text = cli("doctor", environ=environ).out
    assert f"✗ database: database {path} cannot be opened safely" in text
    assert "fix: keep the database file and its -wal and -shm" in text
    assert snapshot(path) == before


HOLDER = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1])
conn.execute("SELECT count(*) FROM messages").fetchone()  # opens (and recovers) the log
print("open", flush=True)
time.sleep(600)
"""


def test_a_log_in_use_is_never_read(cli, env, tmp_path, crashed, monkeypatch):
    """A live database has a -wal too; while any connection (another process's, or this
    process's own) has it open, its index is live and nothing recovers it, so an open
    reads nothing of it. Only a log that nobody has open, as a killed process leaves it, is
    read, once: the command that read it checkpoints and removes it when it closes."""
    reads = []
    real = wal.find_loss
    monkeypatch.setattr(wal, "find_loss", lambda *args: reads.append(args) or real(*args))
    path = place(tmp_path / "live", crashed["files"])
    member, ids = crashed["member"], crashed["ids"]
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"open\n"
        assert wal.in_use(str(path))
        assert sorted(m["message_id"] for m in poll(cli, env, path, member).json()) == ids
        assert reads == []
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    assert os.path.getsize(str(path) + "-wal") > HEADER and not wal.in_use(str(path))

    from cafleet.store.engines import open_store

    own = open_store(str(path))  # this process's own connection: recovers the log, and was checked
    try:
        assert len(reads) == 1 and wal.in_use(str(path))
        assert sorted(m["message_id"] for m in poll(cli, env, path, member).json()) == ids
        assert len(reads) == 1
    finally:
        own.close()
    assert not os.path.exists(str(path) + "-wal")  # the last connection checkpointed and removed it


def test_a_damaged_log_reached_through_a_symlinked_path_is_refused(cli, env, tmp_path, crashed):
    """SQLite keeps the -wal beside the file a symlink points to; so does the check."""
    files = crashed["files"]
    log = files["-wal"]
    target = place(tmp_path / "target", {**files, "-wal": flipped(log, frame_offset(log, 15) + 100)})
    (tmp_path / "links").mkdir()
    link = tmp_path / "links" / "cafleet.db"
    link.symlink_to(target)
    before = snapshot(target)
    assert_refused(poll(cli, env, link, crashed["member"]), target, f"frame 15 of {frames(log)}")
    assert snapshot(target) == before
    assert sorted(os.listdir(tmp_path / "links")) == ["cafleet.db"]
