"""Who runs this command, and what that caller may do (docs/security.md).

The caller is decided by what a process cannot simply unset: its ancestry. From this
process up through its parents (``/proc/<pid>/stat``), the nearest process that is a
registered pane's own process (the one its multiplexer started, as the placement's
identity names it) makes the caller that pane's member:

* tmux, identity ``<server pid>:<server start>:<pane pid>``: an ancestor with the pane's
  pid whose parent is the server's pid (the server's start time is not compared: the
  kernel dates a process by the wall clock at boot, which moves with every clock step);
* herdr, identity ``<shell pid>:<start ticks>``: an ancestor with that pid and that start.

A placement is matched on whatever host the command runs on: a member on another host runs
its commands there, under its pane there, whose identity names that host's server and
process; another host's pids match nothing here (a pid and its parent link, or a pid and
its start, never a pid alone).

Then *claims*, which may narrow the caller, never widen it or make it another member:
``CAFLEET_MEMBER_ID``; ``TMUX_PANE`` (on the server ``TMUX`` names) or ``HERDR_PANE_ID``
(on ``HERDR_SOCKET_PATH``'s server) naming a registered member's pane; the terminal (this
process's controlling terminal or a standard stream on a registered member's pane's
terminal: a process that left its pane's tree with ``setsid`` or a double fork usually
keeps one of them). A claim naming a fleet's Director carries no weight (it would only
widen); one naming any other member makes a caller outside every pane that member, and
takes from a Director's pane its Director-only actions. Claims are looked at only where
they can narrow: in a member's own pane nothing can.

A caller outside every registered pane with no claim is the person operating the fleet
(their shell, a script, the tests): they own the Director, so they may do what it may.
What this does not stop (a process of the same Unix user can drive tmux, or write the
database, itself) is in docs/security.md, with how an agent's sandbox closes it.

Only the commands that need authority pay for this (Director-only actions, ``message
send``/``broadcast``, ``member exec-run``): a walk of ``/proc`` (one small read per
ancestor) and one query of the placements; no subprocess.
"""

from __future__ import annotations

import os

from cafleet import config
from cafleet.errors import NotAllowed

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cafleet.store.protocol import Store

PROC = "/proc"
MAX_DEPTH = 256  # ancestors walked at most (a real tree is a dozen deep)
DIRECTOR_ONLY = "from its own pane or from a person's shell"


class Caller:
    """Who a command runs as: ``pane``, the placements of the registered pane whose
    process tree it runs in (one, or several members sharing that pane); ``claims``,
    ``{member id: what names it}`` for members other than a Director that its variables or
    its terminal name; ``seen``, whether its process tree could be read at all."""

    __slots__ = ("claims", "pane", "seen")

    def __init__(self, pane: list[dict], claims: dict[int, str], seen: bool) -> None:
        self.pane = pane
        self.claims = claims
        self.seen = seen

    @property
    def person(self) -> bool:
        """Outside every registered pane, and nothing names a member: the fleet's person."""
        return not self.pane and not self.claims

    @property
    def is_member(self) -> bool:
        """Whether the caller is, or is named as, a member that is no fleet's Director (a
        pane registered as a member in one fleet is a member everywhere)."""
        return bool(self.claims) or any(not row["director"] for row in self.pane)

    def directs(self, director_id: int | None) -> bool:
        """Whether the caller may take a Director-only action in the fleet whose Director
        is ``director_id``: from that Director's pane, or as the person."""
        if self.is_member:
            return False
        return not self.pane or any(row["member_id"] == director_id for row in self.pane)

    def speaks_as(self, member_id: int) -> bool:
        """Whether the caller may send as ``member_id``: a pane's process only as its own
        member; outside every pane, only as the member its claims name, if any."""
        if self.pane:
            return any(row["member_id"] == member_id for row in self.pane)
        return not self.claims or set(self.claims) == {member_id}

    def runs_in_pane_of(self, member_id: int) -> bool:
        """Whether this process runs in ``member_id``'s own pane, by its process tree."""
        return any(row["member_id"] == member_id for row in self.pane) and set(self.claims) <= {member_id}

    def describe(self) -> str:
        """Where this caller is, as a clause: ``this command runs in member 3's pane``."""
        if self.pane:
            row = next((r for r in self.pane if not r["director"]), self.pane[0])
            text = (
                f"this command runs in fleet {row['fleet_id']}'s Director's pane"
                if row["director"]
                else f"this command runs in member {row['member_id']}'s pane"
            )
            return text + (f" and names {_claimed(self.claims)}" if self.claims else "")
        if self.claims:
            return f"this command runs in no member's pane but names {_claimed(self.claims)}"
        return "this command runs outside every member's pane"

    def own(self) -> str:
        """Whom this caller sends as, for a refusal: ``member 3`` (or who its claims name)."""
        if self.pane:
            return " or ".join(f"member {row['member_id']}" for row in self.pane)
        return " or ".join(f"member {member_id}" for member_id in sorted(self.claims))


