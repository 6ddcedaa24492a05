"""Everything that acts on a member's pane, each typing or closing under the pane-input
lock: fleet deletion closing member panes, member creation (with the pane-id patch) and
deletion, and the operator's `member capture` and `member prompt`.

Every pane is reached through :func:`reach`, which binds the placement's recorded
identity to the multiplexer client: a pane whose id now names another pane (its server
restarted) is *stale*, and nothing is typed into it or closed.

The ``hooks`` calls (the command's, passed in) are the test seam's pause points (:mod:`cafleet.faults`).

The registry change and the pane kill happen while the lock is held, so a concurrent
drain that was waiting for the lock re-checks and finds the member gone instead of
typing into a pane that is being closed.
"""

from __future__ import annotations

import enum
from contextlib import ExitStack
from dataclasses import dataclass

from cafleet import config
from cafleet.broker import fleets, members
from cafleet.delivery.keystrokes.placement import reach, recorded_at
from cafleet.errors import CafleetError, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from cafleet.broker.records import MemberDetail, MemberPlacement, PlacementRecord
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


class PaneFate(enum.Enum):
    """What became of a member's pane when the member or its fleet was deleted."""

    CLOSED = "closed"
    ALREADY_GONE = "already gone"
    NONE = "none"  # pending placement: no pane was ever recorded
    STALE = "stale"  # the id names a pane cafleet did not create; left open
    DAMAGED = "damaged"  # a stored value of the placement does not match its encoding; left open
    NOT_CLOSED = "not closed"  # the multiplexer failed, or someone holds the pane's input lock


@dataclass(frozen=True)
class PaneOutcome:
    """A pane's fate at deletion and, when it was left open, why (a clause); rendered by
    :meth:`text` at the edge (``pane_status`` in ``member delete`` and ``fleet delete``)."""

    fate: PaneFate
    reason: str | None = None

    @property
    def left_open(self) -> bool:
        """Whether a pane may still be open (its agent may still write)."""
        return self.fate not in (PaneFate.CLOSED, PaneFate.ALREADY_GONE, PaneFate.NONE)

    def text(self) -> str:
        if self.fate in (PaneFate.STALE, PaneFate.DAMAGED):
            return f"{self.fate.value}, left open ({self.reason})"
        if self.fate is PaneFate.NOT_CLOSED:
            return f"not closed ({self.reason})"
        return self.fate.value


CLOSED = PaneOutcome(PaneFate.CLOSED)
ALREADY_GONE = PaneOutcome(PaneFate.ALREADY_GONE)
NO_PANE = PaneOutcome(PaneFate.NONE)


def _kill(placement: Mapping[str, Any]) -> PaneOutcome:
    from cafleet.errors import DamagedPlacement, PaneStale

    try:
        return CLOSED if reach(placement).kill(placement["pane_id"]) else ALREADY_GONE
    except PaneStale as error:
        return PaneOutcome(PaneFate.STALE, clause(error))
    except DamagedPlacement as error:
        return PaneOutcome(PaneFate.DAMAGED, clause(error))
    except CafleetError as error:
        return PaneOutcome(PaneFate.NOT_CLOSED, str(error))


def delete_fleet(
    store: Store, settings: config.Settings, fleet_id: int, *, discard_worktrees: bool = False, hooks: Hooks = NO_HOOKS
):
    """Soft-delete the fleet and close its member panes (never the Director's), each under
    its pane-input lock.

    The locks of the panes listed beforehand are taken first (in key order); a pane whose
    lock cannot be had within the lock timeout is left alone and reported, since someone
    is typing into it. The panes actually closed are those whose placements the delete
    removed, read in its own transaction: a member created after the listing is closed
    too (under its own lock, taken afterwards), so it leaves no orphan pane.
    """
    from cafleet.errors import LockTimeout

    fleets.get_fleet(store, fleet_id)
    listed = [p for p in fleets.fleet_placements(store, fleet_id) if p["pane_id"]]
    locks, timeout = store.locks, settings.lock_timeout
    closed: dict[int, PaneOutcome] = {}
    removed: list[MemberPlacement] = []
    late: list[MemberPlacement] = []
    with ExitStack() as held:
        locked, busy = set(), set()
        if listed:
            from cafleet.delivery.keystrokes.lock import pane_lock

            for key in sorted({_key(p) for p in listed}):  # sorted: no deadlock with other multi-lock holders
                try:
                    held.enter_context(pane_lock(locks, *key, timeout, hooks))
                    locked.add(key)
                except LockTimeout:
                    busy.add(key)
        result = fleets.delete_fleet(store, fleet_id, closing=removed)
        for placement in removed:
            key = _key(placement)
            if not placement["pane_id"]:
                closed[placement["member_id"]] = NO_PANE
            elif key in busy:
                closed[placement["member_id"]] = _busy(placement)
            elif key in locked:
                closed[placement["member_id"]] = _kill(placement)
            else:
                late.append(placement)
    for placement in late:  # registered after the listing: its own lock, alone, so no lock-order issue
        from cafleet.delivery.keystrokes.lock import placement_lock

        try:
            with placement_lock(locks, placement, timeout, hooks):
                closed[placement["member_id"]] = _kill(placement)
        except LockTimeout:
            closed[placement["member_id"]] = _busy(placement)
    kept = _release_fleet(store, settings.environ, fleet_id, closed, discard_worktrees)
    return result, sorted(closed.items()), kept


