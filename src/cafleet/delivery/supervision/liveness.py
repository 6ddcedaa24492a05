"""Member states for supervision: alive, idle, silent, blocked, dead (and pending).

One function computes them for `cafleet fleet watch`, `cafleet member list --state` and
the WebUI roster, so the three always agree. A fleet's panes are read together: one tmux
call per server (``Tmux.inspect_many``: each pane's state and screen, its identity checked;
one SSH call per host for members on other hosts), or one inspection per member where the
backend has no such read (``Multiplexer.inspect``: two herdr calls).

- pending: the placement has no pane yet (creation in progress);
- dead: the pane is gone, its program exited, or it is back at a plain shell; also a
  *stale* pane: its id now names a pane cafleet did not create (the multiplexer server
  restarted), detected from the placement's recorded identity in the same inspection; and
  a *damaged* placement, whose stored values do not match their encoding (never inspected);
- blocked: the pane shows a permission prompt or a question for its user;
- idle: no "working" cue on screen, and the member's latest message activity (sent,
  received, ACKed) is older than ``idle_after``; the seed measures idle from activity only;
- silent: no "working" cue, and no message activity at all since the member was registered
  longer than ``idle_after`` ago (the seed's idle is null then: nothing to measure from, so
  a member that never answered is told apart from one that went quiet);
- exec: a command the Director runs in its pane (``member exec``) has not ended: waiting to
  be typed, typed, or running (the detail names the exec and its command); a blocked or
  dead pane says that instead, which needs someone first;
- alive: anything else.
"""

from __future__ import annotations

from cafleet import clock
from cafleet.errors import CafleetError, DamagedPlacement, PaneStale, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberBrief, MemberDetail
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store

ALIVE, IDLE, SILENT, BLOCKED, DEAD, PENDING = "alive", "idle", "silent", "blocked", "dead", "pending"
EXEC = "exec"
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "tcsh", "csh", "-bash", "-zsh", "-sh"})
DEFAULT_IDLE_AFTER = 600.0
SCREEN_LINES = 30


class MuxPool:
    """One multiplexer client per server, reused across rounds (the stored sessions of one
    server, such as the sessions of the members on one host, share it).

    Inside :meth:`inspecting`, the panes of many members are read in one multiplexer call
    per server (tmux: :meth:`cafleet.mux.tmux.Tmux.inspect_many`) and :meth:`inspect`
    answers from that read; elsewhere, and for a backend that reads one pane at a time
    (herdr), :meth:`inspect` asks the multiplexer."""

    def __init__(self) -> None:
        self._clients: dict[tuple[str, str], object] = {}
        self._servers: dict[tuple, object] = {}
        self._read: dict[tuple, object] | None = None  # inside `inspecting`: what the batched read found

    def get(self, backend: str, session: str):
        from cafleet.mux.detect import multiplexer_for_placement

        key = (backend, session)
        if key not in self._clients:
            mux = multiplexer_for_placement(backend, session)
            server = getattr(mux, "server", None)
            self._clients[key] = mux if server is None else self._servers.setdefault(server, mux)
        return self._clients[key]

    def reach(self, placement):
        """This pool's client for a concrete placement, expecting the pane's recorded
        identity (:func:`cafleet.delivery.keystrokes.placement.reach`, the client shared by server);
        DamagedPlacement for stored values that do not match their encoding."""
        from cafleet.delivery.keystrokes.placement import recorded_at
        from cafleet.mux.detect import check_placement

        check_placement(placement)
        mux = self.get(placement["backend"], placement["session"])
        mux.expect(placement["pane_id"], placement.get("identity"), recorded_at(placement))
        return mux

    def inspecting(self, members: list[MemberDetail], lines: int = SCREEN_LINES) -> _Inspecting:
        """``with pool.inspecting(members):`` read the panes of ``members`` (detail records)
        now, one call per server, for the :meth:`inspect` calls made inside the block."""
        return _Inspecting(self, members, lines)

    def inspect(self, mux, placement, lines: int) -> tuple[bool, bool, str, str]:
        """``mux.inspect`` of the placement's pane, from the batched read when it has the
        pane as this placement expects it (its identity), else from the multiplexer."""
        if self._read is not None:
            found = self._read.get(_read_key(mux, placement, lines))
            if isinstance(found, Exception):
                raise found
            if found is not None:
                return found  # type: ignore[return-value]
        return mux.inspect(placement["pane_id"], lines)

    def _read_all(self, members: list[MemberDetail], lines: int) -> None:
        wanted: dict[int, tuple[object, dict[str, tuple]]] = {}  # client -> (client, {pane: key})
        for member in members:
            placement = member["placement"]
            if placement is None or placement["pane_id"] is None:
                continue
            try:
                mux = self.reach(placement)
            except CafleetError:  # pane_state says why, when it looks at this member
                continue
            if not hasattr(mux, "inspect_many"):
                continue
            # a pane id two placements name (one of them stale) is read as the last expects it
            wanted.setdefault(id(mux), (mux, {}))[1][placement["pane_id"]] = _read_key(mux, placement, lines)
        read: dict[tuple, object] = {}
        for mux, panes in wanted.values():
            for pane_id, found in mux.inspect_many(list(panes), lines).items():  # type: ignore[attr-defined]
                read[panes[pane_id]] = found
        self._read = read


class _Inspecting:
    """The block of :meth:`MuxPool.inspecting`."""

    def __init__(self, pool: MuxPool, members: list[MemberDetail], lines: int) -> None:
        self.pool, self.members, self.lines = pool, members, lines

    def __enter__(self) -> MuxPool:
        self.pool._read_all(self.members, self.lines)
        return self.pool

    def __exit__(self, *_exc) -> None:
        self.pool._read = None


