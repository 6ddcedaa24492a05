"""Row decoding shared by the broker modules: stored enums are checked, never trusted.

The records the broker returns are plain dicts at run time (the JSON a command prints is
one of them, key for key, in their order); their shapes are declared here once, as
``TypedDict`` classes the type checker holds every builder and reader to. They exist for
the type checker only (``TYPE_CHECKING``): ``typing`` stays off the hot path, so a module
names them in annotations alone, importing them under its own ``TYPE_CHECKING``.
"""

from __future__ import annotations

from cafleet.errors import CorruptRow, NotFound

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Any, Literal, NotRequired, TypedDict

    from cafleet.store.protocol import Store

    MemberStatus = Literal["active", "deregistered"]  # MEMBER_STATUSES
    MessageState = Literal["input_required", "completed"]  # MESSAGE_STATES

    class FleetSummary(TypedDict):
        """A live fleet as ``fleet list`` gives it (``fleets.list_fleets``)."""

        fleet_id: int
        name: str | None
        director_member_id: int | None  # None only while the fleet is being bootstrapped
        active_members: int
        created_at: str

    class FleetRecord(FleetSummary):
        """One fleet, deleted ones too (``fleets.get_fleet``, ``fleet show``)."""

        deleted_at: str | None

    class NewFleet(TypedDict):
        """What ``fleets.create_fleet`` made (``fleet create``)."""

        fleet_id: int
        name: str
        director_member_id: int
        created_at: str

    class FleetDeletion(TypedDict):
        """What ``fleets.delete_fleet`` did."""

        fleet_id: int
        deregistered_count: int

    class PlacementRecord(TypedDict):
        """Where a member's agent runs (``member_placements``), the pane id decoded
        (:func:`decode_pane`): a member detail's ``placement``."""

        backend: str
        session: str
        window_id: str
        pane_id: str | None  # None while the pane is being created
        identity: str | None  # the pane's identity, None when unknown
        coding_agent: str
        created_at: str

    class MemberPlacement(PlacementRecord):
        """A placement with its member (``fleets.fleet_placements``: the panes to close)."""

        member_id: int

    class NotificationTarget(TypedDict):
        """An eligible recipient's placement, its pane concrete, and its fleet
        (``notifications.notification_target``)."""

        backend: str
        session: str
        window_id: str
        pane_id: str
        coding_agent: str
        fleet_id: int
        created_at: str
        identity: str | None

    class MemberBrief(TypedDict):
        """A roster record (``members.roster``, ``member list``, the WebUI's roster)."""

        member_id: int
        name: str
        kind: Literal["director", "member"]
        status: MemberStatus
        backend: str | None  # the placement's, None without one (as the two below)
        coding_agent: str | None
        pane_id: str | None
        last_activity_at: str | None
        idle_seconds: int | None
        # Added by the callers that show them, and only where they apply:
        state: NotRequired[str]  # state and state_detail: supervision.merge_states
        state_detail: NotRequired[str]
        worktree: NotRequired[dict[str, Any] | None]  # worktrees.public: member list and show
        spend: NotRequired[dict[str, Any]]  # spend ({"usd", "tokens"}) and budget: member list,
        budget: NotRequired[dict[str, Any] | None]  # for a member with a budget

    class MemberDetail(MemberBrief):
        """One member's detail record (``members.get_member``, ``roster_detail``,
        ``member show``): the roster record and these."""

        description: str
        registered_at: str
        deregistered_at: str | None
        fleet_id: int
        placement: PlacementRecord | None

    class NoticeRef(TypedDict):
        """What a notice is about (``notices.annotate``)."""

        subject: str
        member_id: int | None
        dialog: str | None

    class MessageRecord(TypedDict):
        """The public message record (:func:`message`; send, poll, show, ack, wait, listen)."""

        message_id: int
        from_member_id: int
        to_member_id: int
        created_at: str
        status_state: MessageState
        status_timestamp: str
        text: str
        kind: NotRequired[str]  # and notice: a notice's (notices.annotate)
        notice: NotRequired[NoticeRef]

    class AdminMessage(MessageRecord):
        """A message as the WebUI's timeline shows it (``timeline``): whether a preview was typed."""

        notified: bool

    class SendFailure(TypedDict):
        """A broadcast's recipient that got no message, and why (``messages.broadcast``)."""

        to_member_id: int
        error: str

    class BroadcastResult(TypedDict):
        """What ``messages.broadcast`` sent and to whom it could not (``message broadcast``)."""

        sent: list[MessageRecord]
        failed: list[SendFailure]


