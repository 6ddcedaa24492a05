"""Benchmark: pane ready -> submitted through the fleet keeper, on the real agents, in one run.

    CAFLEET_AGENT_PREFIX=.cache/agents python bench/keeper_real.py [--rounds 20] [claude] [codex] [opencode]

For each agent (the pinned program under ``$CAFLEET_AGENT_PREFIX/node_modules/.bin``), a
throw-away fleet with the keeper on and one member started by ``cafleet member create``,
answering from the test suite's scripted model API on 127.0.0.1
(tests/support/agent_drivers.py). Each round:

1. a person's half-typed text is put in the member's input box (tmux ``send-keys``);
2. ``cafleet message send`` to the member: held (the box has text), the preview owed;
3. once the keeper's log says it has tried and is retrying, a random 0.2-2 s pause (so the
   keeper's back-off is met at every phase), then the person erases the text (one
   ``send-keys`` of backspaces): **pane ready**;
4. **submitted**: the first time the scripted model API has received a request carrying
   the preview's ``[cafleet msg N from`` marker (polled every 20 ms).

The figure is 4 - 3: what the keeper adds (its back-off, the pane read, the typing and
the settle delay before Enter) plus what the agent takes to redraw and send its turn. No
command runs between 3 and 4. Median, p95 and max per agent; the round then waits until
the preview is stamped and the agent is idle again. Nothing outside the temporary folder is
touched; every keeper is ended by its pid, the tmux servers killed.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import pytest  # noqa: E402  (MonkeyPatch: the codex fleet is built like the suite's)

from tests.support.agent_drivers import AGENTS, PERSON_TEXT, Driven, keeper_fleet, missing  # noqa: E402
from tests.support.environ import isolated_environ  # noqa: E402
from tests.support.keeper import log_lines  # noqa: E402
from tests.support.tmux_fixtures import wait_for  # noqa: E402


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def one_round(driven: Driven, member_id: int, pane: str, log: str, n: int) -> float:
    driven.type_keys(pane, PERSON_TEXT)
    driven.wait_screen(pane, lambda s: driven.box(s) == PERSON_TEXT, 30, "the half-typed text")
    sent = driven.send(member_id, f"Task {n} for the bench.")
    message_id = sent["message_id"]
    assert sent["notified"] is False, sent
    retrying = f"member {member_id} still owed message {message_id}: "
    wait_for(lambda: any(retrying in line for line in log_lines(log)), 30, 0.05, "the keeper to hold it")
    time.sleep(random.uniform(0.2, 2.0))
    ready = time.monotonic()
    driven.press(pane, *["BSpace"] * (len(PERSON_TEXT) + 4))
    while not driven.received(message_id):
        if time.monotonic() - ready > 60:
            raise SystemExit(f"{driven.agent}: message {message_id} never reached the model")
        time.sleep(0.02)
    submitted = time.monotonic()
    wait_for(lambda: driven.notified_at(message_id), 30, 0.05, f"message {message_id} stamped")
    driven.settle(pane)
    assert driven.received(message_id) == 1, f"{driven.agent}: message {message_id} received twice"
    return submitted - ready


def bench(agent: str, rounds: int, root: Path) -> list[float]:
    env = isolated_environ(root / "home", CAFLEET_DATABASE_URL=str(root / "db" / "cafleet.db"))
    monkeypatch = pytest.MonkeyPatch()
    try:
        with keeper_fleet(agent, root, env, monkeypatch) as driven:
            log = driven.running_keeper()["log"]
            member_id, pane = driven.create("bench")
            return [one_round(driven, member_id, pane, log, n) for n in range(rounds)]
    finally:
        monkeypatch.undo()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("agents", nargs="*", default=list(AGENTS))
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    for agent in args.agents:
        reason = missing(agent)
        if reason:
            print(f"{agent}: skipped ({reason})")
            continue
        root = Path(tempfile.mkdtemp(prefix=f"cafleet-keeper-real-{agent}-"))
        try:
            values = bench(agent, args.rounds, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(
            f"{agent}: pane ready -> submitted median {1000 * statistics.median(values):.0f} ms, "
            f"p95 {1000 * p95(values):.0f} ms, max {1000 * max(values):.0f} ms ({len(values)} rounds)",
            flush=True,
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