def _release_fleet(store: Store, environ, fleet_id: int, closed: dict, discard: bool) -> list[tuple[int, dict]]:
    """The worktrees of the fleet's deregistered members whose panes are closed (or they
    never had one): each removed when nothing would be lost, kept otherwise. A member
    whose pane could not be closed keeps its worktree (its agent may still write)."""
    from cafleet.broker import worktrees as worktree_records

    out = []
    for row in worktree_records.in_fleet(store, fleet_id):
        if row["status"] == worktree_records.REMOVED or row["member_status"] == "active":
            continue
        if closed.get(row["member_id"], ALREADY_GONE).left_open:
            w = worktree_records
            w.set_status(store, row["member_id"], w.KEPT)
            out.append(
                (
                    row["member_id"],
                    {
                        "path": row["path"],
                        "branch": row["branch"],
                        "status": w.KEPT,
                        "lost": ["its pane is still open"],
                    },
                )
            )
            continue
        result = _release(store, environ, row["member_id"], discard)
        if result is not None:
            out.append((row["member_id"], result))
    return out


def _key(placement: Mapping[str, Any]) -> tuple[str, str, str]:
    return placement["backend"], placement["session"], placement["pane_id"]


def _busy(placement: Mapping[str, Any]) -> PaneOutcome:
    return PaneOutcome(
        PaneFate.NOT_CLOSED,
        f"its pane-input lock is held by another cafleet process; "
        f"close pane {placement['pane_id']} by hand when it is free",
    )


def delete_member(
    store: Store, settings: config.Settings, member_id: int, *, discard_worktree: bool = False, hooks: Hooks = NO_HOOKS
):
    """Member deletion: under the pane lock, kill the pane (gone is fine), then deregister;
    then its worktree, if it has one, is removed when nothing would be lost (or with
    ``discard_worktree``) and kept otherwise. ``(pane status, worktree result or None)``.
    A member already deleted whose worktree was kept gets only that second step."""
    from cafleet.broker import worktrees as worktree_records
    from cafleet.errors import Conflict

    try:
        member = members.check_deletable(store, member_id)
    except Conflict:
        row = worktree_records.get(store, member_id)
        record = members.get_member(store, member_id)
        if record["kind"] == "director" or row is None or row["status"] == worktree_records.REMOVED:
            raise
        return ALREADY_GONE, _release(store, settings.environ, member_id, discard_worktree)
    return _delete_member(store, settings, member, member_id, hooks), _release(
        store, settings.environ, member_id, discard_worktree
    )


def _release(store: Store, environ, member_id: int, discard: bool) -> dict | None:
    from cafleet.broker import records, worktrees as worktree_records

    if not records.has_table(store, worktree_records.TABLE):
        return None
    from cafleet.delivery import worktrees

    return worktrees.release(store, environ, member_id, discard=discard)


def _delete_member(
    store: Store, settings: config.Settings, member: MemberDetail, member_id: int, hooks: Hooks
) -> PaneOutcome:
    placement = member["placement"]
    if placement is None or placement["pane_id"] is None:
        members.deregister_member(store, member_id)
        return NO_PANE
    from cafleet.delivery.keystrokes.lock import placement_lock

    with placement_lock(store.locks, placement, settings.lock_timeout, hooks):
        status = _kill(placement)
        hooks.pause("delete.killed")
        if status.fate is PaneFate.NOT_CLOSED:
            raise CafleetError(f"member {member_id} was not deleted: its pane {placement['pane_id']} {status.text()}.")
        members.deregister_member(store, member_id)
    return status


def _same_pane(caller, placement: Mapping[str, Any]) -> bool:
    """Whether the calling pane is the placement's: same backend and pane id, and the same
    identity (server and pane). A legacy placement (no identity) needs the same server
    address (the part of the session after ``@``) and, for tmux, a server started no later
    than the placement was recorded."""
    if (caller.backend, caller.pane_id) != (placement["backend"], placement["pane_id"]):
        return False
    if placement.get("identity"):
        return caller.identity == placement["identity"]
    if caller.session.partition("@")[2] != placement["session"].partition("@")[2]:
        return False
    started, recorded = (caller.identity or "").split(":")[1:2], recorded_at(placement)
    return caller.backend != "tmux" or not started or recorded is None or int(started[0]) <= int(recorded)