def _claimed(claims: dict[int, str]) -> str:
    return " and ".join(f"member {member_id} ({why})" for member_id, why in sorted(claims.items()))


# -- deciding ----------------------------------------------------------------------------------


def find(store: Store, environ: Mapping[str, str], *, pid: int | None = None, proc: str = PROC) -> Caller:
    """The caller of this command (``pid``: another process's; ``proc``: another /proc, for tests)."""
    from cafleet.broker import records

    rows = records.placed_members(store)
    chain = ancestry(os.getpid() if pid is None else pid, proc)
    named = [(names, row) for row in rows if (names := _names(row)) is not None]
    pane: list[dict] = []
    for process, parent, start, _terminal in chain or ():
        pane = [row for names, row in named if _is(names, process, parent, start)]
        if pane:
            break
    claims: dict[int, str] = {}
    if all(row["director"] for row in pane):  # only where a claim can still narrow
        claims = _claims(rows, named, environ, chain, proc, streams=pid is None)
    return Caller(pane, claims, chain is not None)


def ancestry(pid: int, proc: str = PROC) -> list[tuple[int, int, str, int]] | None:
    """(pid, parent pid, start ticks, controlling terminal) of ``pid`` and each of its
    ancestors, nearest first; None when ``pid`` cannot be read (no /proc here)."""
    chain: list[tuple[int, int, str, int]] = []
    while pid > 0 and len(chain) < MAX_DEPTH:
        found = _stat(pid, proc)
        if found is None:
            break
        chain.append((pid, *found))
        pid = found[0] if pid != 1 else 0
    return chain or None


def _stat(pid: int, proc: str) -> tuple[int, str, int] | None:
    """(parent pid, start ticks, controlling terminal) from ``/proc/<pid>/stat``; None for
    no such process (or a zombie)."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] in (b"Z", b"X", b"x"):
        return None
    try:
        return int(fields[1]), fields[19].decode("ascii"), int(fields[4])
    except (ValueError, UnicodeDecodeError):
        return None


def _names(row: dict) -> tuple[int, int | None, str | None] | None:
    """(the pane's process id, the parent it must have, the start it must have) from a
    placement's identity; None for a legacy placement (no identity) or one this cannot read."""
    parts = (row["identity"] or "").split(":")
    if not all(part.isascii() and part.isdigit() for part in parts):
        return None
    if row["backend"] == "tmux" and len(parts) == 3:
        return int(parts[2]), int(parts[0]), None
    if row["backend"] == "herdr" and len(parts) == 2:
        return int(parts[0]), None, parts[1]
    return None


def _is(names: tuple[int, int | None, str | None], pid: int, parent: int, start: str) -> bool:
    want_pid, want_parent, want_start = names
    return pid == want_pid and want_parent in (None, parent) and want_start in (None, start)


def _claims(
    rows: list[dict], named: list, environ: Mapping[str, str], chain, proc: str, streams: bool
) -> dict[int, str]:
    """What names a member, from the variables and the terminals (``streams``: this
    process's own standard streams too); names given to a Director are dropped."""
    claims: dict[int, str] = {}
    mine = config.pane_member_id(environ)
    if mine.isascii() and mine.isdigit() and int(mine) > 0:
        claims[int(mine)] = "its CAFLEET_MEMBER_ID"
    tmux_pane = environ.get("TMUX_PANE")
    tmux_socket, _, tmux_server = environ.get("TMUX", "").partition(",")
    tmux_server = tmux_server.partition(",")[0]
    herdr_pane, herdr_socket = environ.get("HERDR_PANE_ID"), environ.get("HERDR_SOCKET_PATH")
    for row in rows:
        socket = _socket(row["session"])
        if row["backend"] == "tmux" and tmux_pane and row["pane_id"] == tmux_pane and socket == tmux_socket:
            if _server_of(row) in (None, tmux_server):  # a pane id reused by a later server names no one
                claims.setdefault(row["member_id"], "its TMUX_PANE")
        elif row["backend"] == "herdr" and herdr_pane and row["pane_id"] == herdr_pane:  # noqa: SIM102 - mirrors tmux's
            if not socket or not herdr_socket or socket == herdr_socket:
                claims.setdefault(row["member_id"], "its HERDR_PANE_ID")
    terminals = _terminals(chain[0][3], streams) if chain else set()
    if terminals:
        for names, row in named:
            if not row["director"] and row["member_id"] not in claims and _terminal_of(names, proc) in terminals:
                claims[row["member_id"]] = "its terminal is that member's pane's"
    for row in rows:
        if row["director"]:
            claims.pop(row["member_id"], None)
    return claims


def _server_of(row: dict) -> str | None:
    """The tmux server's pid a placement's identity records (``server:start:pane``); None
    for a legacy placement without one."""
    parts = (row["identity"] or "").split(":")
    return parts[0] if len(parts) == 3 else None


def _socket(session: str) -> str:
    """The server's socket path in a stored session (``ssh://host/`` dropped)."""
    if session.startswith("ssh://"):
        session = session[len("ssh://") :].partition("/")[2]
    return session.partition("@")[2]


def _device(number: int) -> tuple[int, int]:
    """(major, minor) of a device number as the kernel encodes it (``tty_nr``, ``st_rdev``)."""
    return (number >> 8) & 0xFFF, (number & 0xFF) | ((number >> 12) & 0xFFF00)


def _terminals(controlling: int, streams: bool) -> set[tuple[int, int]]:
    """The terminals a process holds: its controlling one and (``streams``: this process)
    those of its standard streams."""
    import stat

    found = {_device(controlling)} if controlling else set()
    for fd in (0, 1, 2) if streams else ():
        try:
            info = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode):
            found.add((os.major(info.st_rdev), os.minor(info.st_rdev)))
    return found


