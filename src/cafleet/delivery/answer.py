"""``cafleet member answer MEMBER CHOICE --dialog DIGEST [--label LABEL]`` and the WebUI's
answer buttons: pick one numbered option of the dialog on a member's screen, only while it is
still the dialog the notice described (docs/delivery.md, "Answering a blocked member").

Under the pane-input lock (the one every preview takes, so nothing is typed into the pane
meanwhile), right before the key is sent, the screen is read once more, in the window every
reader of a dialog reads (:func:`cafleet.delivery.dialog.capture`): it must read
``awaiting_user``, its dialog's digest (:mod:`cafleet.delivery.dialog`) must be the one
given, CHOICE one of its numbered options and, when LABEL is given, that option's label
LABEL exactly (as the notice and the WebUI show it). Otherwise nothing is sent and the answer
is refused with one line saying what the screen shows now. The keys go through the lock's
guard (on PostgreSQL the lock's session is asked before each one) and the placement's
identity check, as a preview's do.
"""

from __future__ import annotations

from cafleet import config
from cafleet.errors import CafleetError, Conflict, UsageError, clause

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store


def answer_member(
    store: Store, settings: config.Settings, member_id: int, choice: int, digest: str, label: str | None = None
) -> dict:
    from cafleet import render
    from cafleet.delivery import dialog, lock
    from cafleet.delivery.panes import _live_placement
    from cafleet.delivery.placement import reach

    digest = digest.strip().lower()
    if not digest or len(digest) > 64 or any(ch not in "0123456789abcdef" for ch in digest):
        raise UsageError(
            "--dialog must be the dialog's digest as the notice gives it (hex digits), "
            "e.g. `cafleet member answer 5 1 --dialog 3fa2c1d0e9ab`."
        )
    if not 0 <= choice <= 99:
        raise UsageError(f"CHOICE must be the number of one of the dialog's options (0 to 99), got {choice}.")
    if label is not None and (not label.strip() or "\n" in label or "\r" in label):
        raise UsageError("--label must be the option's label on one line, as the notice shows it, e.g. --label Yes.")
    if label is not None:
        label = label.strip(" ")
    placement, pane = _live_placement(store, member_id)
    agent = placement["coding_agent"]
    timeout = settings.lock_timeout
    mux = reach(placement)
    with lock.placement_lock(store.locks, placement, timeout, store.hooks) as held:
        guarded = held.guard(mux)
        shown = dialog.capture(mux, pane)  # the window the notice was read from
        seen = dialog.read(agent, shown)
        if seen is None:
            raise Conflict(
                f"member {member_id}'s pane {pane} shows no dialog awaiting its user now "
                f"(answered or dismissed already?); nothing was sent. See `cafleet member capture {member_id}`."
            )
        now = dict(seen.options).get(choice)
        relabelled = label is not None and now is not None and now != label
        reads = f'option {choice} reads "{render.inline(now)}", not "{render.inline(label)}"' if relabelled else ""
        if seen.digest != digest:
            raise Conflict(
                f"the dialog on member {member_id}'s pane {pane} is not the one with digest {digest} "
                f"(it changed; it is {seen.digest} now{', and its ' + reads if reads else ''}); "
                f"nothing was sent. Read it with `cafleet member capture {member_id}` before answering."
            )
        if now is None:
            raise Conflict(
                f"the dialog on member {member_id}'s pane {pane} has no option {choice} "
                f"(its options: {seen.choices()}); nothing was sent."
            )
        if relabelled:
            raise Conflict(
                f"{reads} in the dialog on member {member_id}'s pane {pane}; nothing was sent. "
                "Check CHOICE and --label against the notice before answering."
            )
        keys, enter = dialog.keys_for(agent, choice)
        try:
            guarded.type_text(pane, keys)
            if enter:
                guarded.press_enter(pane)
        except lock.LockLost as error:
            raise CafleetError(f"{clause(error)}; check member {member_id}'s pane before answering again.") from None
    return {"member_id": member_id, "pane_id": pane, "choice": choice, "label": now, "digest": seen.digest}