class CreateFailed(CafleetError):
    """Member creation failed after the registry write; the message says what was undone."""


MAX_COMMAND_BYTES = 12_000
"""The most bytes a member's command may take: its agent's argv, the spawn prompt (with its
placeholders and identity lines filled in) included. tmux carries one command of at most
16 KiB (longer: "command too long"), which also holds the pane's directory, environment
and tmux's own options; measured on tmux 3.4 (docs/usage.md)."""


def _check_command(prompt: str, *, agent, name, model, effort, fleet_id: int, director_id: int) -> None:
    """Refuse, before anything is written, a spawn prompt that no pane could start: one
    holding a NUL, or one that makes the member's command longer than MAX_COMMAND_BYTES
    with the largest member id it could be given."""
    from cafleet.agents import backends
    from cafleet.agents.prompt import render_spawn_prompt
    from cafleet.errors import UsageError
    from cafleet.validation import MAX_ID

    text = render_spawn_prompt(
        prompt, fleet_id=fleet_id, member_id=MAX_ID, director_member_id=director_id, coding_agent=agent
    )
    session = "0" * 36 if agent == "claude" else None  # a session id's length
    argv = backends.build_argv(
        agent, member_name=name, prompt=text, model=model, effort=effort, member_id=MAX_ID, session_id=session
    )
    size = sum(len(arg.encode("utf-8", "surrogatepass")) + 1 for arg in argv)
    if size > MAX_COMMAND_BYTES:
        raise UsageError(
            f"the spawn prompt is too long: the member's command (the prompt with its identity lines, the "
            f"name and the agent's options) would take {size} bytes, and a pane's command holds at most "
            f"{MAX_COMMAND_BYTES}; put the details in a file the member reads, or send them as a message once "
            "it has started."
        )


@dataclass(frozen=True)
class Spawn:
    """What a new member is started with, checked before anything is written."""

    fleet_id: int
    director_id: int
    name: str
    description: str
    agent: str
    model: str | None
    effort: str | None
    prompt: str

    def argv(self, member_id: int, session_id: str | None = None) -> list[str]:
        """The member's command: its agent with the spawn prompt rendered for ``member_id``."""
        from cafleet.agents import backends
        from cafleet.agents.prompt import render_spawn_prompt

        text = render_spawn_prompt(
            self.prompt,
            fleet_id=self.fleet_id,
            member_id=member_id,
            director_member_id=self.director_id,
            coding_agent=self.agent,
        )
        return backends.build_argv(
            self.agent,
            member_name=self.name,
            prompt=text,
            model=self.model,
            effort=self.effort,
            member_id=member_id,
            session_id=session_id,
        )

    def record(self, store: Store, member_id: int, cwd: str | None, session_id: str | None) -> None:
        """Remember what the member is started with, before its pane opens, so that
        ``fleet restore`` and ``member revive`` can start it again."""
        from cafleet.broker import spawns

        spawns.record(
            store, member_id, model=self.model, effort=self.effort, prompt=self.prompt, cwd=cwd, session_id=session_id
        )


@dataclass(frozen=True)
class SpawnRequest:
    """What ``member create`` asks for, built once by its handler and passed whole: the
    fleet, the member's name and description, its agent (None: the Director's), model and
    effort, the spawn prompt, the host (None: this machine), its budgets, ``force`` (past
    the fleet's budget and cap), the worktree options (``worktree`` None: the fleet's
    default) and the placement (None: the fleet's default)."""

    fleet_id: int
    name: str
    description: str
    prompt: str
    coding_agent: str | None = None
    model: str | None = None
    effort: str | None = None
    host: str | None = None
    budget_usd: float | None = None
    budget_tokens: int | None = None
    force: bool = False
    worktree: bool | None = None
    branch: str | None = None
    base: str | None = None
    repo: str | None = None
    placement: str | None = None


