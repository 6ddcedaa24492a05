"""The notification drain (docs/delivery.md): at-least-once pane previews for one recipient.

For each message owed a preview (oldest first, each at most once per invocation): take
the recipient's pane-input lock, re-check eligibility and placement under it, type the
preview and submit it, and only then stamp ``notified_at`` with a conditional update (an
ACK that came first counts as notified). No database transaction is open while typing.
Any per-attempt failure leaves ``notified_at`` NULL and ends the drain with a diagnostic
naming the message ids still owed and what retries them: the fleet keeper (started here
when none runs, :mod:`cafleet.delivery.supervision.keeper_control`), else, after why no keeper runs and what
fixes that, the next send to that recipient or a later ``message wait``. A recipient whose
pane is gone is said to be so, with what to do: nothing can deliver to it.

A stored message is never reported as a failure: once a send has committed, every fault
of the delivery path, an ``OSError`` of the lock folder or of the multiplexer client
included, and even an unexpected exception, becomes that diagnostic (the caller exits 0
with the id printed), never an error that would make an agent resend.

``message wait``'s fleet-wide retry (:func:`retry_fleet`) never queues behind another
process: it tries each pane's lock once without waiting and skips a busy pane, whose
holder is delivering right now (its drain takes every owed preview of that recipient,
oldest first); a preview still owed is retried by the next send, wait or ``fleet watch``.

Keys are sent only through the lock's guard (:meth:`cafleet.delivery.keystrokes.lock.Held.guard`):
on PostgreSQL a lock lost with its session stops the typing (:class:`~cafleet.delivery.keystrokes.lock.LockLost`), and
:func:`after_lost_lock` takes the lock again to remove our own typed text.

The ``hooks`` calls are the test seam's pause and trace points (:mod:`cafleet.faults`).

Imports of the multiplexer and typing code happen only when there is a pane to type into,
so a send to the Director or a self-send costs nothing here.
"""

from __future__ import annotations

from cafleet import config
from cafleet.broker import messages, notifications
from cafleet.broker.records import is_self_send
from cafleet.errors import CafleetError, clause
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from cafleet.broker.records import BroadcastResult, MessageRecord, NotificationTarget
    from cafleet.faults import Hooks
    from cafleet.mux.base import Multiplexer
    from cafleet.store.protocol import LockSpace, Store


class Outcome:
    """What one drain did for one message of interest."""

    __slots__ = ("failure", "notified")

    def __init__(self, notified: bool, failure: str | None = None) -> None:
        self.notified = notified
        self.failure = failure


def send(
    store: Store,
    settings: config.Settings,
    from_id: int,
    to_id: int,
    text: str,
    on_stored=None,
    force: bool = False,
    hooks: Hooks = NO_HOOKS,
) -> tuple[MessageRecord, Outcome]:
    """The one send path (CLI and WebUI): persist, then run the drain for the recipient.

    A recipient over its budget (or its fleet's) gets no new work: refused before anything
    is stored, unless ``force`` (docs/usage.md). ``on_stored(record)`` runs between the
    two: the message is durable by then, so the caller can print its id before any typing
    that might hang or be killed.
    """
    if not force:
        refuse_over_budget(store, settings.environ, to_id)
    record = messages.send(store, from_id, to_id, text, hooks)
    hooks.pause("send.after_commit")
    if on_stored is not None:
        on_stored(record)
    return record, notify_after_send(store, settings, to_id, record, hooks)


def broadcast(
    store: Store,
    settings: config.Settings,
    director_id: int,
    text: str,
    on_stored=None,
    each=None,
    opener: Callable[[], Store] | None = None,
    hooks: Hooks = NO_HOOKS,
) -> tuple[BroadcastResult, list[Outcome]]:
    """Fan-out: every committed message is notified like a single send (``on_stored``
    as in :func:`send`, with the whole result; ``each`` as in
    :func:`cafleet.broker.messages.broadcast`, with each recipient's record or failure).

    With ``opener`` (a new connection to the same database), the recipients are notified
    at once, up to ``store.broadcast_workers`` at a time (fewer on PostgreSQL), each by a
    thread with a connection of its own: each recipient's drain is the one a single send
    runs (its own pane's lock, oldest first, revalidated under the lock, stamped after a
    confirmed submission), and different recipients share nothing but the database.
    Without it, one after another. The outcomes are in the order of ``result["sent"]``
    either way."""

    def over_budget(to_id: int) -> str | None:
        try:
            refuse_over_budget(store, settings.environ, to_id)
        except CafleetError as error:
            return str(error)
        return None

    result = messages.broadcast(store, director_id, text, refuse=over_budget, each=each)
    if on_stored is not None:
        on_stored(result)
    sent = result["sent"]
    if opener is None or len(sent) < 2:
        return result, [notify_after_send(store, settings, r["to_member_id"], r, hooks) for r in sent]
    return result, _notify_at_once(store, settings, sent, opener, hooks)


