"""A notice posted out for the real claude's permission dialog (marker ``real_agent``).

docs/delivery.md, "Notices posted out": the pinned claude, started by absolute path
without cafleet's ``dontAsk`` flags, asks before a shell command the scripted model calls
(tests/support/real_agents.py); the fleet's keeper runs with its default notice settings
(a dialog up for 30 s, a look every 15 s) and ``CAFLEET_NOTIFY_URL`` names a real HTTP
receiver on 127.0.0.1 (tests/support/http_receiver.py). The post must come within 75 s of
the dialog being drawn, hold the dialog's text and the digest that answers it, and be the
inbox notice, once. Every keeper is ended by its pid at teardown. Skipped with the reason
when the pinned claude is absent.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.agent_drivers import TURN_TIMEOUT, keeper_fleet, missing
from tests.support.http_receiver import Receiver
from tests.support.tmux_fixtures import wait_for

pytestmark = pytest.mark.real_agent

POSTED_WITHIN = 75.0  # the bound, from the dialog drawn to the post received


def test_claudes_permission_dialog_is_posted_with_its_text_within_75_s(tmp_path):
    reason = missing("claude")
    if reason:
        pytest.skip(reason)
    receiver = Receiver()
    try:
        with keeper_fleet("claude", tmp_path, None, None, {"CAFLEET_NOTIFY_URL": receiver.url()}) as driven:
            fleet = driven.fleet
            made = driven.workdir / "made-by-claude"
            member_id, _pane = driven.ask_permission(made.name)  # claude runs in the workdir: a short line
            drawn = time.time()
            [request] = wait_for(receiver.ok, timeout=POSTED_WITHIN, interval=0.2, what="the dialog's notice posted")
            assert request["at"] - drawn <= POSTED_WITHIN
            doc = json.loads(request["body"])
            assert doc["kind"] == "awaiting_user" and doc["member"]["id"] == member_id
            rows = [line.strip() for line in doc["text"].splitlines()]
            assert "Do you want to proceed?" in rows and f"touch {made.name}" in rows, doc["text"]
            assert f"cafleet member answer {member_id} CHOICE --dialog {doc['dialog']}" in doc["text"]
            polled = fleet.cafleet("message", "poll", str(fleet.director), "--json")
            [notice] = [r for r in polled.json() if r.get("kind") == "awaiting_user"]
            assert (doc["message_id"], doc["text"]) == (notice["message_id"], notice["text"])
            answered = fleet.cafleet("member", "answer", str(member_id), "1", "--dialog", doc["dialog"])
            assert answered.code == 0, answered  # the posted digest answers the dialog
            wait_for(lambda: made.exists(), timeout=TURN_TIMEOUT, what="claude to run the approved command")
            assert len(receiver.ok()) == 1
    finally:
        receiver.close()