def create_member(store: Store, settings: config.Settings, request: SpawnRequest, hooks: Hooks = NO_HOOKS) -> dict:
    """Member creation: pending registration, spawn prompt, split a pane, record it under the lock.

    ``request`` is what ``member create`` asked for, whole. With its ``worktree`` (None:
    the fleet's default, ``fleet create --worktrees``), the pane starts in a new git
    worktree of the repository holding the current directory, on a new branch (``branch``, else one named after the fleet and member) from ``base`` (else the
    current ``HEAD``): checked before the registry write, recorded and added after it
    (:mod:`cafleet.delivery.worktrees`).

    Every check that can fail without side effects runs first (the spawn prompt's NUL and
    length, the budgets, a fleet over its budget unless ``force``); any failure after the
    registry write is compensated (pane killed, member deregistered) and reported.
    With ``host``, the pane is a new tmux session on that host, over SSH
    (:func:`_create_remote`); else it opens where ``placement`` says (None: the fleet's
    default, else ``auto``; :mod:`cafleet.delivery.spawning.layout`).
    """
    from cafleet.agents import backends
    from cafleet.delivery.spawning import layout

    environ, fleet_id, host = settings.environ, request.fleet_id, request.host
    director, director_placement, mux = _directors_pane(store, environ, fleet_id)
    spawn = Spawn(
        fleet_id,
        director["member_id"],
        request.name,
        request.description,
        request.coding_agent or director_placement["coding_agent"],
        request.model,
        request.effort,
        request.prompt,
    )
    _check_spawn(store, environ, spawn, request)
    worktree = _check_worktree_options(store, request)
    if host is not None and request.placement is not None:
        from cafleet.errors import UsageError

        raise UsageError("--placement is for members on this machine; one on another host gets a session of its own.")
    mode = layout.choose(request.placement, fleets.default_placement(store, fleet_id)) if host is None else ""
    from cafleet.delivery.spawning.capacity import check_room  # the fleet's cap, the host's memory: before any write

    check_room(store, settings, fleet_id, spawn.agent, host, request.force)
    if host is not None:
        plan = None
        if worktree:
            from cafleet.delivery import worktrees

            where = request.repo or _cwd()  # the repository at the same path there, or the path given
            plan = worktrees.plan(environ, where, request.branch, request.base, host=host)
        return _create_remote(store, settings, host, spawn, plan, hooks)
    backends.find_binary(spawn.agent, environ)
    cwd = _cwd()  # the new pane starts here; a deleted directory is refused before any write
    plan = None
    if worktree:
        from cafleet.delivery import worktrees

        plan = worktrees.plan(environ, cwd, request.branch, request.base)  # refused here, before any write
    return _create_local(store, settings, spawn, director_placement, mux, plan, cwd, request, mode, hooks)


def _create_local(
    store: Store,
    settings: config.Settings,
    spawn: Spawn,
    placement: dict,
    mux,
    plan,
    cwd: str,
    request: SpawnRequest,
    mode: str,
    hooks: Hooks,
):
    """A member in a new pane placed by ``mode`` (:mod:`cafleet.delivery.spawning.layout`), in
    ``cwd`` (or its new worktree), with its usage source recorded before its agent starts."""
    from cafleet.delivery.spawning import layout
    from cafleet.store.engines import member_location

    database = member_location(
        settings.database, settings.environ
    )  # no password in the pane's argv: a private pgpass file

    def open_pane(member_id: int, workdir: str | None) -> tuple[str, str | None, dict, str | None]:
        workdir = workdir or cwd
        session_id = _record_usage_source(
            store,
            settings.environ,
            member_id,
            spawn.agent,
            workdir,
            budget_usd=request.budget_usd,
            budget_tokens=request.budget_tokens,
        )
        spawn.record(store, member_id, workdir, session_id)
        pane_env = {
            "CAFLEET_DATABASE_URL": database,
            "CAFLEET_MEMBER_ID": str(member_id),
            "CAFLEET_FLEET_ID": str(spawn.fleet_id),
        }
        pane_env.update(store.member_environment())  # the member's cafleet reaches the same tables
        pane_id, identity, window_id = layout.open_local(
            settings,
            hooks,
            placement,
            mux,
            spawn.argv(member_id, session_id),
            cwd=workdir,
            env=pane_env,
            mode=mode,
            fleet_name=fleets.get_fleet(store, spawn.fleet_id)["name"],
            member_panes=fleet_panes(store, spawn.fleet_id, placement["session"]),
        )
        return pane_id, identity, placement, window_id

    return _spawn(store, settings, spawn, placement, mux, plan, open_pane, hooks)


def fleet_panes(store: Store, fleet_id: int, session: str) -> set[str]:
    """The pane ids of the fleet's active members in ``session`` (those a split may halve)."""
    return {
        entry["placement"]["pane_id"]
        for entry in members.roster_detail(store, fleet_id)
        if entry["status"] == "active"
        and entry["placement"]
        and entry["placement"]["session"] == session
        and entry["placement"]["pane_id"]
    }


