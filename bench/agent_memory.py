"""Benchmark: the memory each real coding agent holds, at start and idle, in one run.

    CAFLEET_AGENT_PREFIX=.cache/agents python bench/agent_memory.py [--runs 3] [--idle 20] [claude] [codex] [opencode]

For each agent (the pinned program under ``$CAFLEET_AGENT_PREFIX/node_modules/.bin``), a
throw-away fleet in a private tmux server (``tmux -L cafleet-test-<hex>``, a throw-away
HOME, the keeper off) answering from the test suite's scripted model API on 127.0.0.1
(tests/support/agent_drivers.py: claude and opencode on the Anthropic Messages API, codex
on the Responses API). Then ``--runs`` times, one member after another, each started by
``cafleet member create`` with a one-line spawn prompt and deleted after it is measured:

* **start**: the moment its input box is first drawn (``capture-pane`` every 0.1 s, read
  by cafleet's own screen cues);
* **idle**: ``--idle`` seconds after it answered its spawn prompt and shows an empty box;
* **peak**: the largest of the samples taken every 0.25 s from ``member create`` to idle
  (those two included).

Each figure is the whole process tree of the member's pane (the pane's process and every
descendant, from ``/proc/<pid>/task/*/children``): the sum of ``VmRSS``
(``/proc/<pid>/status``), and the sum of ``Pss`` (``/proc/<pid>/smaps_rollup``: shared
pages divided among the processes that map them, so what one more member costs the
machine). Medians over the runs; the first run of each agent is also its first start in a
fresh HOME. Nothing outside the temporary folder is touched; each fleet's tmux server is
killed and the panes' processes are ended by their process group.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

import pytest  # MonkeyPatch: the codex fleet is built like the suite's

from cafleet.delivery.keystrokes import screen
from tests.support.agent_drivers import AGENTS, Driven, keeper_fleet, missing
from tests.support.environ import isolated_environ
from tests.support.real_agents import agent_version
from tests.support.tmux_fixtures import wait_for

START_TIMEOUT = 120.0


def kib(path: str, field: str) -> int:
    """A ``field:   N kB`` line of a /proc file, in KiB (0 when the process is gone)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants (their threads' ``children`` lists)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            tasks = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{current}/task/{task}/children", encoding="ascii") as handle:
                    todo += [int(child) for child in handle.read().split()]
            except OSError:
                pass
    return found


def measure(pid: int) -> dict:
    """The tree's summed VmRSS and Pss, in MiB, and its process count."""
    pids = tree(pid)
    rss = sum(kib(f"/proc/{p}/status", "VmRSS") for p in pids)
    pss = sum(kib(f"/proc/{p}/smaps_rollup", "Pss") for p in pids)
    return {"rss": rss / 1024, "pss": pss / 1024, "processes": len(pids)}


class Sampler:
    """The largest tree RSS and PSS seen, sampled every 0.25 s on a thread of its own."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = {"rss": 0.0, "pss": 0.0}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stop.wait(0.25):
            now = measure(self.pid)
            for key in self.peak:
                self.peak[key] = max(self.peak[key], now[key])

    def end(self) -> dict:
        self.stop.set()
        self.thread.join()
        return self.peak


def one_member(driven: Driven, n: int, idle: float) -> dict:
    created = time.monotonic()
    member_id, pane = driven.create(f"bench{n}", ready=False)
    pid = int(driven.server.run("display-message", "-p", "-t", pane, "#{pane_pid}").strip())
    sampler = Sampler(pid)
    try:
        wait_for(
            lambda: screen.input_box(driven.agent, driven.capture(pane)) is not None,
            START_TIMEOUT,
            0.1,
            f"{driven.agent}'s input box",
        )
        drawn = time.monotonic() - created
        start = measure(pid)
        driven.settle(pane)  # the spawn prompt answered, the box empty again
        time.sleep(idle)
        rest = measure(pid)
    finally:
        peak = sampler.end()
    for key in peak:  # the two measures are samples too
        peak[key] = max(peak[key], start[key], rest[key])
    removed = driven.fleet.cafleet("member", "delete", str(member_id))
    assert removed.code == 0, removed
    return {"drawn": drawn, "start": start, "idle": rest, "peak": peak}


def bench(agent: str, runs: int, idle: float, root: Path) -> list[dict]:
    env = isolated_environ(root / "home", CAFLEET_DATABASE_URL=str(root / "db" / "cafleet.db"))
    monkeypatch = pytest.MonkeyPatch()
    try:
        with keeper_fleet(agent, root, env, monkeypatch, {"CAFLEET_KEEPER": "off"}) as driven:
            results = []
            for n in range(runs):
                results.append(one_member(driven, n, idle))
                r = results[-1]
                print(
                    f"{agent}: run {n + 1}: box drawn after {r['drawn']:.1f} s; "
                    f"start {r['start']['rss']:.0f} MiB RSS / {r['start']['pss']:.0f} MiB PSS "
                    f"({r['start']['processes']} processes); idle {r['idle']['rss']:.0f} / {r['idle']['pss']:.0f} MiB "
                    f"({r['idle']['processes']} processes); peak {r['peak']['rss']:.0f} / {r['peak']['pss']:.0f} MiB",
                    flush=True,
                )
            return results
    finally:
        monkeypatch.undo()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--idle", type=float, default=20.0, help="seconds after the first answer")
    parser.add_argument("agents", nargs="*", default=list(AGENTS))
    args = parser.parse_args()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    for agent in args.agents:
        reason = missing(agent)
        if reason:
            print(f"{agent}: skipped ({reason})")
            continue
        root = Path(tempfile.mkdtemp(prefix=f"cafleet-mem-{agent}-"))
        try:
            results = bench(agent, args.runs, args.idle, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        rows.append((f"{agent} {agent_version(agent)}", results))
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    def median(results, phase, key) -> str:
        return f"{statistics.median(r[phase][key] for r in results):.0f}"

    print(f"\nmedian of {args.runs} runs, MiB (RSS summed over the pane's process tree / PSS); idle = {args.idle:g} s")
    print("| agent | box drawn after | start RSS / PSS | idle RSS / PSS | peak RSS / PSS | processes idle |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, results in rows:
        drawn = statistics.median(r["drawn"] for r in results)
        print(
            f"| {name} | {drawn:.1f} s | {median(results, 'start', 'rss')} / {median(results, 'start', 'pss')} "
            f"| {median(results, 'idle', 'rss')} / {median(results, 'idle', 'pss')} "
            f"| {median(results, 'peak', 'rss')} / {median(results, 'peak', 'pss')} "
            f"| {median(results, 'idle', 'processes')} |"
        )


if __name__ == "__main__":
    main()
