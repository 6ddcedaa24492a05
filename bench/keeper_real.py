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
command runs between 3 and 4. Where it goes is printed per round from the keeper's trace
points (``CAFLEET_TEST_TRACE``, cafleet.faults), time-stamped when the bench first sees
them (polled every 10 ms): attempts after pane ready, pane ready -> first and last attempt,
the last attempt -> typed -> seen in the box -> Enter -> confirmed, and the model's request
against the confirmation. Median, p95 and max per agent; the round then waits until
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

import pytest  # MonkeyPatch: the codex fleet is built like the suite's

from tests.support.agent_drivers import AGENTS, PERSON_TEXT, Driven, keeper_fleet, missing
from tests.support.environ import isolated_environ
from tests.support.keeper import log_lines
from tests.support.tmux_fixtures import wait_for


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def trace_times(trace: Path, seen: dict[str, list[float]], offset: list[int]) -> None:
    """Time-stamp (on first sight) the trace lines written since the last look."""
    try:
        with open(trace, encoding="utf-8") as handle:
            handle.seek(offset[0])
            text = handle.read()
    except OSError:
        return
    cut = text.rfind("\n") + 1
    offset[0] += len(text[:cut].encode("utf-8"))
    now = time.monotonic()
    for line in text[:cut].splitlines():
        seen.setdefault(line, []).append(now)


def _after(times, start, default, absolute=False):
    """The first of ``times`` at or after ``start``: its offset from ``start``, or the time itself."""
    if not times or start is None:
        return default
    later = [t for t in times if t >= start]
    if not later:
        return default
    return later[0] if absolute else later[0] - start


def _between(seen, first: str, second: str, start) -> float | None:
    """From the first ``first`` line at or after ``start`` to the next ``second`` line."""
    a = _after(seen.get(first), start, None, True)
    b = _after(seen.get(second), a, None, True) if a is not None else None
    return None if b is None or a is None else b - a


def one_round(driven: Driven, member_id: int, pane: str, log: str, n: int, trace: Path, phases: list) -> float:
    driven.type_keys(pane, PERSON_TEXT)
    driven.wait_screen(pane, lambda s: driven.box(s) == PERSON_TEXT, 30, "the half-typed text")
    sent = driven.send(member_id, f"Task {n} for the bench.")
    message_id = sent["message_id"]
    assert sent["notified"] is False, sent
    retrying = f"member {member_id} still owed message {message_id}: "
    wait_for(lambda: any(retrying in line for line in log_lines(log)), 30, 0.05, "the keeper to hold it")
    time.sleep(random.uniform(0.2, 2.0))
    seen: dict[str, list[float]] = {}
    offset = [trace.stat().st_size if trace.exists() else 0]  # only what follows pane ready
    logged = len(log_lines(log))
    ready = time.monotonic()
    driven.press(pane, *["BSpace"] * (len(PERSON_TEXT) + 4))
    while not driven.received(message_id):
        if time.monotonic() - ready > 60:
            raise SystemExit(f"{driven.agent}: message {message_id} never reached the model")
        trace_times(trace, seen, offset)
        time.sleep(0.01)
    submitted = time.monotonic()
    trace_times(trace, seen, offset)
    wait_for(lambda: driven.notified_at(message_id), 30, 0.05, f"message {message_id} stamped")
    trace_times(trace, seen, offset)
    tries = seen.get(f"drain.typing {message_id}", [])
    confirmed = seen.get(f"drain.submitted {message_id}", [None])[0]
    last = tries[-1] if tries else None
    first_enter = _after(seen.get("submit.enter"), last, None, True)
    phases.append(
        {
            "total": submitted - ready,
            "tries": len(tries),  # attempts after pane ready (the last one delivered)
            "to_first_try": (tries[0] - ready) if tries else None,  # the keeper's back-off left
            "to_last_try": (tries[-1] - ready) if tries else None,
            "last_try_to_model": (submitted - tries[-1]) if tries else None,  # one delivery + the agent's turn
            "model_to_confirmed": (confirmed - submitted) if confirmed else None,
            # the last try's steps (submit.py's trace points): typed, seen in the box, Enter(s)
            "try_to_typed": _after(seen.get("submit.typed"), last, None),
            "typed_to_shown": _between(seen, "submit.typed", "submit.shown", last),
            "shown_to_enter": _between(seen, "submit.shown", "submit.enter", last),
            "enters": len([t for t in seen.get("submit.enter", []) if last is not None and t >= last]),
            "enter_to_confirmed": (confirmed - first_enter) if confirmed and first_enter else None,
            "log": log_lines(log)[logged:],
        }
    )
    driven.settle(pane)
    assert driven.received(message_id) == 1, f"{driven.agent}: message {message_id} received twice"
    return submitted - ready


def bench(agent: str, rounds: int, root: Path, phases: list) -> list[float]:
    env = isolated_environ(root / "home", CAFLEET_DATABASE_URL=str(root / "db" / "cafleet.db"))
    trace = root / "trace.txt"  # the keeper's drain.typing / drain.submitted points (cafleet.faults)
    monkeypatch = pytest.MonkeyPatch()
    try:
        with keeper_fleet(agent, root, env, monkeypatch, {"CAFLEET_TEST_TRACE": str(trace)}) as driven:
            log = driven.running_keeper()["log"]
            member_id, pane = driven.create("bench")
            return [one_round(driven, member_id, pane, log, n, trace, phases) for n in range(rounds)]
    finally:
        monkeypatch.undo()


def show_phases(agent: str, phases: list) -> None:
    """Where the time went: per round, and the medians."""

    def ms(value) -> str:
        return "-" if value is None else f"{1000 * value:.0f}"

    print(
        f"{agent}: round  total  tries  ->first try  ->last try  last try->model  model->confirmed  "
        "try->typed  typed->shown  shown->enter  enters  enter->confirmed (ms)"
    )
    for n, p in enumerate(phases):
        print(
            f"{agent}: {n:5}  {ms(p['total']):>5}  {p['tries']:5}  {ms(p['to_first_try']):>10}  "
            f"{ms(p['to_last_try']):>9}  {ms(p['last_try_to_model']):>14}  {ms(p['model_to_confirmed']):>16}  "
            f"{ms(p['try_to_typed']):>10}  {ms(p['typed_to_shown']):>12}  {ms(p['shown_to_enter']):>12}  "
            f"{p['enters']:6}  {ms(p['enter_to_confirmed']):>15}"
        )
        for line in p["log"]:
            print(f"{agent}:        {line.split(' ', 2)[-1]}")
    keys = ("to_first_try", "last_try_to_model", "model_to_confirmed", "try_to_typed", "typed_to_shown")
    for key in (*keys, "shown_to_enter", "enter_to_confirmed"):
        values = [p[key] for p in phases if p[key] is not None]
        if values:
            print(f"{agent}: {key} median {ms(statistics.median(values))} ms, p95 {ms(p95(values))} ms")
    retried = sum(p["tries"] > 1 for p in phases)
    print(f"{agent}: rounds with more than one attempt after pane ready: {retried} of {len(phases)}")


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
        phases: list = []
        try:
            values = bench(agent, args.rounds, root, phases)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        show_phases(agent, phases)
        print(
            f"{agent}: pane ready -> submitted median {1000 * statistics.median(values):.0f} ms, "
            f"p95 {1000 * p95(values):.0f} ms, max {1000 * max(values):.0f} ms ({len(values)} rounds)",
            flush=True,
        )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
