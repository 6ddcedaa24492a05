"""The admin timeline: one rule for which fleet a message belongs to (its recipient's),
kept by every read the WebUI makes, and one record shape."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

from cafleet.broker import messages, timeline


def test_every_admin_read_places_a_message_in_its_recipients_fleet(store, build):
    alpha, alpha_director, (a1,) = build.fleet("alpha", members_count=1)
    beta, _beta_director, (b1,) = build.fleet("beta", members_count=1)
    ordinary = messages.send(store, alpha_director, a1, "inside alpha")["message_id"]
    # Sends across fleets are refused; a row written by hand (or by another tool) still has
    # to land in exactly one fleet's views, and the same one in each.
    with store.write():
        stray = store.insert(
            "INSERT INTO messages (from_member_id, to_member_id, created_at, status_state, status_timestamp, text) "
            "VALUES (?, ?, '2025-01-01T00:00:00+00:00', 'input_required', '2025-01-01T00:00:00+00:00', 'x')",
            (a1, b1),
            "message_id",
        )
    views = {}
    for fleet_id in (alpha, beta):
        views[fleet_id] = {
            "timeline": {r["message_id"] for r in timeline.fleet_timeline(store, fleet_id)},
            "after": {r["message_id"] for r in timeline.fleet_messages_after(store, fleet_id, 0)},
            "one": {m for m in (ordinary, stray) if timeline.fleet_message(store, fleet_id, m) is not None},
            "open": set(timeline.fleet_open_messages(store, fleet_id)),
        }
    assert views[alpha] == {key: {ordinary} for key in views[alpha]}
    assert views[beta] == {key: {stray} for key in views[beta]}


def test_every_admin_read_builds_the_same_record(store, build):
    fleet_id, director, (m1,) = build.fleet(members_count=1)
    message_id = messages.send(store, director, m1, "hello")["message_id"]
    public = messages.show(store, message_id)
    expected = dict(public, notified=False)
    assert timeline.fleet_timeline(store, fleet_id) == [expected]
    assert timeline.fleet_messages_after(store, fleet_id, 0) == [expected]
    assert timeline.fleet_message(store, fleet_id, message_id) == expected
