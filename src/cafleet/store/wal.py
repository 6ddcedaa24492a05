"""A write-ahead log that SQLite would cut short is refused before SQLite reads it.

When the last connection to a WAL database dies without a checkpoint (a killed process),
the next connection rebuilds the log's index from the ``-wal`` file: it reads the frames
in order and takes the first frame that fails its checks (the log's salts, a page number,
the cumulative checksum) as the end of the log. One damaged byte in frame 15 of 30 thus
silently drops every transaction committed in frames 15 to 30, and the next checkpoint
makes the loss permanent. :func:`check` looks at the log first, without SQLite: when a
frame fails and a later frame of the same log generation (same salts) is a valid commit,
opening the file would lose committed writes, so the file is refused and every byte of it
and of its side files stays as it was. A failing *last* frame (a crash in the middle of
writing it), frames of an earlier generation after the current one and uncommitted frames
after the damage lose nothing and are accepted, as SQLite accepts them.

The log format (https://www.sqlite.org/fileformat.html#the_write_ahead_log): a 32-byte
header (magic, version, page size, checkpoint sequence, salt-1, salt-2, checksum-1,
checksum-2), then frames of a 24-byte header (page number, database size after a commit
or 0, salt-1, salt-2, checksum-1, checksum-2) and one page. Every field is big-endian;
the checksum reads the data as 32-bit words in the order the magic names (``0x377f0682``
little-endian, ``0x377f0683`` big-endian) and continues from the previous frame's (the
first frame's from the header's), over the first 8 bytes of the frame header and the page.

Only a log about to be recovered is read: a ``-wal`` with frames that no connection has
open (no process holds its read lock on the ``-shm``'s dead-man-switch byte, which every
connection of SQLite's unix VFS holds while it uses the log). A live database, whose
connections keep a ``-wal`` too, costs one ``fcntl`` query, never a read of the log.
"""

from __future__ import annotations

import os
import sys

from cafleet.store.diagnosis import Refused

HEADER = 32
FRAME_HEADER = 24
MAGIC = 0x377F0682  # | 1: the checksums read big-endian words
_MASK = 0xFFFFFFFF
_DMS = 128  # the -shm byte SQLite's unix VFS read-locks for as long as a connection uses the log
_CHUNK = 256  # frames checksummed together (about 1 MB with 4 KiB pages)


class DamagedLog(Refused):
    """A ``-wal`` whose recovery would silently drop committed transactions. ``fix`` is
    the advice `cafleet doctor` prints."""

    fix = (
        "keep the database file and its -wal and -shm exactly as they are (copy all three before "
        "anything else) and restore from a backup; opening it with any SQLite program drops the "
        "writes after the damage for good"
    )


