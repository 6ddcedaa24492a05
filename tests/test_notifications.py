"""Who is eligible for a preview and what is owed: one rule, the same answer from every
read that asks (the send's drain, wait's fleet-wide retry, `fleet watch`'s retries)."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

from cafleet.broker import fleets, messages, notifications

EARLY = "9999-12-31T00:00:00+00:00"  # every message was created before this


def owed_everywhere(store, fleet_id: int) -> dict[str, set[int]]:
    """The recipients each read finds owed a preview in the fleet."""
    return {
        "target": {
            m
            for m in members_of(store, fleet_id)
            if notifications.notification_target(store, m) is not None
            and notifications.next_pending_notification(store, m, set()) is not None
        },
        "recipients_owed": set(notifications.recipients_owed_notifications(store, fleet_id)),
        "stale": {recipient for _, recipient in notifications.stale_notifications(store, fleet_id, EARLY)},
    }


def members_of(store, fleet_id: int) -> list[int]:
    return [row[0] for row in store.execute("SELECT member_id FROM members WHERE fleet_id = ?", (fleet_id,))]


def test_a_member_whose_pane_is_pending_is_owed_nothing_by_any_read(store, build):
    fleet_id, director, (waiting,) = build.fleet(members_count=1)  # pending placement: no pane yet
    paned = build.member(fleet_id, "paned", pane_id="%7")
    messages.send(store, director, waiting, "for the pending one")
    messages.send(store, director, paned, "for the paned one")
    assert owed_everywhere(store, fleet_id) == {"target": {paned}, "recipients_owed": {paned}, "stale": {paned}}


def test_a_deleted_fleet_is_owed_nothing_by_any_read(store, build):
    fleet_id, director, _ = build.fleet(members_count=0)
    paned = build.member(fleet_id, "paned", pane_id="%7")
    messages.send(store, director, paned, "before the fleet was deleted")
    # A fleet marked deleted by a writer that left its members as they were (an older
    # cafleet, a hand edit): its members must not be typed into all the same.
    with store.write():
        store.execute("UPDATE fleets SET deleted_at = '2025-01-01T00:00:00+00:00' WHERE fleet_id = ?", (fleet_id,))
    assert owed_everywhere(store, fleet_id) == {"target": set(), "recipients_owed": set(), "stale": set()}


def test_the_root_director_and_self_sends_are_owed_nothing(store, build):
    fleet_id, director, (worker,) = build.fleet(members_count=1)
    paned = build.member(fleet_id, "paned", pane_id="%7")
    messages.send(store, worker, director, "for the Director, who polls")
    messages.send(store, paned, paned, "a note to self")
    assert owed_everywhere(store, fleet_id) == {"target": set(), "recipients_owed": set(), "stale": set()}
    assert fleets.get_fleet(store, fleet_id)["deleted_at"] is None
