"""What every member creation shares, here or on another host: what the member is started
with (:class:`Spawn`, recorded for ``fleet restore`` and ``member revive``), the creation
under way (:class:`Creation`), its pending registration, its worktree added, its new pane
opened and its id recorded under the new pane's lock (the pane-id patch), and, when
anything after the registration fails, the creation undone and reported (:class:`CreateFailed`).

The ``hooks`` calls (the command's, passed in) are the test seam's pause points (:mod:`cafleet.faults`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cafleet import config
from cafleet.broker import members
from cafleet.errors import CafleetError, clause

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Any

    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


class CreateFailed(CafleetError):
    """Member creation failed after the registry write; the message says what was undone."""


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
class Creation:
    """One member creation under way: the command's store, settings and hooks, what the
    member is started with, its new worktree (``plan``; None: none), the placement its
    pending registration records (backend, session, window) and that placement's
    multiplexer client (what closes the pane if the creation is undone)."""

    store: Store
    settings: config.Settings
    spawn: Spawn
    plan: Any
    placement: dict
    mux: Any
    hooks: Hooks


def pane_environment(store: Store, database: str, fleet_id: int, member_id: int) -> dict[str, str]:
    """What a member's pane on this machine is started with besides its agent's own
    environment: the database it reaches (``database``, as
    :func:`cafleet.store.engines.member_location` gives it: no password), who it is, and what
    the store adds for the member's cafleet to reach the same tables."""
    env = {"CAFLEET_DATABASE_URL": database, "CAFLEET_MEMBER_ID": str(member_id), "CAFLEET_FLEET_ID": str(fleet_id)}
    env.update(store.member_environment())
    return env


def _register_pending(store: Store, spawn: Spawn, placement: dict) -> int:
    """Register the member pending, with ``placement``'s backend, session and window and no
    pane yet; its id."""
    return members.register_member(
        store,
        fleet_id=spawn.fleet_id,
        name=spawn.name,
        description=spawn.description,
        backend=placement["backend"],
        session=placement["session"],
        window_id=placement["window_id"],
        coding_agent=spawn.agent,
    )


def register_and_open(creation: Creation, open_pane, close_unknown=None) -> dict:
    """The steps every creation shares: register the member pending (with the creation's
    placement's backend, session and window), add its worktree (its ``plan``), open its pane
    (``open_pane(member_id, worktree path or None)`` -> pane id, identity, the placement to
    record, its window id or None) and record the pane under its lock. A failure after the
    registration is compensated and raised as :class:`CreateFailed`; ``close_unknown(member_id)``
    closes, when cafleet never learnt the pane, what may have been started."""
    store, spawn, plan, hooks = creation.store, creation.spawn, creation.plan, creation.hooks
    member_id = _register_pending(store, spawn, creation.placement)
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
        with placement_lock(store.locks, recorded, creation.settings.lock_timeout, hooks, pane_id=pane_id):
            window = (recorded["session"], window_id) if window_id else None
            members.set_pane_id(store, member_id, pane_id, identity, window)
        hooks.pause("create.patched")
    except BaseException as error:  # noqa: BLE001 -- anything, a signal included, after the registration is undone and reported
        closed = None if pane_id is not None or close_unknown is None else close_unknown(member_id)
        message = _compensate(store, creation.mux, member_id, pane_id, error, closed)
        if plan is not None:
            message = message[:-1] + _release_after_failure(store, creation.settings.environ, member_id) + "."
        raise CreateFailed(message) from None
    out = {
        "member_id": member_id,
        "fleet_id": spawn.fleet_id,
        "name": spawn.name,
        "coding_agent": spawn.agent,
        "backend": creation.placement["backend"],
        "pane_id": pane_id,
    }
    if added is not None:
        out["worktree"] = added
    return out


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