MEMBER_STATUSES = ("active", "deregistered")
MESSAGE_STATES = ("input_required", "completed")

# The one predicate for "not yet acknowledged". Written as "not completed" rather than
# "is input_required" so that a row with a value this version does not know is selected,
# then refused by :func:`message`, instead of being skipped in silence.
UNACKED = "status_state != 'completed'"


def is_self_send(from_id: int, to_id: int) -> bool:
    """The self-send rule: a message a member sends itself is stamped notified on insert
    and never typed into a pane (the same rule in SQL: :func:`cafleet.broker.notifications.unnotified`)."""
    return from_id == to_id


# Members that count as present: active ones, and any unknown value (refused on decoding).
NOT_DEREGISTERED = "status != 'deregistered'"

# Member ``m`` is not the root Director of its fleet ``f`` (a fleet being bootstrapped has
# none yet). A null-safe comparison both engines read alike: SQLite's ``IS NOT`` between
# two values is no PostgreSQL, and ``IS DISTINCT FROM`` needs SQLite 3.39
# (docs/storage.md "Differences, and where they live"); ``m.member_id`` is never NULL.
NOT_ROOT_DIRECTOR = "(f.director_member_id IS NULL OR m.member_id <> f.director_member_id)"


def encode_pane(pane_id: str | None, identity: str | None) -> str | None:
    """The ``mux_pane_id`` column value: ``<pane id> <identity>``, or the bare pane id when
    the identity is unknown (pane ids never contain a space)."""
    return f"{pane_id} {identity}" if pane_id is not None and identity else pane_id


def decode_pane(value: str | None) -> tuple[str | None, str | None]:
    """(pane id, identity or None) from a ``mux_pane_id`` column value (None stays None)."""
    return (None, None) if value is None else decode_concrete_pane(value)


def decode_concrete_pane(value: str) -> tuple[str, str | None]:
    """(pane id, identity or None) from a ``mux_pane_id`` value that is not NULL; a value
    without a space is a placement recorded before identities existed."""
    pane_id, _, identity = value.partition(" ")
    return pane_id, identity or None


MESSAGE_COLUMNS = "message_id, from_member_id, to_member_id, created_at, status_state, status_timestamp, text"
MESSAGE_KEYS = tuple(MESSAGE_COLUMNS.split(", "))


def member_status(member_id: int, value) -> MemberStatus:
    if value not in MEMBER_STATUSES:
        raise CorruptRow(
            f"member {member_id} has an unknown status {value!r} in the database "
            f"(expected {' or '.join(MEMBER_STATUSES)}); repair the row or use a newer cafleet."
        )
    return value


def unknown_member_status(store: Store, member_id: int) -> None:
    """Raise for a member already known to carry a status outside MEMBER_STATUSES."""
    row = store.execute("SELECT status FROM members WHERE member_id = ?", (member_id,)).fetchone()
    member_status(member_id, None if row is None else row[0])


