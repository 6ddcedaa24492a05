"""``cafleet member answer MEMBER CHOICE --dialog DIGEST [--label LABEL]`` and the WebUI's
answer buttons: pick one option of the dialog on a member's screen, only while it is still
the dialog the notice described (docs/delivery.md, "Answering a blocked member").

Under the pane-input lock (the one every preview takes, so nothing is typed into the pane
meanwhile), right before the key is sent, the screen is read once more, in the window every
reader of a dialog reads (:func:`cafleet.delivery.keystrokes.dialog.capture`, here with its colours,
which the text and the digest leave out): it must read
``awaiting_user``, its dialog's digest (:mod:`cafleet.delivery.keystrokes.dialog`) must be the one
given, CHOICE one of its options and, when LABEL is given, that option's label
LABEL exactly (as the notice and the WebUI show it). Otherwise nothing is sent and the answer
is refused with one line saying what the screen shows now. The keys go through the lock's
guard (on PostgreSQL the lock's session is asked before each one) and the placement's
identity check, as a preview's do.

A numbered option is picked by its digit. A dialog whose options are buttons without numbers
(opencode's permission prompt; :mod:`cafleet.delivery.keystrokes.dialog`) is answered by the arrow keys
that move its selection to the chosen button, then Enter; the screen is read with its
colours, so the selected button is known before the first key. After the arrows, the screen
is read again until it shows the same dialog (same digest) with the chosen button selected,
for at most :data:`MOVE_WAIT` seconds; only then is Enter sent. Otherwise Enter is not sent,
nothing else either (no Escape: that would reject), and the answer is refused with one line
saying so: the dialog stays open, unanswered, its selection moved.
"""

from __future__ import annotations

from cafleet import config
from cafleet.errors import CafleetError, Conflict, UsageError, clause
from cafleet.faults import NO_HOOKS

MOVE_WAIT = 5.0  # seconds the screen may take to show a moved selection (bounds a failure only)

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


def dialog_on(store: Store, member_id: int):
    """The dialog on the member's screen as every reader reads it
    (:class:`cafleet.delivery.keystrokes.dialog.Dialog`), or None when it has no live pane, its screen
    cannot be read, or it shows no dialog awaiting its user."""
    from cafleet.broker import members
    from cafleet.delivery.keystrokes import dialog
    from cafleet.delivery.keystrokes.placement import reach

    try:
        placement = members.get_member(store, member_id)["placement"]
        if placement is None or placement["pane_id"] is None:
            return None
        shown = dialog.capture(reach(placement), placement["pane_id"])  # as the notice reads it
    except (CafleetError, OSError):
        return None
    return dialog.read(placement["coding_agent"], shown)


def answer_member(
    store: Store,
    settings: config.Settings,
    member_id: int,
    choice: int,
    digest: str,
    label: str | None = None,
    hooks: Hooks = NO_HOOKS,
) -> dict:
    from cafleet import render
    from cafleet.delivery.keystrokes import dialog, lock
    from cafleet.delivery.keystrokes.placement import reach
    from cafleet.delivery.spawning.panes import _live_placement

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
    with lock.placement_lock(store.locks, placement, timeout, hooks) as held:
        guarded = held.guard(mux)
        shown = dialog.capture(mux, pane, marked=True)  # the window the notice was read from
        seen = dialog.read(agent, shown, marked=True)
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
        try:
            if seen.numbered:
                keys, enter = dialog.keys_for(agent, choice)
                guarded.type_text(pane, keys)
                if enter:
                    guarded.press_enter(pane)
            else:
                _press_button(guarded, mux, agent, pane, member_id, seen, choice, now)
        except lock.LockLost as error:
            raise CafleetError(f"{clause(error)}; check member {member_id}'s pane before answering again.") from None
    return {"member_id": member_id, "pane_id": pane, "choice": choice, "label": now, "digest": seen.digest}


def _press_button(guarded, mux, agent: str, pane: str, member_id: int, seen, choice: int, label: str) -> None:
    """Move the selection of ``seen``'s buttons to ``choice`` with the agent's arrow keys and
    press Enter once the screen shows it selected in the same dialog (see the module's text)."""
    import time

    from cafleet import render
    from cafleet.delivery.keystrokes import dialog

    move = dialog.moves(agent, seen, choice)
    if move is None:
        raise Conflict(
            f"the screen of member {member_id}'s pane {pane} does not show which option of its dialog is "
            f"selected; nothing was sent. Answer it in the pane (see `cafleet member capture {member_id}`)."
        )
    key, presses = move
    if presses:
        guarded.press_arrow(pane, key, presses)
    deadline = time.monotonic() + MOVE_WAIT
    while True:
        now = dialog.read(agent, dialog.capture(mux, pane, marked=True), marked=True)
        if now is not None and now.digest == seen.digest and now.selected == choice:
            break
        if now is None or now.digest != seen.digest or time.monotonic() >= deadline:
            if now is None:
                state = "no dialog"
            elif now.digest != seen.digest:
                state = f"another dialog ({now.digest})"
            elif now.selected is None:
                state = "no option selected that it can tell"
            else:
                state = f'option {now.selected} ("{render.inline(dict(now.options)[now.selected])}") selected'
            pressed = f"{presses} {key} key press{'es' if presses != 1 else ''}" if presses else "no key"
            raise Conflict(
                f'the dialog on member {member_id}\'s pane {pane} did not show option {choice} ("{render.inline(label)}") '
                f"selected after {pressed}: its screen showed {state}; Enter was not sent, so nothing was chosen "
                f"(the dialog stays open: see `cafleet member capture {member_id}`)."
            )
        time.sleep(0.05)
    guarded.press_enter(pane)