def _terminal_of(names: tuple[int, int | None, str | None], proc: str) -> tuple[int, int] | None:
    """The terminal of a registered pane's own process on this host, when its identity
    still names a live process here (its parent or its start checked); None otherwise."""
    found = _stat(names[0], proc)
    if found is None or not _is(names, names[0], *found[:2]) or not found[2]:
        return None
    return _device(found[2])


# -- the rules -----------------------------------------------------------------------------------


def require_director(store: Store, environ: Mapping[str, str], fleet_id: int, command: str) -> None:
    """Refuse a Director-only ``command`` on ``fleet_id`` unless the caller is its Director
    (by its pane) or the person; one line naming who may."""
    from cafleet.broker import fleets

    _direct(store, environ, fleet_id, fleets.get_fleet(store, fleet_id)["director_member_id"], command)


def require_director_of(store: Store, environ: Mapping[str, str], member_id: int, command: str) -> None:
    """:func:`require_director` for the fleet of ``member_id`` (NotFound for no such member)."""
    from cafleet.broker import records

    fleet_id, director_id = records.member_with_fleet(store, member_id, "m.fleet_id, f.director_member_id")
    _direct(store, environ, fleet_id, director_id, command)


def _direct(store: Store, environ, fleet_id: int, director_id: int | None, command: str) -> None:
    caller = find(store, environ)
    if not caller.directs(director_id):
        raise NotAllowed(
            f"only fleet {fleet_id}'s Director may run `cafleet {command}`, {DIRECTOR_ONLY}, and "
            f"{caller.describe()}; nothing was done."
        )


def require_no_member(store: Store, environ: Mapping[str, str], command: str) -> None:
    """Refuse ``command`` to a member (one that is no Director): it is for a Director or the person."""
    caller = find(store, environ)
    if caller.is_member:
        raise NotAllowed(
            f"only a fleet's Director ({DIRECTOR_ONLY}) may run `cafleet {command}`, and "
            f"{caller.describe()}; nothing was done."
        )


def require_speaker(store: Store, environ: Mapping[str, str], from_id: int) -> None:
    """Refuse a send as ``from_id`` by a caller that is another member (by its pane, or
    outside every pane by what names it)."""
    caller = find(store, environ)
    if not caller.speaks_as(from_id):
        raise NotAllowed(
            f"{caller.describe()}, so it sends only as {caller.own()}, never as member {from_id}; nothing was sent."
        )


def require_own_pane(store: Store, environ: Mapping[str, str], member_id: int, what: str) -> None:
    """Refuse unless this process runs in ``member_id``'s own pane, by its process tree.
    Where the tree cannot tell (no /proc here, or the member's placement was recorded
    before identities existed) its variables decide, as before: it names that member alone."""
    caller = find(store, environ)
    if caller.runs_in_pane_of(member_id):
        return
    if not caller.pane and set(caller.claims) == {member_id}:
        legacy = not any(row["member_id"] == member_id and _names(row) is not None for row in _placed(store, member_id))
        if not caller.seen or legacy:
            return
    raise NotAllowed(f"{what} runs only in member {member_id}'s pane, and {caller.describe()}; nothing was run.")


def _placed(store: Store, member_id: int) -> list[dict]:
    from cafleet.broker import records

    return [row for row in records.placed_members(store) if row["member_id"] == member_id]