def _read_key(mux, placement, lines: int) -> tuple:
    from cafleet.delivery.keystrokes.placement import recorded_at

    return (id(mux), placement["pane_id"], placement.get("identity"), recorded_at(placement), lines)


def pane_state(
    member: MemberDetail, pool: MuxPool, idle_after: float, now: float | None = None, screens: dict | None = None
) -> tuple[str, str]:
    """(state, one-line detail) of a member's pane, for a detail record from
    ``broker.members.get_member`` or ``roster_detail`` (not the member's standing in
    the broker: that is ``broker.messages.member_standing``). ``screens``: when given, the
    screen of a blocked member is put there under its id (the dialog's text)."""
    from cafleet.delivery.keystrokes import screen
    from cafleet.delivery.keystrokes.placement import recorded_at
    from cafleet.mux.detect import check_placement

    placement = member["placement"]
    if placement is None or placement["pane_id"] is None:
        return PENDING, "its pane is being created"
    pane = placement["pane_id"]
    try:
        check_placement(placement)
        mux = pool.get(placement["backend"], placement["session"])
        mux.expect(pane, placement.get("identity"), recorded_at(placement))
        exists, dead, command, text = pool.inspect(mux, placement, SCREEN_LINES)
    except (PaneStale, DamagedPlacement) as error:
        return DEAD, clause(error)
    except CafleetError as error:
        return DEAD, f"pane {pane} cannot be inspected ({clause(error)})"
    if not exists:
        return DEAD, f"pane {pane} is gone"
    if dead:
        return DEAD, f"the coding agent in pane {pane} exited"
    if command in SHELLS:
        return DEAD, f"pane {pane} is back at a {command} prompt: the coding agent exited"
    seen = screen.classify(placement["coding_agent"], text)
    if seen == screen.PaneState.AWAITING_USER:
        if screens is not None:
            screens[member["member_id"]] = text
        return BLOCKED, f"pane {pane} shows a prompt awaiting its user"
    if seen == screen.PaneState.WORKING:
        return ALIVE, "working"
    active = member["last_activity_at"] is not None
    since = clock.epoch_or_none(member["last_activity_at"] if active else member["registered_at"])
    quiet = 0.0 if since is None else (now if now is not None else _now()) - since  # unreadable: never quiet
    if quiet > idle_after:
        if active:
            return IDLE, f"no activity for {int(quiet)} s"
        return SILENT, f"no message activity since it was registered {int(quiet)} s ago"
    return ALIVE, "ok"


def still_dead(store: Store, member: MemberDetail, hooks: Hooks = NO_HOOKS) -> bool:
    """A ``dead`` verdict on ``member`` (a detail record) checked again under its pane's
    input lock, tried once without waiting: `member delete` closes the pane and then
    deregisters the member, holding that lock, so a look between the two must not call the
    member dead. False while the lock is held (a deletion or a delivery is under way: the
    next look sees how it ended) and once the member is deregistered."""
    from cafleet.broker import members
    from cafleet.delivery.keystrokes.lock import placement_lock
    from cafleet.errors import LockTimeout

    placement = member["placement"]
    if placement is None:  # no pane to be dead (pane_state calls such a member pending)
        return False
    try:
        with placement_lock(store.locks, placement, 0, hooks):
            return members.get_member(store, member["member_id"])["status"] == "active"
    except LockTimeout:
        return False
    except CafleetError:  # no lock can be taken at all (its folder, the server): the verdict stands
        return True


def fleet_states(
    store: Store,
    fleet_id: int,
    pool: MuxPool,
    idle_after: float = DEFAULT_IDLE_AFTER,
    roster: list[MemberDetail] | None = None,
) -> dict[int, tuple[str, str]]:
    """States of the fleet's active members other than the root Director.

    ``roster``: the fleet's ``members.roster_detail`` when the caller has read it
    already; otherwise it is read here, once."""
    if roster is None:
        from cafleet.broker import members

        roster = members.roster_detail(store, fleet_id)
    from cafleet.broker import execs

    watched = [entry for entry in roster if entry["kind"] != "director"]
    with pool.inspecting(watched):  # one multiplexer call per server, not one per member
        states = {entry["member_id"]: pane_state(entry, pool, idle_after) for entry in watched}
    for record in execs.in_flight(store, fleet_id):  # one catalogue look when no exec was ever made
        member_id = record["member_id"]
        if member_id in states and states[member_id][0] in (ALIVE, IDLE, SILENT):
            states[member_id] = (EXEC, exec_detail(record))
    return states


def exec_detail(record: dict) -> str:
    """``exec 7 running: `make test```, in one line."""
    from cafleet.broker import execs

    doing = {"created": "waiting to be typed", "dispatched": "typed, not started yet", "running": "running"}
    return f"exec {record['exec_id']} {doing.get(record['state'], record['state'])}: `{execs.shown_command(record['command'])}`"


def merge_states(records: list[MemberBrief], states: dict[int, tuple[str, str]]) -> list[MemberBrief]:
    """The roster ``records``, each given its ``state`` and ``state_detail`` from ``states``
    (:func:`fleet_states`); the root Director, who has none, is ``director``. In place."""
    for record in records:
        record["state"], record["state_detail"] = states.get(record["member_id"], ("director", ""))
    return records


def _now() -> float:
    import time

    return time.time()
