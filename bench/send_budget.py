"""The send path's budget check with a 400 MB transcript beside a capped member, against the
same send to a capped member whose transcript is small, in one run (docs/usage.md, "Stored
totals"; docs/performance.md).

    python bench/send_budget.py [--megabytes 400] [--runs 25] [--gate-rounds 500] [--postgres]

One SQLite database: a fleet with a Director and three members on pending placements (no
panes): ``big`` (a budget; a claude transcript of --megabytes MB, written once in a temp
dir and deleted at the end), ``small`` (a budget; a 1 MB transcript) and ``plain`` (no
budget). The keeper's part runs once first, timed: :func:`cafleet.delivery.usage.refresh`
reads both transcripts and stores the totals (what the gate used to read on every send);
then a second refresh, after 1 MB more was appended to the big transcript, reads only that.
The gate alone (``drain.refuse_over_budget``) is timed in-process per member, interleaved
(--gate-rounds each: less noisy than a process's start). With --postgres, the keeper's read
and the gate alone again on a private PostgreSQL cluster, the same transcripts.
Then ``message send`` from the Director to each member, interleaved, --runs times each, as
real command-line processes (the keeper off, so no process is left behind; each member
first in turn), each median as a ratio of ``python -c pass``, the fastest run of each, and
the big/small ratio (the goal: 1.0) of both.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.broker import fleets, members, usage as budgets
from cafleet.delivery import usage
from cafleet.store.engines import open_store
from hot_commands import cafleet_bin, run_plan
from usage_read import write_calls

SESSIONS = {"big": "3f1c2a4e-1111-4222-8333-444455556666", "small": "3f1c2a4e-1111-4222-8333-777788889999"}


def build(path: str, config: str) -> tuple[int, int, dict[str, int]]:
    store = open_store(path)
    try:
        fleet = fleets.create_fleet(
            store,
            name="bench",
            coding_agent="claude",
            backend="tmux",
            session="$0@/nonexistent/socket",
            window_id="@0",
            pane_id="%0",
        )
        ids = {}
        for name in ("big", "small", "plain"):
            ids[name] = members.register_member(
                store,
                fleet_id=fleet["fleet_id"],
                name=name,
                description=f"{name} worker",
                backend="tmux",
                session="$0@/nonexistent/socket",
                window_id="@0",
                coding_agent="claude",
                pane_id=None,
            )
            if name in SESSIONS:
                budgets.record_source(
                    store,
                    ids[name],
                    coding_agent="claude",
                    session_id=SESSIONS[name],
                    data_dir=config,
                    cwd="/work",
                    budget_tokens=10**15,
                )
        return fleet["fleet_id"], fleet["director_member_id"], ids
    finally:
        store.close()


def transcript(config: str, name: str) -> str:
    folder = os.path.join(config, "projects", "-work")
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, SESSIONS[name] + ".jsonl")


def gate_alone(store, ids: dict[str, int], rounds: int) -> dict[str, float]:
    """The median seconds of one call of the send path's budget gate
    (:func:`cafleet.delivery.keystrokes.drain.refuse_over_budget`) per member, interleaved."""
    from cafleet.delivery.keystrokes import drain

    samples: dict[str, list[float]] = {name: [] for name in ids}
    for _ in range(rounds):
        for name, member_id in ids.items():
            began = time.perf_counter()
            drain.refuse_over_budget(store, {}, member_id)
            samples[name].append(time.perf_counter() - began)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=400)
    parser.add_argument("--runs", type=int, default=25)
    parser.add_argument("--gate-rounds", type=int, default=500)
    parser.add_argument("--postgres", action="store_true", help="also the keeper's read and the gate on PostgreSQL")
    args = parser.parse_args()
    cafleet = cafleet_bin()
    import compileall

    compileall.compile_dir(os.path.join(HERE, "..", "src"), quiet=1)
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-")
    try:
        db, config = os.path.join(workdir, "bench.db"), os.path.join(workdir, "claude")
        fleet_id, director, ids = build(db, config)
        t0 = time.perf_counter()
        with open(transcript(config, "big"), "w", encoding="utf-8") as handle:
            calls = write_calls(handle, 0, args.megabytes << 20)
        with open(transcript(config, "small"), "w", encoding="utf-8") as handle:
            write_calls(handle, 0, 1 << 20)
        size = os.path.getsize(transcript(config, "big"))
        print(f"transcript of {size / 1e6:.0f} MB ({calls} calls) written in {time.perf_counter() - t0:.1f}s")

        store = open_store(db)
        try:
            t0 = time.perf_counter()
            read = usage.refresh(store, fleet_id)[1]
            first = time.perf_counter() - t0
            with open(transcript(config, "big"), "a", encoding="utf-8") as handle:
                write_calls(handle, calls, 1 << 20)
            t0 = time.perf_counter()
            again = usage.refresh(store, fleet_id)[1]
            second = time.perf_counter() - t0
            spent = usage.spent(store, {}, member_id=ids["big"])
            gate = gate_alone(store, ids, args.gate_rounds)
        finally:
            store.close()
        print(
            f"keeper's first read: {read / 1e6:.0f} MB in {first:.2f}s (what the gate read on every send before); "
            f"after 1 MB appended: {again / 1e6:.2f} MB read in {second:.3f}s; stored: {spent['calls']} calls"
        )

        print(
            f"the gate alone (in-process, {args.gate_rounds} rounds, interleaved): "
            + ", ".join(f"{name} {gate[name] * 1e6:.0f} us" for name in ("big", "small", "plain"))
            + f"; big/small {gate['big'] / gate['small']:.2f}x"
        )

        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CAFLEET_", "TMUX", "HERDR")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        env.update(CAFLEET_DATABASE_URL=db, CAFLEET_KEEPER="off", HOME=workdir)
        bare = [sys.executable, "-c", "pass"]
        plan = []
        names = ["big", "small", "plain"]
        for run in range(args.runs):
            plan.append(("bare", bare, {}))
            for name in names[run % 3 :] + names[: run % 3]:  # each first in turn: no order favoured
                argv = ["message", "send", "--from-member-id", str(director), "--to-member-id", str(ids[name]), "go"]
                plan.append((name, cafleet + argv, {}))
        samples: dict[str, list[float]] = {}
        for label, elapsed, _peak in run_plan(plan, env, workdir):
            samples.setdefault(label, []).append(elapsed)
        median = {label: statistics.median(values) for label, values in samples.items()}
        least = {label: min(values) for label, values in samples.items()}
        print(f"python -c pass: median {median['bare'] * 1000:.1f} ms over {args.runs} runs")
        print(f"{'message send to':<34} {'median':>9} {'vs bare':>8} {'fastest':>9}")
        for name, what in (
            ("big", f"capped, {size / 1e6:.0f} MB transcript"),
            ("small", "capped, 1 MB transcript"),
            ("plain", "no budget"),
        ):
            print(
                f"{what:<34} {median[name] * 1000:>6.1f} ms {median[name] / median['bare']:>7.2f}x "
                f"{least[name] * 1000:>6.1f} ms"
            )
        print(
            f"big/small: {median['big'] / median['small']:.2f}x median, {least['big'] / least['small']:.2f}x fastest "
            f"(goal 1.00); small/plain: {median['small'] / median['plain']:.2f}x median, "
            f"{least['small'] / least['plain']:.2f}x fastest (the gate's own cost)"
        )
        if args.postgres:
            postgres_gate(config, args.gate_rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def postgres_gate(config: str, rounds: int) -> None:
    """The keeper's read and the gate alone on a private PostgreSQL cluster, the same
    transcripts (tests/support/postgres.py)."""
    sys.path.insert(0, os.path.join(HERE, ".."))
    from tests.support.postgres import Cluster, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    cluster = Cluster()
    try:
        cluster.start()
        url = cluster.fresh_database()
        fleet_id, _, ids = build(url, config)
        store = open_store(url)
        try:
            began = time.perf_counter()
            read = usage.refresh(store, fleet_id)[1]
            first = time.perf_counter() - began
            gate = gate_alone(store, ids, rounds)
        finally:
            store.close()
    finally:
        cluster.stop()
    print(
        f"postgres: keeper's first read {read / 1e6:.0f} MB in {first:.2f}s; the gate alone ({rounds} rounds): "
        + ", ".join(f"{name} {gate[name] * 1e6:.0f} us" for name in ("big", "small", "plain"))
        + f"; big/small {gate['big'] / gate['small']:.2f}x"
    )


if __name__ == "__main__":
    main()