def _notify_at_once(
    store: Store, settings: config.Settings, sent: list[MessageRecord], opener: Callable[[], Store], hooks: Hooks
) -> list[Outcome]:
    """:func:`notify_after_send` of every record of ``sent``, up to
    ``store.broadcast_workers`` recipients at a time (32 on SQLite, 8 on PostgreSQL),
    each worker thread on a store of its own from ``opener``. A record whose worker could not open one is notified afterwards,
    here, on ``store`` (the stored message never becomes an error)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    workers = store.broadcast_workers
    local = threading.local()
    opened: list[Store] = []
    guard = threading.Lock()

    def notify(record: MessageRecord) -> Outcome | None:
        own = getattr(local, "store", None)
        if own is None:
            try:
                own = local.store = opener()
            except Exception:  # noqa: BLE001 -- this record is notified on the caller's store instead
                return None
            with guard:
                opened.append(own)
        return notify_after_send(own, settings, record["to_member_id"], record, hooks)

    try:
        with ThreadPoolExecutor(min(len(sent), workers), thread_name_prefix="cafleet-broadcast") as pool:
            outcomes = list(pool.map(notify, sent))
    finally:
        for own in opened:
            own.close()
    return [
        outcome if outcome is not None else notify_after_send(store, settings, record["to_member_id"], record, hooks)
        for record, outcome in zip(sent, outcomes)
    ]


def refuse_over_budget(store: Store, environ, member_id: int, action: str = "send") -> None:
    """The one budget gate, on every way new work reaches a member (``message send``,
    ``message broadcast``, the WebUI's send, ``member prompt``): raise
    :class:`~cafleet.errors.OverBudget` when ``member_id`` or its fleet is at or over its
    budget (docs/usage.md). Costs one catalogue lookup and one query when no budget is
    set; only then are the agents' records read."""
    from cafleet.broker import usage

    budgets = usage.budgets_for_send(store, member_id)
    if budgets is not None:
        from cafleet.delivery.usage import check_budget

        check_budget(store, environ, member_id, budgets, action)


def notify_after_send(
    store: Store, settings: config.Settings, recipient_id: int, record: MessageRecord, hooks: Hooks = NO_HOOKS
) -> Outcome:
    """Run the drain after ``record`` was committed; report whether it was notified."""
    if is_self_send(record["from_member_id"], record["to_member_id"]):
        return Outcome(True)  # self-sends are stamped on insert and type nothing
    message_id = record["message_id"]
    target = None
    try:
        target = notifications.notification_target(store, recipient_id)
        if target is None:
            return Outcome(False)  # the root Director and pending placements poll/listen instead
        stamped: set[int] = set()
        failure = drain(store, settings, recipient_id, set(), stamped, hooks=hooks)
        notified = message_id in stamped or not notifications.still_pending_notification(store, message_id)
    except Exception as error:  # noqa: BLE001 -- the message is stored: a fault here is a warning, never a failure
        # still owed: the keeper (started now if none runs) retries it, as after any other failure
        if target is not None:
            keeper = fleet_keeper(store, settings, target["fleet_id"], hooks)
        else:
            keeper = f"Whether a fleet keeper runs is not known (member {recipient_id}'s placement could not be read)"
        return Outcome(False, not_notified(message_id, recipient_id, _unexpected(error), keeper))
    if failure is None and not notified:
        failure = f"member {recipient_id}'s placement changed before message {message_id} could be typed"
    if failure is None:
        return Outcome(notified)
    if notified:
        return Outcome(True)
    keeper = fleet_keeper(store, settings, target["fleet_id"], hooks)
    return Outcome(False, not_notified(message_id, recipient_id, failure, keeper, target["fleet_id"]))


def retry_fleet(
    store: Store, settings: config.Settings, member_id: int, keeper_why: str | None = None, hooks: Hooks = NO_HOOKS
) -> list[Outcome]:
    """``message wait``'s first step: retry every preview owed in the member's fleet.
    ``keeper_why``: what :func:`fleet_keeper` said already (asked here at the first failure
    otherwise).

    Each pane's lock is tried once without waiting: a busy pane is skipped (its holder is
    delivering), so the caller's own wake-up never queues behind another member's pane.
    """
    _state, fleet_id = messages.member_standing(store, member_id)
    outcomes = []
    attempted: set[int] = set()
    keeper = keeper_why
    for recipient_id in notifications.recipients_owed_notifications(store, fleet_id):
        before = set(attempted)
        target = None
        try:
            target = notifications.notification_target(store, recipient_id)
            if target is None:
                continue
            failure = drain(store, settings, recipient_id, attempted, set(), wait_for_lock=False, hooks=hooks)
            if failure:
                owed = notifications.owed_message_ids(store, recipient_id)
                if keeper is None:
                    keeper = fleet_keeper(store, settings, fleet_id, hooks)
        except Exception as error:  # noqa: BLE001 -- nothing here may keep the caller from its own messages
            failure, owed = _unexpected(error), sorted(attempted - before)  # at least the one that failed
            if keeper is None:
                keeper = fleet_keeper(store, settings, fleet_id, hooks)
        if failure and owed:
            outcomes.append(Outcome(False, not_notified(owed, recipient_id, failure, keeper or "", fleet_id)))
    return outcomes


def keeper_off(fleet_id: int) -> str:
    return f"The fleet keeper is off (CAFLEET_KEEPER=off; `cafleet fleet watch {fleet_id}` does its work while it runs)"


def fleet_keeper(store: Store, settings: config.Settings, fleet_id: int, hooks: Hooks = NO_HOOKS) -> str:
    """Why no keeper works for the fleet and what fixes that (one sentence); an empty
    string while its keeper runs (started now if none did, :func:`keeper_control.ensure
    <cafleet.delivery.supervision.keeper_control.ensure>`). Never an error."""
    if not settings.keeper:
        return keeper_off(fleet_id)  # off: nothing is imported or started
    try:
        from cafleet.delivery.supervision import keeper_control

        found = keeper_control.ensure(store, settings, fleet_id, hooks.program)
    except Exception as error:  # noqa: BLE001 -- a keeper that cannot be started leaves the message owed, never an error
        return f"No fleet keeper could be started for fleet {fleet_id} ({_unexpected(error)})"
    return "" if found.running else found.why or f"No fleet keeper runs for fleet {fleet_id}"


def _unexpected(error: Exception) -> str:
    if isinstance(error, CafleetError):
        return clause(error)
    if isinstance(error, OSError):
        return f"pane input failed with an operating-system error ({error})"
    return f"delivery stopped by an internal error ({type(error).__name__}: {error})"


def start_keeper(store: Store, settings: config.Settings, fleet_id: int, hooks: Hooks = NO_HOOKS) -> str | None:
    """For a command that needs the fleet's keeper (``fleet create``, ``member create``):
    start it when none runs; the warning to print when none works (:func:`keeper_warning`),
    else None (nothing with the keeper off: that is the user's choice)."""
    if not settings.keeper:
        return None
    why = fleet_keeper(store, settings, fleet_id, hooks)
    return keeper_warning(why) if why else None


def keeper_warning(why: str) -> str:
    """What a command that needs the keeper prints when none works (``why``: :func:`fleet_keeper`'s)."""
    return (
        f"Warning: {why}. Until a keeper runs, no notice reaches the Director (a member blocked on a dialog, "
        "a dead pane) and owed previews wait for the next send or `cafleet message wait`."
    )


class PaneGoneReason(str):
    """A drain's failure reason that says the recipient's pane is gone: no retry can deliver."""


def not_notified(message_ids, recipient_id: int, reason: str, no_keeper: str, fleet_id: int | None = None) -> str:
    """The not-notified line: the ids still owed (one id or a list), the reason, and what
    will happen: nothing until the recipient is started again, while its pane is gone
    (``reason`` a :class:`PaneGoneReason`; ``fleet_id`` names the restore command); the fleet keeper's retry when one runs (``no_keeper`` is "");
    else why no keeper runs and what fixes that (``no_keeper``), and which commands retry."""
    ids = [message_ids] if isinstance(message_ids, int) else list(message_ids)
    many = len(ids) > 1
    if many:
        head = f"Warning: messages {', '.join(map(str, ids))} are stored but member {recipient_id} was not notified"
    else:
        head = f"Warning: message {ids[0]} is stored but member {recipient_id} was not notified"
    it = "them" if many else "it"
    if isinstance(reason, PaneGoneReason):
        restore = f"`cafleet fleet restore {fleet_id}`" if fleet_id is not None else "`cafleet fleet restore`"
        retry = (
            f"Member {recipient_id}'s pane is gone: {'they wait' if many else 'it waits'} until `cafleet member revive "
            f"{recipient_id}` starts it again, its conversation resumed (when the Director's pane is gone too, "
            f"{restore} from a new pane), and the fleet keeper then delivers {it}"
        )
    elif not no_keeper:
        retry = f"The fleet keeper retries {it} as soon as the pane can take {it}"
    else:
        retry = (
            f"{no_keeper}. The preview{'s' if many else ''} will be retried by the next send to member "
            f"{recipient_id} or a later `cafleet message wait`"
        )
    return f"{head}: {reason}. {retry}. Do not resend."


def drain(
    store: Store,
    settings: config.Settings,
    recipient_id: int,
    attempted: set,
    stamped: set,
    *,
    wait_for_lock: bool = True,
    reach: Callable[[NotificationTarget], Multiplexer] | None = None,
    hooks: Hooks = NO_HOOKS,
) -> str | None:
    """Deliver owed previews to one recipient; return a failure reason or None.

    ``wait_for_lock=False``: one attempt at the pane's lock; when another process holds
    it, stop quietly (None): the holder is delivering and the previews stay owed.
    ``reach(target)``: the multiplexer that reaches the recipient's pane, its identity
    checked (:func:`cafleet.delivery.keystrokes.placement.reach`, unless a test gives a pane that
    replays recorded screens).
    """
    from cafleet.delivery.keystrokes import lock, preview, submit

    if reach is None:
        from cafleet.delivery.keystrokes import placement

        reach = placement.reach

    timeout = settings.lock_timeout if wait_for_lock else 0

    while True:
        pending = notifications.next_pending_notification(store, recipient_id, attempted)
        if pending is None:
            return None
        message_id = pending["message_id"]
        attempted.add(message_id)
        target = notifications.notification_target(store, recipient_id)
        if target is None:
            return None
        mux = text = None
        try:
            with lock.placement_lock(store.locks, target, timeout, hooks) as held:
                refusal = _refusal(store, recipient_id, target, message_id)
                if refusal == "":
                    continue  # ACKed or notified by another process meanwhile
                if refusal is not None:
                    return refusal
                hooks.pause("drain.locked")
                text = preview.render_preview(
                    message_id, pending["from_member_id"], pending["created_at"], pending["text"], settings.max_text_len
                )
                # reach: the pane's recorded identity is checked before each keystroke;
                # guard: so is the lock (on PostgreSQL it can be lost with its session).
                mux = held.guard(reach(target))
                earlier = held.entered_before(message_id)
                # the agent's record is asked only when an Enter was pressed before, or may
                # have been (PostgreSQL keeps no record of Enters)
                recorded = (
                    _agent_record(store, recipient_id, target, text) if earlier or not held.keeps_entered else None
                )
                hooks.trace(f"drain.typing {message_id}")  # test-only count (cafleet.faults)
                submit.submit_preview(
                    mux,
                    target["pane_id"],
                    text,
                    target["coding_agent"],
                    pacing=submit.Pacing(settings.submit_settle),
                    ours=_our_preview_line(store, recipient_id),
                    earlier=earlier,
                    recorded=recorded,
                    on_enter=_noting(held, message_id),
                    hooks=hooks,
                )
                hooks.trace(f"drain.submitted {message_id}")
                hooks.pause("drain.submitted")
                if notifications.stamp_notified(store, message_id):
                    stamped.add(message_id)
                held.forget_entered(message_id)
                hooks.pause("drain.stamped")
        except lock.LockLost as error:
            typed = getattr(mux, "typed", False)
            return after_lost_lock(store.locks, target, text or "", timeout, error, typed)
        except (CafleetError, OSError) as error:  # OSError: the multiplexer client could not run
            return stop_reason(error, target["pane_id"], wait_for_lock)


def stop_reason(error: Exception, pane_id: str, wait_for_lock: bool = True) -> str | None:
    """Why a drain stops after ``error`` (raised while it held, or waited for, the pane's
    lock; not a lost lock, whose typed text is taken back first): the reason, naming the
    pane once (:func:`_with_pane`), or None when it stops quietly: a lock another process
    holds, tried once (``wait_for_lock=False``), means its holder is delivering."""
    from cafleet.errors import LockTimeout

    if isinstance(error, LockTimeout) and not wait_for_lock:
        return None  # busy: its holder is delivering; nothing is wrong
    return _with_pane(error, pane_id)


def _refusal(store: Store, recipient_id: int, target: NotificationTarget, message_id: int) -> str | None:
    """Checked under the pane lock, before typing: None when the preview may be typed, ""
    when it needs no typing any more (ACKed or notified by another process meanwhile), else
    why the drain stops (the placement changed; an exec holds the pane)."""
    from cafleet.broker import execs

    if notifications.notification_target(store, recipient_id) != target:
        return f"member {recipient_id}'s placement changed during delivery"
    if not notifications.still_pending_notification(store, message_id):
        return ""
    running = execs.running_for(store, target["fleet_id"], recipient_id)
    if running is not None:  # its pane belongs to that command until it ends
        return f"member {recipient_id}'s pane is running exec {running['exec_id']}; previews wait until it ends"
    return None


def _agent_record(store: Store, member_id: int, target: NotificationTarget, text: str) -> Callable[[], bool] | None:
    """What tells whether the recipient's agent already recorded the preview ``text`` as a
    message it was sent (its header begins one of the user's messages): opencode's own
    database, read on this host, for a member whose usage source names its data folder;
    None for the other agents (their history is searched on screen) and members elsewhere."""
    if target["coding_agent"] != "opencode" or target["session"].startswith("ssh://"):
        return None
    from cafleet.broker import usage

    source = usage.sources(store, [member_id]).get(member_id)
    if source is None or not source["data_dir"]:
        return None
    header = text.split("]", 1)[0] + "]"

    def recorded() -> bool:
        from cafleet.agents import previews

        return previews.opencode_user_text_starts(
            source["data_dir"],
            cwd=source["cwd"],
            started_at=source["started_at"],
            fleet_id=target["fleet_id"],
            member_id=member_id,
            start=header,
        )

    return recorded


def _noting(held, message_id: int):
    """What records, in the pane's lock file, that an Enter is pressed for this preview."""

    def note() -> None:
        held.note_entered(message_id)

    return note


def _our_preview_line(store: Store, recipient_id: int):
    """What tells our own preview left in the recipient's input box (an earlier attempt
    gave up before the agent drew it, or typed it with another ``CAFLEET_MAX_TEXT_LEN``):
    given the box's text, the whole uncut line a preview of the message its header names
    would start with (``[cafleet msg <id> from <sender> <created_at>]⏎<body>``), when that
    message was sent to this recipient by that sender; None otherwise."""
    from cafleet.delivery.keystrokes.preview import NEWLINE_MARK, flatten
    from cafleet.delivery.keystrokes.submit import PREVIEW_HEAD

    def line_of(box: str) -> str | None:
        if not box.startswith(PREVIEW_HEAD):
            return None
        word = box[len(PREVIEW_HEAD) :].split(" ", 1)[0]
        if not (word.isascii() and word.isdigit()):
            return None
        found = notifications.preview_source(store, recipient_id, int(word))
        if found is None:
            return None
        header = f"{PREVIEW_HEAD}{word} from {found['from_member_id']} {flatten(found['created_at'])}]"
        return header + NEWLINE_MARK + flatten(found["text"])

    return line_of


def after_lost_lock(
    locks: LockSpace, placement: Mapping[str, Any], text: str, timeout: float, error: CafleetError, typed: bool
) -> str:
    """What to say after the pane-input lock was lost while typing ``text`` into the
    placement's pane: if anything was typed, the lock is taken again (bounded by
    ``timeout``) and our own typed text removed from the input box (submit.take_back)."""
    from cafleet.delivery.keystrokes import lock, submit
    from cafleet.delivery.keystrokes.placement import reach

    reason = clause(error)
    if not typed:
        return f"{reason}; nothing had been typed"
    pane_id = placement["pane_id"]
    try:
        with lock.placement_lock(locks, placement, timeout) as held:
            return f"{reason}; " + submit.take_back(
                held.guard(reach(placement)), pane_id, text, placement["coding_agent"]
            )
    except (CafleetError, OSError) as failure:
        return f"{reason}; the typed text could not be taken back ({_unexpected(failure)})"


def _with_pane(error: Exception, pane_id: str) -> str:
    """The error as a reason that names the pane once (most errors name it already, as
    their ``pane``; a timeout of the multiplexer or an operating-system error does not); a
    :class:`PaneGoneReason` when the pane is gone (or stale: its own pane is gone)."""
    from cafleet.errors import PaneGone
    from cafleet.mux import printable

    reason = _unexpected(error)
    if getattr(error, "pane", None) != pane_id:
        reason = f"{reason} (pane {printable(pane_id)})"
    return PaneGoneReason(reason) if isinstance(error, PaneGone) else reason