def message(row) -> MessageRecord:
    """The public message record (never includes notified_at), from a row of MESSAGE_COLUMNS."""
    message_id, from_member_id, to_member_id, created_at, status_state, status_timestamp, text = row
    if status_state not in MESSAGE_STATES:
        raise CorruptRow(
            f"message {message_id} has an unknown status_state {status_state!r} in the database "
            f"(expected {' or '.join(MESSAGE_STATES)}); repair the row or use a newer cafleet."
        )
    return {
        "message_id": message_id,
        "from_member_id": from_member_id,
        "to_member_id": to_member_id,
        "created_at": created_at,
        "status_state": status_state,
        "status_timestamp": status_timestamp,
        "text": text,
    }


def has_table(store: Store, name: str, recheck: bool = False) -> bool:
    """Whether the auxiliary table ``name`` exists (the store's answer, which it may
    remember: ``recheck`` asks again)."""
    return bool(store.tables_present([name], recheck))


def rows_by_member(store: Store, table: str, columns: tuple[str, ...], member_ids: list[int]) -> list[tuple]:
    """The rows (``columns``, ``member_id`` first) of the auxiliary ``table`` for those of
    ``member_ids`` that have one; none when the list is empty or the table is absent."""
    if not member_ids or not store.tables_present([table]):
        return []
    marks = ",".join("?" * len(member_ids))
    return store.execute(
        f"SELECT {', '.join(columns)} FROM {table} WHERE member_id IN ({marks})", tuple(member_ids)
    ).fetchall()


def rows_in_fleet(store: Store, table: str, columns: str, fleet_id: int) -> list[tuple]:
    """The rows of ``columns`` (``a.`` the auxiliary ``table``'s, ``m.`` the member's) for
    the members of ``fleet_id`` (any status), by member; none when the table is absent."""
    if not store.tables_present([table]):
        return []
    return store.execute(
        f"SELECT {columns} FROM {table} a JOIN members m ON m.member_id = a.member_id WHERE m.fleet_id = ? "
        "ORDER BY a.member_id",
        (fleet_id,),
    ).fetchall()


def member_with_fleet(store: Store, member_id: int, columns: str, who: str = "member") -> tuple:
    """The row of ``columns`` (``m.`` the member's, ``f.`` its fleet's) for ``member_id``,
    or NotFound naming it as ``who``."""
    row = store.execute(
        f"SELECT {columns} FROM members m JOIN fleets f ON f.fleet_id = m.fleet_id WHERE m.member_id = ?",
        (member_id,),
    ).fetchone()
    if row is None:
        raise NotFound(f"{who} {member_id} not found.")
    return row


def placed_members(store: Store) -> list[dict]:
    """Every present member with a concrete pane, in every fleet: ``member_id``,
    ``fleet_id``, ``director`` (whether it is its fleet's root Director), ``backend``,
    ``session``, ``pane_id`` and ``identity`` (None for a placement recorded before
    identities existed). What :mod:`cafleet.delivery.authority` matches a process against
    (here, not in :mod:`cafleet.broker.members`, so a send loads no more than this).

    It reads every placement: a deregistered member's is deleted with it, so that table
    holds only the members present now, in every fleet; ``+p.member_id`` keeps the planner
    reading it first and each member by its key, never scanning ``members`` (all ever)."""
    rows = store.execute(
        "SELECT m.member_id, m.fleet_id, f.director_member_id, p.backend, p.mux_session, p.mux_pane_id "
        "FROM member_placements p JOIN members m ON m.member_id = +p.member_id "
        f"JOIN fleets f ON f.fleet_id = m.fleet_id WHERE m.{NOT_DEREGISTERED} AND p.mux_pane_id IS NOT NULL "
        "ORDER BY m.member_id"
    ).fetchall()
    found = []
    for member_id, fleet_id, director_id, backend, session, stored_pane in rows:
        pane_id, identity = decode_concrete_pane(stored_pane)
        found.append(
            {
                "member_id": member_id,
                "fleet_id": fleet_id,
                "director": member_id == director_id,
                "backend": backend,
                "session": session,
                "pane_id": pane_id,
                "identity": identity,
            }
        )
    return found
