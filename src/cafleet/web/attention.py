"""What needs a person, for the WebUI: the same conditions `cafleet fleet watch` reports.

A member is *blocked* (its pane shows a permission prompt or a question) or *dead* (its
pane is gone, its program exited, or the pane id is stale) by the states of
``delivery.supervision`` — the function behind `fleet watch`, `member list --state` and
the roster — and a preview is *owed* when a message to an eligible member stayed
unnotified for longer than `fleet watch`'s default interval, found by the same query its
retries use (``broker.notifications.stale_notifications``). Each item carries the command
`fleet watch` suggests for it.

A blocked member's item also carries its dialog (``dialog``: the visible text, the options
and the digest, :mod:`cafleet.delivery.keystrokes.dialog`; options without numbers on the screen, such as
opencode's permission buttons, numbered 1..N left to right, with ``numbered`` false; one more
screen read per blocked member), which the page shows with one button per option; a button posts to
``/api/members/{id}/answer`` with the digest, the same answer path as ``cafleet member
answer`` (:mod:`cafleet.delivery.keystrokes.answer`), so a dialog that changed meanwhile is refused.

Beside the items, ``notices`` lists the fleet's notices whose condition still holds (an
open episode: a member awaiting its user, a dead pane with messages owed, a silent member,
an unreachable host, a member over budget), each as the very object the keeper posts to a
plain-JSON webhook (:func:`cafleet.delivery.supervision.outbox.document`, its only builder), so that a
script polling ``GET /api/fleets/{id}`` can do what a webhook's receiver does.

Items hold no timestamps, so the list only changes when the situation does (a notice's
``created_at`` is its own, fixed); the event stream sends it with every roster update
(``fleet_view``), and the page turns it into a banner, a count in the tab title and, when
allowed, a desktop notification.
"""

from __future__ import annotations

from cafleet import config
from cafleet.broker import notifications
from cafleet.delivery.supervision import liveness

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

OWED_AFTER = float(config.declared("--interval").default)  # `fleet watch`'s default interval
MAX_OWED = 50  # owed previews listed; the rest are counted
MAX_NOTICES = 50  # open notices listed, oldest first


def items(
    store: Store,
    fleet_id: int,
    states: dict[int, tuple[str, str]],
    owed_after: float | None = None,
    settings: config.Settings | None = None,
) -> dict:
    """``{"items": [...], "owed_more": N, "notices": [...]}``; each item ``{"kind",
    "member_id", "message_id", "detail", "command"}`` with ``kind`` one of ``blocked``,
    ``dead``, ``notify``; a blocked one also ``"dialog"`` (``{"text", "options", "digest"}``,
    or None when it cannot be read). ``notices``: the open notices as the keeper posts them
    (the link from ``settings``' CAFLEET_PUBLIC_URL, none without settings)."""
    from cafleet.delivery.supervision import watch

    owed_after = OWED_AFTER if owed_after is None else owed_after

    out = []
    for member_id, (state, detail) in sorted(states.items()):
        if state in (liveness.BLOCKED, liveness.DEAD):
            item = {
                "kind": state,
                "member_id": member_id,
                "message_id": None,
                "detail": detail,
                "command": watch.ACTIONS[state].format(member_id=member_id),
            }
            if state == liveness.BLOCKED:
                item["dialog"] = dialog_of(store, member_id)
            out.append(item)
    owed = notifications.stale_notifications(store, fleet_id, watch._iso_seconds_ago(owed_after))
    for message_id, recipient in owed[:MAX_OWED]:
        out.append(
            {
                "kind": "notify",
                "member_id": recipient,
                "message_id": message_id,
                "detail": f"preview of message {message_id} still not delivered after {owed_after:g} s",
                "command": f"cafleet member capture {recipient}",
            }
        )
    return {"items": out, "owed_more": max(0, len(owed) - MAX_OWED), "notices": open_notices(store, fleet_id, settings)}


def open_notices(store: Store, fleet_id: int, settings: config.Settings | None) -> list[dict]:
    """The fleet's open notices, each the document a plain-JSON webhook gets."""
    from cafleet.broker import notify

    rows = notify.open_notices(store, fleet_id, MAX_NOTICES)
    if not rows:
        return []
    from cafleet.broker import fleets
    from cafleet.credentials import Scrubber
    from cafleet.delivery.supervision import outbox

    public_url, scrub = outbox.reader(settings) if settings is not None else ("", Scrubber(""))
    fleet = fleets.get_fleet(store, fleet_id)
    return [outbox.document(store, fleet_id, row, public_url, scrub, fleet) for row in rows]


def dialog_of(store: Store, member_id: int) -> dict | None:
    """The dialog on a blocked member's screen, for its buttons; None when the screen can
    no longer be read or shows no dialog now (answered meanwhile)."""
    from cafleet.delivery.keystrokes.answer import dialog_on

    seen = dialog_on(store, member_id)
    return None if seen is None else seen.as_json()


def every_fleet(store: Store) -> list[dict]:
    """The blocked members of every live fleet, oldest first, for the page a person answers
    from (``/attention``, ``GET /api/attention``): each ``{"fleet_id", "fleet", "member_id",
    "name", "detail", "since", "dialog"}``. ``since`` is when the keeper's ``awaiting_user``
    notice about it was posted (None when none is open: the keeper is off or has not looked
    yet; those come last, by fleet and member)."""
    from cafleet.broker import fleets, members, notices

    pool = liveness.MuxPool()
    out = []
    for fleet in fleets.list_fleets(store):
        roster = members.roster_detail(store, fleet["fleet_id"])
        states = liveness.fleet_states(store, fleet["fleet_id"], pool, roster=roster)
        names = {entry["member_id"]: entry["name"] for entry in roster}
        episodes = notices.open_episodes(store, fleet["fleet_id"])
        for member_id, (state, detail) in sorted(states.items()):
            if state != liveness.BLOCKED:
                continue
            episode = episodes.get(("awaiting_user", f"member:{member_id}"))
            since = episode["opened_at"] if episode else None
            out.append(
                {
                    "fleet_id": fleet["fleet_id"],
                    "fleet": fleet["name"],
                    "member_id": member_id,
                    "name": names.get(member_id),
                    "detail": detail,
                    "since": since,
                    "dialog": dialog_of(store, member_id),
                }
            )
    out.sort(key=lambda item: (item["since"] is None, item["since"] or "", item["fleet_id"], item["member_id"]))
    return out
