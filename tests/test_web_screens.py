"""Member screens, the fleet graph and attention items of the WebUI, against real panes
(a private tmux server running the stand-in agent) and a real database.

The browser side (tiles, graph, banner) is in test_web_browser.py.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import threading

import pytest

from cafleet.broker import messages, notifications
from cafleet.web import attention, screens
from tests.support.tmux_fixtures import wait_for
from tests.support.web_panes import HOSTILE, STANDIN
from tests.support.web_server import make_app, web_client


@pytest.fixture
def app(db_path, env):
    return make_app(db_path, env)


@pytest.fixture
def client(app, store):
    with web_client(app, raise_server_exceptions=False) as test_client:
        yield test_client


def screens_of(client, fleet_id, ids, **params):
    query = "&".join([f"members={','.join(map(str, ids))}", *(f"{k}={v}" for k, v in params.items())])
    response = client.get(f"/api/fleets/{fleet_id}/screens?{query}")
    assert response.status_code == 200, response.text
    return {entry["member_id"]: entry for entry in response.json()["screens"]}


def test_typed_text_appears_in_the_member_screen(panes, app, client, tmux_server):
    app.state.screens = screens.ScreenCache(interval=0.05)
    member_id, pane = panes["add"]("typist")
    tmux_server.run("send-keys", "-l", "-t", pane, "hello from the typist")
    screen = wait_for(
        lambda: (
            (s := screens_of(client, panes["fleet_id"], [member_id])[member_id])["text"].count("hello from the typist")
            and s
        ),
        what="typed text in the screen",
    )
    assert (screen["status"], screen["error"], screen["pane_id"]) == ("ok", None, pane)
    assert "cafleet stand-in agent" in screen["text"]


def test_hostile_pane_keeps_only_colours_and_text(panes, client):
    member_id, _ = panes["add"]("hostile", ["sh", "-c", HOSTILE], ready=None)
    text = wait_for(
        lambda: (t := screens_of(client, panes["fleet_id"], [member_id])[member_id]["text"]).count("after-dcs") and t,
        what="hostile output",
    )
    assert "<script>window.__pwned=1</script>" in text
    assert '<img src=x onerror="window.__pwned=2">' in text
    assert "\x1b[31mred alert" in text  # colours stay, as SGR only
    assert "\x1b]" not in text and "\x1bP" not in text and "\x07" not in text and "cHduZWQ" not in text
    leftover = screens._SEQUENCE.findall(text)
    assert leftover and all(screens._SGR.match(seq) for seq in leftover)


def test_clean_removes_every_sequence_but_sgr():
    raw = (
        "a\x1b[1;38;5;196mb\x1b[0m\x1b[2J\x1b[H\x1b]52;c;eA==\x07c\x1b]0;t\x1b\\d\x1bPq#0\x1b\\e"
        "\x1b_apc\x1b\\f\x1b7g\x1b(Bh\x08\x0d\x9bi\x1b"
    )
    assert screens.clean(raw) == "a\x1b[1;38;5;196mb\x1b[0mcdefghi"


def test_one_capture_per_member_per_interval_however_many_clients_one_call_per_server(panes, app, client):
    first, _ = panes["add"]("one")
    second, _ = panes["add"]("two")
    app.state.screens = cache = screens.ScreenCache(interval=600)
    app.state.screen_rate = screens.RateLimit(rate=1000, burst=1000)
    failures = []

    def watcher():
        for _ in range(5):
            try:
                got = screens_of(client, panes["fleet_id"], [first, second])
                assert {s["status"] for s in got.values()} == {"ok"}
            except BaseException as error:  # collected: an assert in a thread would be lost
                failures.append(error)

    threads = [threading.Thread(target=watcher) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert failures == []
    # 40 answers for two members: one capture each, both in one call (one tmux server)
    assert (cache.captures, cache.calls) == (2, 1)
    cache.interval = 0  # due again: the next request captures again
    screens_of(client, panes["fleet_id"], [first])
    assert (cache.captures, cache.calls) == (3, 2)


def test_screen_request_bounds(panes, app, client, build, monkeypatch):
    member_id, _pane = panes["add"](
        "bounded",
        ["sh", "-c", "seq 1 300 | sed 's/$/ xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx/'; exec sleep 600"],
        ready="300 x",
    )
    fleet_id = panes["fleet_id"]
    got = screens_of(client, fleet_id, [member_id], lines=5)[member_id]
    assert got["text"].split("\n")[-1].startswith("300 ") and len(got["text"].split("\n")) == 5
    full = screens_of(client, fleet_id, [member_id], lines=screens.MAX_LINES)[member_id]["text"].split("\n")
    assert len(full) <= screens.MAX_LINES
    monkeypatch.setattr(screens, "MAX_SCREEN_BYTES", 200)
    cut = screens_of(client, fleet_id, [member_id], lines=100)[member_id]
    assert cut["truncated"] is True and len(cut["text"].encode()) <= 200 and cut["text"].endswith("300 " + "x" * 32)
    for query, error in [
        (f"members={member_id}&lines=0", "lines must be an integer from 1 to 120"),
        (f"members={member_id}&lines={screens.MAX_LINES + 1}", "lines must be an integer from 1 to 120"),
        ("members=" + ",".join(str(i) for i in range(1, 66)), "at most 64 members per request, got 65"),
        ("members=", "members is required (comma-separated member ids)"),
        ("members=1,x", "member id must be a positive integer"),
    ]:
        response = client.get(f"/api/fleets/{fleet_id}/screens?{query}")
        assert response.status_code == 400 and response.json()["error"].startswith(error), (query, response.text)
    _other, _, (stranger,) = build.fleet("other", 1)
    response = client.get(f"/api/fleets/{fleet_id}/screens?members={stranger}")
    assert (response.status_code, response.json()) == (404, {"error": f"member {stranger} is not in fleet {fleet_id}"})


def test_rate_limit_is_per_client(app, client, build):
    fleet_id, _, (pending,) = build.fleet("limits", 1)
    app.state.screen_rate = limit = screens.RateLimit(rate=0.001, burst=3)
    answers = [client.get(f"/api/fleets/{fleet_id}/screens?members={pending}") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert answers[0].json()["screens"] == [
        {
            "member_id": pending,
            "pane_id": None,
            "status": "pending",
            "error": "its pane is being created",
            "text": "",
            "truncated": False,
        }
    ]
    assert answers[3].json()["error"].startswith("too many screen requests; retry in ")
    assert int(answers[3].headers["retry-after"]) >= 1  # whole seconds, rounded up
    assert "retry-after" not in answers[0].headers
    assert limit.take("another-client") == 0.0  # the next client has its own bucket


def test_stale_and_gone_panes_are_reported_never_captured(panes, client, tmux_server):
    stale, _ = panes["add"]("stale", identity="1:1:1")
    gone, gone_pane = panes["add"]("gone")
    tmux_server.run("kill-pane", "-t", gone_pane)
    got = screens_of(client, panes["fleet_id"], [stale, gone])
    assert got[stale]["status"] == "stale" and got[stale]["text"] == ""
    assert "is stale" in got[stale]["error"]
    assert got[gone]["status"] == "gone" and got[gone]["text"] == ""


def test_a_request_captures_its_members_together_each_as_it_would_be_captured_alone(
    panes, app, client, tmux_server, store
):
    """Many members, among them a stale and a gone pane, in one request: each screen is
    what capturing that member alone gives, and the server took one call (and one more
    for the panes after the gone one)."""
    app.state.screens = cache = screens.ScreenCache(interval=600)
    app.state.screen_rate = screens.RateLimit(rate=1000, burst=1000)
    added = [panes["add"](f"m{i}") for i in range(6)]
    stale, _ = panes["add"]("stale", identity="1:1:1")
    gone, gone_pane = panes["add"]("gone")
    last, _ = panes["add"]("last")
    tmux_server.run("kill-pane", "-t", gone_pane)
    ids = [member_id for member_id, _ in added] + [stale, gone, last]
    got = screens_of(client, panes["fleet_id"], ids)
    assert (cache.captures, cache.calls) == (9, 2)
    from cafleet.broker import members

    alone = {member_id: screens._capture(members.get_member(store, member_id)["placement"]) for member_id in ids}
    for member_id in ids:
        assert (got[member_id]["status"], got[member_id]["error"]) == (
            alone[member_id]["status"],
            alone[member_id]["error"],
        )
        if got[member_id]["status"] == "ok":  # the same screen, to the last DEFAULT_LINES rows
            assert got[member_id]["text"] == screens.bounded(alone[member_id]["text"], screens.DEFAULT_LINES)[0]
    assert [got[m]["status"] for m in ids] == ["ok"] * 6 + ["stale", "gone", "ok"]


def test_screens_honour_host_and_site_checks(panes, client):
    member_id, _ = panes["add"]("guarded")
    path = f"/api/fleets/{panes['fleet_id']}/screens?members={member_id}"
    foreign = client.get(path, headers={"host": "evil.example:8000"})
    assert foreign.status_code == 400 and "Host header" in foreign.json()["error"]
    cross = client.get(path, headers={"sec-fetch-site": "cross-site"})
    assert cross.status_code == 403
    graph = client.get(f"/api/fleets/{panes['fleet_id']}/graph", headers={"host": "evil.example:8000"})
    assert graph.status_code == 400


def test_graph_counts_edges_pending_unnotified_and_activity(client, build, store):
    fleet_id, director, (a, b) = build.fleet("graph", 2)
    done = messages.send(store, a, b, "one")["message_id"]
    messages.ack(store, done)
    stamped = messages.send(store, a, b, "two")["message_id"]
    notifications.stamp_notified(store, stamped)
    messages.send(store, a, b, "three")
    messages.send(store, b, director, "report")
    messages.send(store, a, a, "note")
    body = client.get(f"/api/fleets/{fleet_id}/graph").json()
    edges = {(e["from"], e["to"]): (e["count"], e["pending"], e["unnotified"]) for e in body["edges"]}
    assert edges == {(a, b): (3, 2, 1), (b, director): (1, 1, 0), (a, a): (1, 1, 0)}
    nodes = {n["member_id"]: n for n in body["nodes"]}
    assert set(nodes) == {director, a, b}
    assert (nodes[b]["pending"], nodes[b]["unnotified"], nodes[director]["pending"]) == (2, 1, 1)
    assert len(nodes[a]["activity"]) == 60 and sum(nodes[a]["activity"]) == 4  # sent 3 to b, one to itself
    assert nodes[a]["activity"][-1] == 4 and sum(nodes[b]["activity"]) == 4
    assert client.get("/api/fleets/999/graph").status_code == 404


def test_graph_kept_up_to_date_matches_a_graph_built_from_scratch(app, client, build, store):
    from cafleet.web import api, graph

    fleet_id, director, (a, b, c) = build.fleet("tally", 3)
    other, _, (x, y) = build.fleet("other", 2)
    first = client.get(f"/api/fleets/{fleet_id}/graph").json()  # builds the tally
    assert first["edges"] == []
    steps = [
        lambda: messages.send(store, a, b, "1"),
        lambda: messages.send(store, x, y, "other fleet"),
        lambda: messages.send(store, b, a, "2"),
        lambda: notifications.stamp_notified(store, 1),
        lambda: messages.send(store, c, director, "3"),
        lambda: messages.ack(store, 3),
        lambda: messages.ack(store, 1),
        lambda: build.member(fleet_id, "late"),
        lambda: messages.send(store, a, a, "self"),
    ]
    for step in steps:
        step()
        kept = client.get(f"/api/fleets/{fleet_id}/graph").json()
        with api.read_snapshot(store):
            fresh = graph.fleet_graph(store, fleet_id, graph.GraphCache())
        assert kept == fresh
    assert {(e["from"], e["to"]): e["pending"] for e in kept["edges"]} == {
        (a, b): 0,
        (b, a): 0,
        (c, director): 1,
        (a, a): 1,
    }
    assert client.get(f"/api/fleets/{other}/graph").json()["edges"] == [
        {"from": x, "to": y, "count": 1, "pending": 1, "unnotified": 1}
    ]


def test_attention_lists_blocked_dead_and_owed_previews(panes, client, store, tmux_server):
    asking, _ = panes["add"]("asking", [*STANDIN, "--member-id", "0", "--permission-prompt"], ready="1. Yes")
    doomed, doomed_pane = panes["add"]("doomed")
    fine, _ = panes["add"]("fine")
    tmux_server.run("kill-pane", "-t", doomed_pane)
    owed = messages.send(store, fine, asking, "are you there?")["message_id"]
    detail = client.get(f"/api/fleets/{panes['fleet_id']}").json()
    kinds = {(item["kind"], item["member_id"]) for item in detail["attention"]["items"]}
    assert kinds == {("blocked", asking), ("dead", doomed)}  # the preview is not owed for long enough yet
    blocked = next(i for i in detail["attention"]["items"] if i["kind"] == "blocked")
    assert blocked["command"] == f"cafleet member capture {asking}"
    states = {m["member_id"]: m["state"] for m in detail["members"]}
    listed = attention.items(store, panes["fleet_id"], {asking: ("blocked", "x")}, owed_after=0)
    assert [(i["kind"], i["member_id"], i["message_id"]) for i in listed["items"]] == [
        ("blocked", asking, None),
        ("notify", asking, owed),
    ]
    assert states[fine] == "alive"


def test_event_stream_reports_a_preview_that_becomes_owed_without_any_write(db_path, env, panes, store, monkeypatch):
    """Nothing is committed when a preview becomes owed: time passes. The roster event still
    comes, from the periodic state look, because the attention list is part of it. (The
    members are real stand-ins in panes: only a member with a concrete pane is owed a
    preview.)"""
    from cafleet.web import events
    from tests.support.web_server import SSEReader, threaded_server

    monkeypatch.setattr(attention, "OWED_AFTER", 1.0)
    monkeypatch.setattr(events, "STATE_INTERVAL", 0.3)
    fleet_id = panes["fleet_id"]
    a, _ = panes["add"]("a")
    b, _ = panes["add"]("b")
    with threaded_server(db_path, env) as (url, _, _):
        reader = SSEReader(f"{url}/api/events?fleet_id={fleet_id}")
        sent = messages.send(store, a, b, "wake up")["message_id"]
        kind, data = reader.next(10)
        assert (kind, data["message_id"]) == ("message", sent)
        kind, data = reader.next(10)  # the send moved both members' last activity: nothing owed yet
        assert (kind, data["attention"]["items"]) == ("roster", [])
        kind, data = reader.next(15)
        assert kind == "roster"
        assert data["attention"]["items"] == [
            {
                "kind": "notify",
                "member_id": b,
                "message_id": sent,
                "command": f"cafleet member capture {b}",
                "detail": f"preview of message {sent} still not delivered after 1 s",
            }
        ]


def test_attention_shows_a_blocked_members_dialog_and_answers_it_only_while_it_is_the_same(
    panes, client, tmux_server, tmp_path
):
    """The blocked item carries the dialog's text, options and digest; the answer route is
    the one `cafleet member answer` takes: screened like the composer (same-origin JSON
    only), refused with nothing sent for another digest, an option the dialog lacks or a
    label the option does not show."""
    record = tmp_path / "asking.jsonl"
    asking, _pane = panes["add"](
        "asking", [*STANDIN, "--member-id", "0", "--permission-prompt", "--record", str(record)], ready="1. Yes"
    )
    detail = client.get(f"/api/fleets/{panes['fleet_id']}").json()
    [blocked] = [i for i in detail["attention"]["items"] if i["kind"] == "blocked"]
    dialog = blocked["dialog"]
    assert "Do you want to proceed?" in dialog["text"].splitlines()
    assert dialog["options"] == [{"number": 1, "label": "Yes"}, {"number": 2, "label": "No"}]
    path = f"/api/members/{asking}/answer"
    body = {"choice": 2, "dialog": dialog["digest"]}

    def answers() -> list[str]:
        if not record.exists():
            return []
        return [line for line in record.read_text().splitlines() if '"permission"' in line]

    assert client.post(path, json=body, headers={"origin": "http://evil.example"}).status_code == 403
    assert client.post(path, json=body, headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert client.post(path, content=b'{"choice": 2}', headers={"content-type": "text/plain"}).status_code == 415
    stale = client.post(path, json={"choice": 2, "dialog": "0" * 12})
    assert stale.status_code == 409 and "nothing was sent" in stale.json()["error"], stale.text
    missing = client.post(path, json={"choice": 3, "dialog": dialog["digest"]})
    assert missing.status_code == 409 and "has no option 3" in missing.json()["error"], missing.text
    assert client.post(path, json={"choice": "2", "dialog": dialog["digest"]}).status_code == 422
    # the button sends the label it shows: an option that reads otherwise is refused (issue 29)
    relabelled = client.post(path, json={**body, "label": "Yes"})
    assert relabelled.status_code == 409, relabelled.text
    assert relabelled.json()["error"].startswith('option 2 reads "No", not "Yes" in the dialog on member ')
    assert client.post(path, json={**body, "label": 2}).status_code == 422
    assert answers() == []  # nothing reached the pane
    answered = client.post(path, json={**body, "label": "No"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["label"] == "No"
    wait_for(lambda: answers(), what="the stand-in to record the answer")
    assert '"text": "2"' in answers()[0]


def test_attention_numbers_a_dialogs_buttons_left_to_right_and_answers_one(panes, client, tmp_path):
    """opencode's permission prompt has buttons without numbers: the blocked item lists them
    numbered 1..3 left to right with ``numbered`` false, and a button's answer takes the
    same path as `cafleet member answer` (the selected one: Enter alone reaches the pane)."""
    import sys

    from tests.support.drawn import DRAWER, buttons

    screen_file, keys = tmp_path / "drawn.screen", tmp_path / "drawn.keys"
    screen_file.write_text("\n".join(buttons(1)), encoding="utf-8")
    keys.write_bytes(b"")
    member, _ = panes["add"](
        "asking", [sys.executable, str(DRAWER), str(screen_file), str(keys)], ready="Allow always", agent="opencode"
    )
    detail = client.get(f"/api/fleets/{panes['fleet_id']}").json()
    [blocked] = [i for i in detail["attention"]["items"] if i["kind"] == "blocked"]
    dialog = blocked["dialog"]
    assert dialog["numbered"] is False
    assert dialog["options"] == [
        {"number": 1, "label": "Allow once"},
        {"number": 2, "label": "Allow always"},
        {"number": 3, "label": "Reject"},
    ]
    answered = client.post(
        f"/api/members/{member}/answer", json={"choice": 1, "dialog": dialog["digest"], "label": "Allow once"}
    )
    assert answered.status_code == 200, answered.text
    assert answered.json()["label"] == "Allow once"
    wait_for(lambda: keys.read_bytes() == b"\n", what="Enter alone to reach the pane")
