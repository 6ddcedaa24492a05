"""What needs a person, for the WebUI: the same conditions `cafleet fleet watch` reports.

A member is *blocked* (its pane shows a permission prompt or a question) or *dead* (its
pane is gone, its program exited, or the pane id is stale) by the states of
``delivery.supervision`` — the function behind `fleet watch`, `member list --state` and
the roster — and a preview is *owed* when a message to an eligible member stayed
unnotified for longer than `fleet watch`'s default interval, found by the same query its
retries use (``broker.notifications.stale_notifications``). Each item carries the command
`fleet watch` suggests for it.

A blocked member's item also carries its dialog (``dialog``: the visible text, the options
and the digest, :mod:`cafleet.delivery.dialog`; options without numbers on the screen, such as
opencode's permission buttons, numbered 1..N left to right, with ``numbered`` false; one more
screen read per blocked member), which the page shows with one button per option; a button posts to
``/api/members/{id}/answer`` with the digest, the same answer path as ``cafleet member
answer`` (:mod:`cafleet.delivery.answer`), so a dialog that changed meanwhile is refused.

Items hold no timestamps, so the list only changes when the situation does; the event
stream sends it with every roster update (``fleet_view``), and the page turns it into a
banner, a count in the tab title and, when allowed, a desktop notification.
"""

from __future__ import annotations

from cafleet import config
from cafleet.broker import notifications
from cafleet.delivery import supervision

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

OWED_AFTER = float(config.declared("--interval").default)  # `fleet watch`'s default interval
MAX_OWED = 50  # owed previews listed; the rest are counted


def items(store: Store, fleet_id: int, states: dict[int, tuple[str, str]], owed_after: float | None = None) -> dict:
    """``{"items": [...], "owed_more": N}``; each item ``{"kind", "member_id", "message_id",
    "detail", "command"}`` with ``kind`` one of ``blocked``, ``dead``, ``notify``; a blocked
    one also ``"dialog"`` (``{"text", "options", "digest"}``, or None when it cannot be read)."""
    from cafleet.delivery import watch

    owed_after = OWED_AFTER if owed_after is None else owed_after

    out = []
    for member_id, (state, detail) in sorted(states.items()):
        if state in (supervision.BLOCKED, supervision.DEAD):
            item = {
                "kind": state,
                "member_id": member_id,
                "message_id": None,
                "detail": detail,
                "command": watch.ACTIONS[state].format(member_id=member_id),
            }
            if state == supervision.BLOCKED:
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
    return {"items": out, "owed_more": max(0, len(owed) - MAX_OWED)}


def dialog_of(store: Store, member_id: int) -> dict | None:
    """The dialog on a blocked member's screen, for its buttons; None when the screen can
    no longer be read or shows no dialog now (answered meanwhile)."""
    from cafleet.delivery.answer import dialog_on

    seen = dialog_on(store, member_id)
    return None if seen is None else seen.as_json()
