"""Usage on the real codex (marker ``real_agent``): the scripted Responses API answers each
member's turns with usage numbers chosen from the member's id, and `cafleet member usage`
must sum exactly those per member, two members in one working directory (docs/usage.md).
Skipped, with the reason, without the pinned codex."""

from __future__ import annotations

import re
import time

from tests.support.openai_responses import Reply, text, user_texts
from tests.test_real_codex import codex_fleet, pytestmark  # noqa: F401 - the fixture and the skip

IDENTITY = re.compile(r"- your member id: (\d+)\n")
TURN_TIMEOUT = 90.0


def script(request: dict) -> Reply:
    """Input 1000×member id + 1 and output 10×member id: whose call it was shows in its numbers."""
    for _, said in user_texts(request):
        found = IDENTITY.search(said)
        if found:
            member = int(found.group(1))
            return Reply([text("Ready.")], input_tokens=1000 * member + 1, output_tokens=10 * member)
    return Reply([text("ok")], input_tokens=7, output_tokens=1)


def usage_of(fleet, member_id: int, calls: int) -> dict:
    deadline = time.monotonic() + TURN_TIMEOUT
    while True:
        done = fleet.fleet.cafleet("member", "usage", str(member_id), "--json")
        assert done.code == 0, done
        report = done.json()
        if report["calls"] >= calls or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def test_codex_usage_is_summed_exactly_per_member_in_one_cwd(codex_fleet):
    codex_fleet.api.script = script
    first = codex_fleet.create("first")
    second = codex_fleet.create("second")
    a = usage_of(codex_fleet, first, 1)
    b = usage_of(codex_fleet, second, 1)
    assert (a["calls"], a["tokens"]["input"], a["tokens"]["output"]) == (1, 1000 * first + 1, 10 * first), a
    assert (b["calls"], b["tokens"]["input"], b["tokens"]["output"]) == (1, 1000 * second + 1, 10 * second), b
    assert len(a["files"]) == 1 and a["files"] != b["files"]
    [(model, row)] = a["models"].items()
    assert row["usd_source"] == "price table v1" and model.startswith("gpt-5"), a  # codex records no dollars
    whole = codex_fleet.fleet.cafleet("fleet", "usage", str(codex_fleet.fleet.fleet_id), "--json").json()
    assert (whole["calls"], whole["tokens"]["input"]) == (2, 1000 * (first + second) + 2)