def check(path: str) -> None:
    """Raise :class:`DamagedLog` when recovering ``path``'s ``-wal`` would drop committed
    writes. Returns at once when there is no log with a frame, or when a connection (of any
    process, this one included) has the log open: then the log's index is live and nobody
    recovers it."""
    try:
        fd = os.open(path + "-wal", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return  # none, or unreadable: SQLite reports what it meets
    try:
        size = os.fstat(fd).st_size
        if size < HEADER + FRAME_HEADER + 512 or in_use(path):
            return
        header = os.pread(fd, HEADER, 0)
        found = find_loss(fd, size, header, _database_page_size(path))
        if found is None:
            return
        # A process that opened the file meanwhile recovered (and maybe rewrote) the log:
        # what was read is no longer what SQLite would read, so say nothing.
        if in_use(path) or os.fstat(fd).st_size != size or os.pread(fd, HEADER, 0) != header:
            return
    finally:
        os.close(fd)  # SQLite holds no lock on the -wal itself, so this drops none of ours
    damaged, last, frames = found
    where = "its header" if damaged == 0 else f"frame {damaged} of {frames}"
    raise DamagedLog(
        f"database {path} cannot be opened safely: its write-ahead log {path}-wal is damaged at {where}, "
        f"and writes committed after it (up to frame {last}) would be silently dropped; cafleet left the files "
        "unchanged. Keep the database, -wal and -shm files as they are and restore from a backup."
    )


def find_loss(fd: int, size: int, header: bytes, db_page_size: int | None) -> tuple[int, int, int] | None:
    """``(damaged frame, last committed frame after it, frames)`` when a frame fails its
    checks and a later frame of the same generation is a valid commit (frame 0: the header
    itself failed, so SQLite would ignore the whole log); None otherwise."""
    magic = int.from_bytes(header[0:4], "big")
    page_size = int.from_bytes(header[8:12], "big")
    known_magic = magic & ~1 == MAGIC
    if not _valid_page_size(page_size):
        page_size = db_page_size or 0
        if not _valid_page_size(page_size):
            return None
    frames = (size - HEADER) // (FRAME_HEADER + page_size)
    if frames < 1:
        return None
    stored_seed = (int.from_bytes(header[24:28], "big"), int.from_bytes(header[28:32], "big"))
    claimed = bool(magic & 1)
    if (
        known_magic
        and _valid_page_size(int.from_bytes(header[8:12], "big"))
        and _checksum(_words(header[:24], claimed), 0, 0) == stored_seed
    ):
        if int.from_bytes(header[4:8], "big") != 3007000:
            return None  # SQLite refuses such a log with an error of its own; it drops nothing
        found = _scan(fd, frames, page_size, claimed, header[16:24], (stored_seed,))
        return None if found is None else (*found, frames)
    # A header that fails its own checks: SQLite ignores every frame, a loss when they are
    # a valid log with a commit. The damage may be in the magic's byte-order bit: both orders.
    salts = os.pread(fd, FRAME_HEADER, HEADER)[8:16]
    for big_endian in (claimed, not claimed):
        seeds = (stored_seed, _checksum(_words(header[:24], big_endian), 0, 0))
        found = _scan(fd, frames, page_size, big_endian, salts, seeds, header_bad=True)
        if found is not None:
            return (*found, frames)
    return None


def _scan(
    fd: int,
    frames: int,
    page_size: int,
    big_endian: bool,
    salts: bytes,
    header_seeds: tuple,
    header_bad: bool = False,
) -> tuple[int, int] | None:
    """Frames in order, checksummed a chunk at a time, each from the checksum its
    predecessor stores (as SQLite does while they are valid); after the first failure,
    only the later commit frames of the same generation, and whether they would have been
    valid. So a log restarted after a checkpoint, whose current frames are followed by an
    older generation's, costs the current frames' checksums and a look at each later
    frame's header."""
    frame_size = FRAME_HEADER + page_size
    damaged = 0 if header_bad else None
    last_commit = None
    previous_stored: tuple[int, int] = header_seeds[0]
    previous_computed: tuple[int, int] | None = header_seeds[-1]
    for start in range(0, frames, _CHUNK):
        count = min(_CHUNK, frames - start)
        data = os.pread(fd, count * frame_size, HEADER + start * frame_size)
        if len(data) < count * frame_size:  # the file shrank under us: someone else has it
            return None
        heads = [data[i * frame_size : i * frame_size + FRAME_HEADER] for i in range(count)]
        stored = [(int.from_bytes(h[16:20], "big"), int.from_bytes(h[20:24], "big")) for h in heads]
        ours = [h[8:16] == salts and h[0:4] != b"\0\0\0\0" for h in heads]  # this generation's, a page
        commits = [mine and h[4:8] != b"\0\0\0\0" for mine, h in zip(ours, heads)]
        if damaged is not None and not any(commits):
            previous_stored, previous_computed = stored[-1], None
            continue  # nothing here that SQLite would drop
        sums = _frame_checksums(data, count, page_size, big_endian, [previous_stored, *stored[:-1]])
        for i in range(count):
            number = start + i + 1
            valid = ours[i] and sums[i] == stored[i]
            if damaged is None:
                if not valid:
                    damaged = number
            elif commits[i]:  # a commit frame after the damage: would SQLite have read it?
                before = header_seeds if number == 1 else (previous_computed if i == 0 else sums[i - 1],)
                if valid or any(
                    seed is not None and _one_frame(data, i, page_size, big_endian, seed) == stored[i]
                    for seed in before
                ):
                    last_commit = number
        previous_stored, previous_computed = stored[-1], sums[-1]
    if damaged is None or last_commit is None:
        return None
    return (damaged, last_commit)


def _one_frame(data: bytes, index: int, page_size: int, big_endian: bool, seed: tuple[int, int]) -> tuple[int, int]:
    """One frame's checksum from ``seed`` (a predecessor whose stored checksum is damaged)."""
    frame_size = FRAME_HEADER + page_size
    offset = index * frame_size
    body = data[offset : offset + 8] + data[offset + FRAME_HEADER : offset + frame_size]
    return _checksum(_words(body, big_endian), *seed)


def _words(data: bytes, big_endian: bool):
    """``data`` as 32-bit words in the checksum's order."""
    from array import array

    words = array("I")
    words.frombytes(data)
    if big_endian != (sys.byteorder == "big"):
        words.byteswap()
    return words


def _checksum(words, s0: int, s1: int) -> tuple[int, int]:
    for a, b in zip(words[0::2], words[1::2]):
        s0 = (s0 + a + s1) & _MASK
        s1 = (s1 + b + s0) & _MASK
    return (s0, s1)


def _frame_checksums(data: bytes, count: int, page_size: int, big_endian: bool, seeds: list) -> list:
    """The checksum of each of the ``count`` frames in ``data``, frame ``i`` continuing
    from ``seeds[i]``, all frames at once. SQLite's recurrence takes the words two at a
    time; each such pair is one 64-bit item, and item ``j`` of every frame is gathered
    into one integer of 64-bit lanes (a lane a frame; a sum of three 32-bit words never
    carries into the next lane), so the recurrence runs once per pair position over those
    integers instead of once per pair of every frame (about 7 times faster, bench/wal_check.py)."""
    from array import array

    order = sys.byteorder
    pairs = memoryview(_words(data, big_endian)).cast("B").cast("Q")
    stride = (FRAME_HEADER + page_size) // 8
    first_high = order == "big"  # a pair's first word is the item's high half on a big-endian host
    mask = int.from_bytes(b"\xff\xff\xff\xff\0\0\0\0" * count, "little")  # each lane's low half
    s0 = int.from_bytes(array("Q", [seed[0] for seed in seeds]).tobytes(), order)
    s1 = int.from_bytes(array("Q", [seed[1] for seed in seeds]).tobytes(), order)
    # the checksummed pairs of a frame: its header's first two words, then the page's
    for j in (0, *range(FRAME_HEADER // 8, stride)):
        packed = int.from_bytes(pairs[j::stride].tobytes(), order)
        high = (packed >> 32) & mask
        a, b = (high, packed & mask) if first_high else (packed & mask, high)
        s0 = (s0 + a + s1) & mask
        s1 = (s1 + b + s0) & mask
    sums0, sums1 = array("Q"), array("Q")
    sums0.frombytes(s0.to_bytes(8 * count, order))
    sums1.frombytes(s1.to_bytes(8 * count, order))
    return list(zip(sums0, sums1))


def _valid_page_size(size: int) -> bool:
    return 512 <= size <= 65536 and size & (size - 1) == 0


def _database_page_size(path: str) -> int | None:
    """The page size the main file's header declares (1 stands for 65536), or None."""
    from cafleet.store.diagnosis import _read_header  # its descriptor stays open (see there)

    try:
        header = _read_header(path)
    except OSError:
        return None
    if len(header) < 18:
        return None
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


# One read-only descriptor per -shm (by inode) for the life of the process: closing any
# descriptor of a file drops every POSIX lock this process holds on it, the shared-memory
# locks of its own SQLite connections included (see diagnosis._HEADER_FDS).
_SHM_FDS: dict[str, int] = {}


def in_use(path: str) -> bool:
    """Whether a connection (of any process, this one included) has ``path``'s log open:
    it holds a read lock on the ``-shm``'s dead-man-switch byte. An open file
    description's lock query (``F_OFD_GETLK``, Linux) reports this process's own POSIX
    locks too. Elsewhere the answer is False and the log is read every time (only slower)."""
    shm = path + "-shm"
    try:
        now = os.stat(shm)
    except OSError:
        return False  # no index: nobody has the log open (SQLite makes the -shm first)
    fd = _SHM_FDS.get(shm)
    if fd is not None:
        kept = os.fstat(fd)
        if (kept.st_dev, kept.st_ino) != (now.st_dev, now.st_ino):
            fd = None  # another -shm now; the old descriptor stays open (see above)
    if fd is None:
        try:
            fd = os.open(shm, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return False
        _SHM_FDS[shm] = fd
    return _locked(fd)


def _locked(fd: int) -> bool:
    import fcntl

    command = getattr(fcntl, "F_OFD_GETLK", None)
    if command is None or not sys.platform.startswith("linux") or sys.maxsize < 2**32:
        return False
    order = sys.byteorder
    # struct flock on 64-bit Linux: l_type, l_whence (short), padding, l_start, l_len (off_t), l_pid (int), padding
    query = fcntl.F_WRLCK.to_bytes(2, order) + b"\0" * 6 + _DMS.to_bytes(8, order) + (1).to_bytes(8, order) + b"\0" * 8
    try:
        answer = fcntl.fcntl(fd, command, query)
    except OSError:
        return False
    return int.from_bytes(answer[0:2], order) != fcntl.F_UNLCK
