"""Error types and the process exit codes they map to.

Every foreseeable failure is raised as a :class:`CafleetError` subclass whose message is
one sentence saying what is wrong. The library speaks of the domain (fleets, members,
names, bodies), never of command-line flags: what to do at the command line goes in the
optional ``hint``. The command line prints ``Error: <message>; <hint>`` (one line, see
:meth:`CafleetError.with_hint`) on stderr and exits with ``exit_code``; the WebUI answers
with the message alone.
"""

from __future__ import annotations

SHOWN_CHARS = 40


def shown(value: object) -> str:
    """A user-supplied value as quoted in an error message: cut short (with …) so an
    error never echoes a whole input."""
    text = str(value)
    return repr(text) if len(text) <= SHOWN_CHARS else repr(text[:SHOWN_CHARS]) + "…"


def clause(error: BaseException) -> str:
    """An error's message as a clause quoted inside another sentence (``…: <clause>.``,
    ``… (<clause>)``): the one-line message without its final full stop."""
    return str(error).rstrip(".")


class ExitCode:
    OK = 0
    FAILURE = 1
    USAGE = 2
    WAIT_TIMEOUT = 3


class CafleetError(Exception):
    """A failure the user can act on. ``str(error)`` is the one-line message; ``pane``: the
    pane id the message names, if it names one (a delivery failure names its pane once)."""

    exit_code = ExitCode.FAILURE

    def __init__(self, message: str, hint: str | None = None, *, pane: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.pane = pane

    def __str__(self) -> str:
        return self.message

    def with_hint(self) -> str:
        """The message and the hint as one sentence: "fleet 9 not found; `cafleet fleet
        list` shows the live fleets." (the message's final full stop becomes "; ")."""
        if not self.hint:
            return self.message
        return f"{self.message.removesuffix('.')}; {self.hint}"


class UsageError(CafleetError):
    """Bad flags, bad ids, empty text: exit 2."""

    exit_code = ExitCode.USAGE


class ConfigError(CafleetError):
    """A bad environment value or database location."""


class SettingError(ConfigError):
    """A setting (an environment variable or a numeric option) that cannot be parsed or is
    out of its declared range (:mod:`cafleet.config`): a usage error, exit 2."""

    exit_code = ExitCode.USAGE


class DatabaseError(CafleetError):
    """The database file cannot be used (diagnosis refused it, it is locked, unreadable)."""

    @classmethod
    def locked(cls, where: str, waited: float) -> DatabaseError:
        """A write that waited ``waited`` s for another process's lock on database
        ``where``: one wording for both engines and the write queue."""
        return cls(f"database {where} is locked by another process (waited {waited:g} s); try again.")


class ConstraintRefused(DatabaseError):
    """A rule of the database refused a write: a constraint, a UNIQUE index or a trigger's
    RAISE (the seed allows auxiliary indexes and triggers beside cafleet's own). The
    transaction is rolled back, so nothing of that write is stored."""


def constraint_refused(where: str, reason: str) -> ConstraintRefused:
    """The one line for a write a database rule refused (``reason``: the database's own
    first line, made display-safe and cut short)."""
    from cafleet.render import inline

    first = next((line.strip() for line in reason.splitlines() if line.strip()), "constraint failed")
    return ConstraintRefused(
        f"database {where} refused the change ({inline(first[:200])}): a constraint, unique index or trigger "
        "of this database does not allow it; nothing of it was stored."
    )


class DatabaseUnreachable(DatabaseError):
    """The database server cannot be reached, or it ended this connection's session (a
    restart, an administrator's ``pg_terminate_backend``, ``idle_session_timeout``): a
    long-running reader reconnects and reads again (:meth:`cafleet.store.changes.Changes.recover`)."""


class DatabaseGone(DatabaseError):
    """The database file was deleted or replaced under a running command: its open
    connection reads a file nobody else sees, so the command stops."""


class NotFound(CafleetError):
    """An id that names nothing."""


class Conflict(CafleetError):
    """The request is valid but the current state forbids it (inactive member, deleted
    fleet, cross-fleet send, acking a completed message, deleting the root Director)."""


class NotAllowed(Conflict):
    """The caller may not do this: a Director-only action from a member's pane, a member
    sending as another, an exec run outside its member's pane (docs/security.md)."""


class OverBudget(Conflict):
    """A member, or its fleet, is at or over its budget: it gets no new work (the WebUI
    answers 409; docs/usage.md)."""


class CorruptRow(CafleetError):
    """A stored value that this version cannot decode (unknown status, ...)."""


class MuxError(CafleetError):
    """A multiplexer call failed, timed out, or named a pane that is gone."""


class PaneGone(MuxError):
    """The target pane no longer exists."""


class PaneStale(PaneGone):
    """The stored pane id now names another pane (its multiplexer server restarted): the
    member's own pane is gone, and the one with its id must not be typed into or closed."""


class DamagedPlacement(MuxError, CorruptRow):
    """A stored placement value (session, window, pane, identity, host, backend) that does
    not match its multiplexer's encoding: written by hand or by a hostile database writer.
    Nothing is typed into, read from or closed through it, and no part of it reaches a
    multiplexer, SSH or a shell."""


class LockTimeout(CafleetError):
    """The pane-input lock could not be taken within its bounded wait."""


class AgentError(CafleetError):
    """A coding-agent backend problem (missing binary, bad model/effort)."""