def _directors_pane(store: Store, environ, fleet_id: int):
    """(the Director's record, its placement, its multiplexer client), when this command
    runs in the Director's own pane: only the Director creates members."""
    from cafleet.mux.detect import multiplexer_for_environment

    director = members.get_member(store, fleets.require_live(store, fleet_id))
    placement = director["placement"]
    if placement is None or placement["pane_id"] is None:
        raise CafleetError(f"fleet {fleet_id}'s Director has no pane; recreate the fleet from a pane.")
    mux = reach(placement)  # a damaged placement is refused here, before anything is run or written
    caller = multiplexer_for_environment(environ).current_pane()
    if not _same_pane(caller, placement):
        raise CafleetError(
            f"only fleet {fleet_id}'s Director (pane {placement['pane_id']}) can create members; "
            f"this command runs in pane {caller.pane_id}"
            + (" of another server or an earlier pane with that id." if caller.pane_id == placement["pane_id"] else ".")
        )
    return director, placement, mux


def _check_spawn(store: Store, environ, spawn: Spawn, request: SpawnRequest) -> None:
    """The checks on what the member starts with: its agent's options, the spawn prompt,
    its budgets, and its fleet's budget (unless ``request.force``)."""
    from cafleet.agents import backends
    from cafleet.agents.prompt import check_template

    backends.validate(spawn.agent, spawn.model, spawn.effort)
    check_template(spawn.prompt)
    _check_command(
        spawn.prompt,
        agent=spawn.agent,
        name=spawn.name,
        model=spawn.model,
        effort=spawn.effort,
        fleet_id=spawn.fleet_id,
        director_id=spawn.director_id,
    )
    budget_usd, budget_tokens = request.budget_usd, request.budget_tokens
    _check_budgets(budget_usd, budget_tokens)
    if not request.force:  # the spawn prompt is new work: a fleet over its budget gets none
        from cafleet.broker import usage
        from cafleet.delivery.usage import check_fleet_budget

        check_fleet_budget(store, environ, spawn.fleet_id, usage.fleet_budget(store, spawn.fleet_id), "create")
    if (budget_usd is not None or budget_tokens is not None) and request.host is not None:
        raise CafleetError(
            "a member on another host has no budget: its agent's records are on that host; "
            "leave out --budget-usd/--budget-tokens."
        )


def _check_worktree_options(store: Store, request: SpawnRequest) -> bool:
    """Whether the member gets a worktree (``request.worktree`` None: the fleet's default),
    after checking that the options that shape it go together."""
    from cafleet.errors import UsageError

    worktree, branch, base, repo, host = request.worktree, request.branch, request.base, request.repo, request.host
    if worktree is None:
        from cafleet.broker import worktrees as worktree_records

        worktree = worktree_records.fleet_default(store, request.fleet_id)
    if not worktree and (branch is not None or base is not None):
        raise UsageError("--branch and --base choose the member's worktree; add --worktree.")
    if repo is not None and not (worktree and host is not None):
        raise UsageError("--repo names the repository on another host; it needs --worktree and --host.")
    if repo is not None and not repo.startswith("/"):
        raise UsageError(f"--repo must be an absolute path on the host, got {repo!r}.")
    return bool(worktree)


def _spawn(
    store: Store,
    settings: config.Settings,
    spawn: Spawn,
    placement: dict,
    mux,
    plan,
    open_pane,
    hooks: Hooks,
    close_unknown=None,
) -> dict:
    """The steps every creation shares: register the member pending (with ``placement``'s
    backend, session and window), add its worktree (``plan``), open its pane
    (``open_pane(member_id, worktree path or None)`` -> pane id, identity, the placement to
    record, its window id or None) and record the pane under its lock. A failure after the
    registration is compensated and raised as :class:`CreateFailed`; ``close_unknown(member_id)``
    closes, when cafleet never learnt the pane, what may have been started."""
    member_id = members.register_member(
        store,
        fleet_id=spawn.fleet_id,
        name=spawn.name,
        description=spawn.description,
        backend=placement["backend"],
        session=placement["session"],
        window_id=placement["window_id"],
        coding_agent=spawn.agent,
    )
    hooks.pause("create.registered")
    pane_id = None
    added = None
    try:
        if plan is not None:
            from cafleet.delivery import worktrees

            added = worktrees.add(store, plan, spawn.fleet_id, member_id, spawn.name, hooks)
        pane_id, identity, recorded, window_id = open_pane(member_id, added["path"] if added else None)
        hooks.pause("create.split")
        from cafleet.delivery.keystrokes.lock import placement_lock

        # the pane id (and, for a member on another host, its session and window) under the new pane's lock
        with placement_lock(store.locks, recorded, settings.lock_timeout, hooks, pane_id=pane_id):
            window = (recorded["session"], window_id) if window_id else None
            members.set_pane_id(store, member_id, pane_id, identity, window)
        hooks.pause("create.patched")
    except BaseException as error:  # noqa: BLE001 -- anything, a signal included, after the registration is undone and reported
        closed = None if pane_id is not None or close_unknown is None else close_unknown(member_id)
        message = _compensate(store, mux, member_id, pane_id, error, closed)
        if plan is not None:
            message = message[:-1] + _release_after_failure(store, settings.environ, member_id) + "."
        raise CreateFailed(message) from None
    out = {
        "member_id": member_id,
        "fleet_id": spawn.fleet_id,
        "name": spawn.name,
        "coding_agent": spawn.agent,
        "backend": placement["backend"],
        "pane_id": pane_id,
    }
    if added is not None:
        out["worktree"] = added
    return out


