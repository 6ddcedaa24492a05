"""The drain's decisions without tmux: a real SQLite database, the real pane-input lock
files, and the recipient's pane replayed from the pinned claude's recorded screens
(tests/support/fake_mux.py). What is owed is typed oldest first and stamped only after a
confirmed submission; what the screen refuses stays owed, with the reason; a busy lock
tried once is skipped quietly. The same paths through real panes, commands and processes
are tests/test_delivery_e2e.py's."""

from __future__ import annotations

import pytest

from cafleet import config
from cafleet.broker import messages, notifications
from cafleet.delivery.keystrokes import drain, lock
from cafleet.delivery.keystrokes.preview import render_preview
from cafleet.errors import LockTimeout, PaneGone
from tests.support.fake_mux import RecordedPane

PANE = "%5"


@pytest.fixture
def settings(env) -> config.Settings:
    return config.Settings(dict(env, CAFLEET_SUBMIT_SETTLE="0", CAFLEET_LOCK_TIMEOUT="0"))


@pytest.fixture
def member(build):
    fleet_id, director, _ = build.fleet(members_count=0)
    return director, build.member(fleet_id, "p1", pane_id=PANE)


def sent(store, director: int, member: int, *texts: str) -> list[dict]:
    return [messages.send(store, director, member, text) for text in texts]


def line(record: dict, max_len: int = 2000) -> str:
    preview = render_preview(
        record["message_id"], record["from_member_id"], record["created_at"], record["text"], max_len
    )
    return preview.replace("\n", "⏎")


def run(store, settings, member_id: int, pane: RecordedPane, stamped: set | None = None, **given) -> str | None:
    return drain.drain(
        store, settings, member_id, set(), set() if stamped is None else stamped, reach=lambda target: pane, **given
    )


def test_owed_previews_are_typed_oldest_first_each_once_and_stamped(store, settings, member):
    director, member_id = member
    records = sent(store, director, member_id, "first task", "second task\nwith a second line")
    pane = RecordedPane("claude", pane=PANE)
    stamped: set[int] = set()
    assert run(store, settings, member_id, pane, stamped) is None
    assert pane.submitted == [line(r, settings.max_text_len) for r in records]
    assert stamped == {r["message_id"] for r in records}
    assert notifications.owed_message_ids(store, member_id) == []
    assert run(store, settings, member_id, pane) is None  # nothing owed: nothing typed
    assert len(pane.keys) == 4


@pytest.mark.parametrize("state", ["permission", "question"])
def test_a_dialog_holds_every_preview_owed_with_the_reason(store, settings, member, state):
    director, member_id = member
    records = sent(store, director, member_id, "one", "two")
    pane = RecordedPane("claude", state, pane=PANE)
    failure = run(store, settings, member_id, pane)
    assert failure == (
        f"pane {PANE} shows a prompt awaiting its user, so nothing was typed; "
        "answer it in that pane and the message will be retried"
    )
    assert pane.keys == []
    assert notifications.owed_message_ids(store, member_id) == [r["message_id"] for r in records]
    pane.state = "idle"  # answered: the next drain delivers both, oldest first
    assert run(store, settings, member_id, pane) is None
    assert pane.submitted == [line(r, settings.max_text_len) for r in records]


def test_a_persons_text_holds_the_preview_and_is_left_alone(store, settings, member):
    director, member_id = member
    (record,) = sent(store, director, member_id, "review the parser")
    pane = RecordedPane("claude", "typed", pane=PANE)
    failure = run(store, settings, member_id, pane)
    assert failure == (
        f"held: input box has text in pane {PANE} (someone is typing there), so nothing was typed "
        "and that text was left as it is"
    )
    assert pane.keys == []
    assert notifications.owed_message_ids(store, member_id) == [record["message_id"]]


def test_our_own_preview_left_in_the_box_is_taken_back_for_the_next(store, settings, member):
    """A preview of an ACKed message, drawn after its attempt gave up, is ours: the drain
    names it from the database and takes it back, then types the owed one."""
    director, member_id = member
    old, new = sent(store, director, member_id, "the older task", "the new task")
    messages.ack(store, old["message_id"])
    pane = RecordedPane("claude", box=line(old, settings.max_text_len), pane=PANE)
    assert run(store, settings, member_id, pane) is None
    assert [key[0] for key in pane.keys] == ["backspace", "text", "enter"]
    assert pane.submitted == [line(new, settings.max_text_len)]


def test_a_busy_lock_tried_once_is_skipped_quietly(store, settings, member):
    director, member_id = member
    (record,) = sent(store, director, member_id, "later")
    target = notifications.notification_target(store, member_id)
    pane = RecordedPane("claude", pane=PANE)
    with lock.placement_lock(store.locks, target, 0):
        assert run(store, settings, member_id, pane, wait_for_lock=False) is None
        failure = run(store, settings, member_id, pane)
    assert failure == (
        f"the pane-input lock for pane {PANE} is still held by another cafleet process after 0 s; "
        "try again when that delivery has finished"
    )
    assert pane.keys == []
    assert notifications.owed_message_ids(store, member_id) == [record["message_id"]]


def test_a_gone_pane_is_said_to_be_gone(store, settings, member):
    director, member_id = member
    sent(store, director, member_id, "anyone?")
    pane = RecordedPane("claude", pane=PANE)
    pane.kill(PANE)
    failure = run(store, settings, member_id, pane)
    assert isinstance(failure, drain.PaneGoneReason)
    assert "Do not resend" not in failure and f"pane {PANE}" in failure


def test_stop_reason_decides_from_the_error_alone():
    assert drain.stop_reason(LockTimeout("the lock is busy."), PANE, wait_for_lock=False) is None
    assert drain.stop_reason(LockTimeout("the lock is busy."), PANE) == f"the lock is busy (pane {PANE})"
    gone = drain.stop_reason(PaneGone(f"tmux pane {PANE} is gone.", pane=PANE), PANE)
    assert isinstance(gone, drain.PaneGoneReason) and gone == f"tmux pane {PANE} is gone"
    assert drain.stop_reason(OSError(8, "Exec format error"), PANE) == (
        f"pane input failed with an operating-system error ([Errno 8] Exec format error) (pane {PANE})"
    )
