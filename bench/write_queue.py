"""Benchmark: the writers' queue against SQLite's busy handler alone, in one run.

    python bench/write_queue.py [--rounds N] [load.py's options, e.g. --senders 8]

Runs the main phase of bench/load.py (default sizes: 8 closed-loop senders, 4 wait+ack
receivers, pollers, listeners and two pane senders on one database) ``--rounds`` times
each way, alternating which goes first so that a drift in the machine's load hits both:

* ``busy handler``: writers take SQLite's write lock with ``BEGIN IMMEDIATE`` alone,
  retried by SQLite's busy handler (sleeps growing to 100 ms, no order);
* ``queue``: writers first queue on the ``flock`` beside the database (what cafleet does).

Reported per run and as the median over the rounds: sends/s over the senders' span, send
and ACK latency p50/p95/p99/max and mean, and the queue/busy-handler ratios, over the runs that passed load.py's checks (nothing
lost or duplicated, no error output); a run that failed them (on a loaded machine, senders
told "database is locked" after the 5 s busy timeout) is listed as failed. The commands run
in-process (tests/support/load_workers.py), so the queue is switched per worker process.

The mean matters: with closed-loop senders the mean latency is fixed by the write rate
(Little's law: senders / sends per second), whatever the order of the queue; what an
order changes is how that wait is shared out, so p50 and p99 move in opposite directions.
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

from load import Bench, Load, build_parser, percentile
from tests.support.load_workers import NO_WRITERS_QUEUE

MODES = ("busy handler", "queue")


def figures(result: dict) -> dict[str, float]:
    sent = result["sent"]
    acks = [r for r in result["received"] if r["op"] == "ack"]
    span = max(r["end"] for r in sent) - min(r["start"] for r in sent)
    out = {"sends/s": len(sent) / span}
    for name, records in (("send", sent), ("ack", acks)):
        values = [(r["end"] - r["start"]) * 1000 for r in records]
        for label, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            out[f"{name} {label}"] = percentile(values, q)
        out[f"{name} max"] = max(values)
        out[f"{name} mean"] = statistics.fmean(values)
    return out


def one_run(args, mode: str) -> dict[str, float] | str:
    """The run's figures, or what went wrong (a run that failed load.py's checks)."""
    workdir = tempfile.mkdtemp(prefix="cafleet-wq-")
    bench = Bench(workdir)
    load = Load(bench, args)
    if mode == "busy handler":
        load.env[NO_WRITERS_QUEUE] = "1"
    try:
        result = load.run()
        problems = load.check(result)
        if problems:
            locked = sum("is locked by another process" in p for p in problems)
            return f"FAILED: {locked} workers got 'database is locked'; " + problems[-1]
        return figures(result)
    finally:
        load.kill_all()
        bench.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = build_parser()
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode")
    args = parser.parse_args()
    if args.spawn:
        parser.error("--spawn is not supported here: the queue is switched in the in-process workers")
    if args.store != "sqlite":
        parser.error("the writers' queue is SQLite's: --store must be sqlite")
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    failed = dict.fromkeys(MODES, 0)
    columns = ("sends/s", "send p50", "send p95", "send p99", "send max", "send mean", "ack p50", "ack p99", "ack mean")
    print(f"{'run':<18}" + "".join(f"{c:>11}" for c in columns))
    for round_no in range(args.rounds):
        order = MODES if round_no % 2 == 0 else MODES[::-1]
        for mode in order:
            got = one_run(args, mode)
            label = f"{mode + ' ' + str(round_no + 1):<18}"
            if isinstance(got, str):
                failed[mode] += 1
                print(label + got, flush=True)
                continue
            runs[mode].append(got)
            print(label + "".join(f"{got[c]:>11.1f}" for c in columns), flush=True)
    for mode in MODES:
        print(f"{mode}: {failed[mode]} of {args.rounds} runs failed")
    if not all(runs.values()):
        raise SystemExit("no ratio: every run of one mode failed")
    medians = {mode: {c: statistics.median(r[c] for r in runs[mode]) for c in columns} for mode in MODES}
    for mode in MODES:
        print(f"{mode + ' median':<18}" + "".join(f"{medians[mode][c]:>11.1f}" for c in columns))
    base, queued = medians["busy handler"], medians["queue"]
    print(f"{'queue / busy':<18}" + "".join(f"{queued[c] / base[c]:>10.2f}x" for c in columns))
    for mode in MODES:
        m = medians[mode]
        print(f"{mode}: send p99 / p50 = {m['send p99'] / m['send p50']:.1f}x")
    print("(ms except sends/s; medians over the runs that passed load.py's checks)")


if __name__ == "__main__":
    main()