def _cwd() -> str:
    import os

    try:
        return os.getcwd()
    except OSError:
        raise CafleetError(
            "the current directory no longer exists, so the new pane has nowhere to start; "
            "cd to an existing directory and retry."
        ) from None


def _release_after_failure(store: Store, environ, member_id: int) -> str:
    """After a failed creation, the member's new worktree is removed when nothing would be
    lost (it was just made, so normally), else kept and said so."""
    from cafleet.delivery import worktrees

    try:
        result = worktrees.release(store, environ, member_id, discard=False)
    except CafleetError as error:
        return f", could not check its worktree ({clause(error)})"
    if result is None:
        return ""
    if result["status"] == "removed":
        return f", removed its worktree {result['path']} and branch {result['branch']}"
    return f", kept its worktree {result['path']} ({'; '.join(result['lost'])})"


def _check_budgets(usd: float | None, tokens: int | None) -> None:
    """A member's budgets within the bounds declared for ``--budget-usd``/``--budget-tokens``
    (the command line's parser checks them already; this guards every other caller)."""
    from cafleet.config import declared
    from cafleet.errors import UsageError

    for flag, value in (("--budget-usd", usd), ("--budget-tokens", tokens)):
        setting = declared(flag)
        if value is not None and (
            type(value) not in (int, float) or isinstance(value, bool) or not setting.low <= value <= setting.high
        ):
            raise UsageError(f"the member's budget must be {setting.allowed()}, got {value!r}.")


def _record_usage_source(store: Store, environ, member_id: int, agent: str, cwd: str, **budgets) -> str | None:
    """Choose what ties the member's usage records to it (claude: a new session id) and
    record it with the agent's data folder and the pane's cwd (docs/usage.md); returns
    claude's session id. The auxiliary table is created when the database has none yet."""
    from cafleet.agents import backends
    from cafleet.broker import usage

    session_id = None
    if agent == "claude":
        import uuid

        session_id = str(uuid.uuid4())
    data_dir = backends.data_dir(agent, environ)
    usage.record_source(
        store, member_id, coding_agent=agent, session_id=session_id, data_dir=data_dir, cwd=cwd, **budgets
    )
    return session_id


# Variables that describe this machine, not the fleet: never handed to a pane on another host.
_HOST_LOCAL = frozenset(
    {
        "CAFLEET_SSH_CONFIG",
        "CAFLEET_SSH_CONTROL_DIR",
        "CAFLEET_HOST",
        "CAFLEET_MULTIPLEXER",
        "CAFLEET_HERDR_BIN",
    }
)


def remote_pane_env(environ, database: str, host: str, fleet_id: int, member_id: int) -> dict[str, str]:
    """What a member's pane on ``host`` starts with: the caller's cafleet settings, those
    declared in :mod:`cafleet.config` only (a local pane inherits them from its tmux server;
    a remote server has its own), the database location, the member's ids, and
    ``CAFLEET_HOST`` naming the host it runs on. Any other ``CAFLEET_*`` variable stays here."""
    forwarded = config.declared_names() - _HOST_LOCAL
    env = {key: value for key, value in environ.items() if key in forwarded and value}
    env.update(
        CAFLEET_DATABASE_URL=database,
        CAFLEET_MEMBER_ID=str(member_id),
        CAFLEET_FLEET_ID=str(fleet_id),
        CAFLEET_HOST=host,
    )
    return env


def _create_remote(store: Store, settings: config.Settings, host: str, spawn: Spawn, plan, hooks: Hooks) -> dict:
    """A member on another host: check that the host answers and has tmux and the agent,
    register it pending (session ``ssh://<host>/``), open a detached tmux session of its
    own on the host's ``-L cafleet`` server, and record the session, window and pane.
    With ``plan`` (``--worktree``), the session starts in the member's new worktree there."""
    from cafleet.agents import backends
    from cafleet.mux.ssh import Ssh, join_session
    from cafleet.mux.tmux import Tmux

    environ = settings.environ
    ssh = Ssh(host, environ)
    probe = backends.build_argv(
        spawn.agent, member_name=spawn.name, prompt="", model=spawn.model, effort=spawn.effort, member_id=0
    )[0]
    missing = remote_missing(ssh, ["tmux", probe])
    if missing:
        raise CafleetError(
            f"{missing} is not installed on host {host} (not on its PATH for SSH commands); "
            "install it there, or check with `cafleet doctor --host`."
        )
    database = remote_database_location(ssh, settings.database)
    mux = Tmux(None, remote=ssh, label=REMOTE_SERVER)

    def open_pane(member_id: int, workdir: str | None) -> tuple[str, str | None, dict, str | None]:
        import uuid

        session_id = str(uuid.uuid4()) if spawn.agent == "claude" else None  # what a restore resumes
        spawn.record(store, member_id, workdir, session_id)
        session, window_id, pane_id, identity = mux.new_session(
            spawn.argv(member_id, session_id),
            env=remote_pane_env(environ, database, host, spawn.fleet_id, member_id),
            window_name=f"cafleet-{member_id}",
            cwd=workdir,
        )
        mux.socket = session.partition("@")[2]  # from now on, exactly the server that holds the pane
        return pane_id, identity, {"backend": "tmux", "session": join_session(host, session)}, window_id

    pending = {"backend": "tmux", "session": join_session(host, ""), "window_id": ""}
    out = _spawn(
        store,
        settings,
        spawn,
        pending,
        mux,
        plan,
        open_pane,
        hooks,
        close_unknown=lambda member_id: _close_started_session(ssh, member_id, database),
    )
    added = out.pop("worktree", None)
    out["host"] = host  # before the worktree, as the record has always been ordered
    if added is not None:
        out["worktree"] = added
    return out


# Closes the sessions of cafleet's server on the host ($1) whose environment is the one
# cafleet gave a member's pane: its member id ($2) and database ($3); prints their ids.
_CLOSE_STARTED = (
    'for s in $(tmux -L "$1" list-sessions -F "#{session_id}" 2>/dev/null); do '
    '[ "$(tmux -L "$1" show-environment -t "$s" CAFLEET_MEMBER_ID 2>/dev/null)" = "CAFLEET_MEMBER_ID=$2" ] '
    '&& [ "$(tmux -L "$1" show-environment -t "$s" CAFLEET_DATABASE_URL 2>/dev/null)" = "CAFLEET_DATABASE_URL=$3" ] '
    '&& tmux -L "$1" kill-session -t "$s" && printf "%s\\n" "$s"; done; true'
)


def _close_started_session(ssh, member_id: int, database: str) -> str:
    """After a failed creation whose pane cafleet never learnt (new-session's report was
    lost: unreadable, cut by a timeout or a signal), close the session it may have started
    on the host, found by what cafleet gave it: the member id (never reused) and the
    database, in its environment. What was done, for the clean-up report."""
    from cafleet.render import inline

    try:
        code, out, err = ssh.run(["sh", "-c", _CLOSE_STARTED, "sh", REMOTE_SERVER, str(member_id), database])
    except CafleetError as error:
        return f"could not confirm that no tmux session of it runs on host {ssh.host} ({clause(error)})"
    if code != 0:
        from cafleet.mux import first_line

        reason = first_line(err) or f"exit status {code}"
        return f"could not confirm that no tmux session of it runs on host {ssh.host} ({reason})"
    sessions = out.split()
    if not sessions:
        return f"found no tmux session of it on host {ssh.host}"
    return f"closed its tmux session on host {ssh.host} ({', '.join(inline(s) for s in sessions)})"


REMOTE_SERVER = "cafleet"  # the tmux server (-L) that holds members' panes on another host

# Writes standard input to a pgpass file in a private folder on the host ($1 is its name,
# never a secret) and prints the file's path: the host's own XDG_RUNTIME_DIR, else ~/.cache.
_REMOTE_PASSFILE = (
    'umask 077; d="${XDG_RUNTIME_DIR:-$HOME/.cache}/cafleet"; mkdir -p "$d" && [ -d "$d" ] && [ ! -L "$d" ] '
    '&& [ -O "$d" ] && chmod 700 "$d" && cat > "$d/$1.tmp" && mv -f "$d/$1.tmp" "$d/$1" && printf "%s\\n" "$d/$1"'
)


def remote_database_location(ssh, database: str) -> str:
    """The database location a member's pane on ``ssh``'s host gets
    (:func:`cafleet.store.remote_member_location`): a password it carries is written
    there, to a private pgpass file, through SSH's standard input (so the password is in
    no argv on either machine)."""
    from cafleet.store.engines import remote_member_location

    def keep_password(name: str, line: str) -> str:
        from cafleet.errors import MuxError
        from cafleet.mux import first_line

        code, out, err = ssh.run(["sh", "-c", _REMOTE_PASSFILE, "sh", name], input=line.encode())
        path = (out.strip().splitlines() or [""])[-1]
        if code != 0 or not (path.startswith("/") and path.endswith("/" + name)):
            raise MuxError(
                f"host {ssh.host} could not keep the database password in a private file "
                f"({first_line(err) or f'exit status {code}'}); nothing was written."
            )
        return path

    return remote_member_location(database, keep_password)


def remote_missing(ssh, programs: list[str]) -> str | None:
    """The first of ``programs`` the host cannot run (None: all there), in one SSH call."""
    script = 'for p; do command -v "$p" >/dev/null 2>&1 || { printf %s "$p"; exit 3; }; done'
    code, out, err = ssh.run(["sh", "-c", script, "sh", *programs])
    if code == 3:
        return out.strip() or programs[0]
    if code != 0:
        from cafleet.errors import MuxError
        from cafleet.mux import first_line

        raise MuxError(f"host {ssh.host} could not run a shell command ({first_line(err) or f'exit status {code}'}).")
    return None


def _compensate(
    store: Store, mux, member_id: int, pane_id: str | None, error: BaseException, closed: str | None = None
) -> str:
    """Undo a creation that failed after the registry write: close its pane (``closed``:
    what was done instead when cafleet never learnt the pane), deregister the member."""
    reason = clause(error) if isinstance(error, CafleetError) else f"{type(error).__name__}: {error}"
    undone = [] if closed is None else [closed]
    if pane_id is not None:
        try:
            mux.kill(pane_id)
            undone.append(f"closed pane {pane_id}")
        except CafleetError as kill_error:
            undone.append(f"could not confirm pane {pane_id} closed ({kill_error})")
    try:
        members.deregister_member(store, member_id)
        undone.append(f"deregistered member {member_id}")
    except CafleetError as db_error:
        undone.append(f"could not deregister member {member_id} ({db_error})")
    return f"member creation failed: {reason}; cleaned up: {', '.join(undone)}."


def _live_placement(store: Store, member_id: int) -> tuple[PlacementRecord, str]:
    """An active member's placement and its pane id; Conflict when it has no pane."""
    from cafleet.errors import Conflict

    record = members.get_member(store, member_id)
    placement = record["placement"]
    if record["status"] != "active" or placement is None:
        raise Conflict(f"member {member_id} is deregistered; it has no pane.")
    pane_id = placement["pane_id"]
    if pane_id is None:
        raise Conflict(f"member {member_id} has no pane yet (its creation is pending).")
    return placement, pane_id


def capture_member(store: Store, member_id: int, lines: int, ansi: bool) -> dict:
    """The last ``lines`` of the member's pane (``member capture``)."""
    placement, pane_id = _live_placement(store, member_id)
    screen = reach(placement).capture(pane_id, lines, ansi=ansi)
    return {"member_id": member_id, "pane_id": pane_id, "text": screen}


def prompt_member(
    store: Store, settings: config.Settings, member_id: int, text: str, *, force: bool = False, hooks: Hooks = NO_HOOKS
) -> dict:
    """Type one line into the member's agent and submit it, under the pane lock (``member
    prompt``). New work like a message: refused for a member over its budget or its
    fleet's unless ``force`` (the one gate, :func:`cafleet.delivery.keystrokes.drain.refuse_over_budget`)."""
    from cafleet.delivery.keystrokes import lock, submit
    from cafleet.delivery.keystrokes.drain import refuse_over_budget
    from cafleet.errors import UsageError

    if not text.strip() or "\n" in text or "\r" in text:
        raise UsageError("the prompt must be one non-blank line.")
    placement, pane_id = _live_placement(store, member_id)
    if not force:
        refuse_over_budget(store, settings.environ, member_id, "prompt")
    locks, timeout = store.locks, settings.lock_timeout
    mux = reach(placement)
    try:
        with lock.placement_lock(locks, placement, timeout, hooks) as held:
            mux = held.guard(mux)  # the lock is checked before each keystroke too
            submit.type_prompt(
                mux,
                pane_id,
                text,
                placement["coding_agent"],
                pacing=submit.Pacing(settings.submit_settle),
                hooks=hooks,
            )
    except lock.LockLost as error:
        from cafleet.delivery.keystrokes.drain import after_lost_lock

        typed = getattr(mux, "typed", False)
        raise CafleetError(after_lost_lock(locks, placement, text, timeout, error, typed) + ".") from None
    return {"member_id": member_id, "pane_id": pane_id, "submitted": True}
