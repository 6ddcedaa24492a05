"""Benchmark: how long a `cafleet message send` takes to wake a member, in one run.

    python bench/delivery_latency.py [--sends N] [--settle SECONDS]

Builds a throw-away fleet in a private tmux server (its own socket in a temporary folder):
a Director pane and one member running the stand-in agent, which records the time of
every line submitted to it. Then, N times, it starts `cafleet message send` to the member
and measures

* submitted: from starting the send to the stand-in recording the submitted preview;
* exited:    from starting the send to the send process exiting (what the caller waits);

interleaved with the same number of sends to the Director (no pane is typed into for
the Director), which measure what a send costs without delivery. It reports median and
p95 of each, the settle delay used (``--settle``, else ``CAFLEET_SUBMIT_SETTLE``, else
cafleet's default), and the overhead beyond it: how much of the member send is neither
the settle delay nor a plain send. Nothing outside the temporary folder is touched.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from _pane_fleet import PaneFleet
from cafleet.config import Settings


class Bench(PaneFleet):
    def __init__(self, workdir: str, settle: float) -> None:
        super().__init__(workdir, "bench", {"CAFLEET_SUBMIT_SETTLE": f"{settle}"})

    def send(self, from_id: int, to_id: int, text: str) -> tuple[float, float]:
        """Start one send; (wall-clock start, seconds until the process exited)."""
        started_wall, started = time.time(), time.perf_counter()
        done = subprocess.run(
            [*self.cafleet, "message", "send", "--from-member-id", str(from_id), "--to-member-id", str(to_id), text],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=60,
        )
        exited = time.perf_counter() - started
        if done.returncode != 0 or done.stderr:
            raise SystemExit(f"send failed: {done.stderr.strip() or done.returncode}")
        return started_wall, exited

    def submitted_at(self, member_id: int, count: int) -> float:
        """Wall-clock time the stand-in recorded its ``count``-th submission."""
        path = os.path.join(self.records, f"member-{member_id}.jsonl")
        deadline = time.monotonic() + 10
        while True:
            with open(path, encoding="utf-8") as handle:
                submits = [json.loads(line) for line in handle if '"submit"' in line]
            if len(submits) >= count:
                return datetime.fromisoformat(submits[count - 1]["ts"]).timestamp()
            if time.monotonic() > deadline:
                raise SystemExit(f"submission {count} was never recorded")
            time.sleep(0.01)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def report(label: str, values: list[float]) -> str:
    return f"  {label:<34} median {statistics.median(values) * 1000:7.0f} ms   p95 {percentile(values, 0.95) * 1000:7.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=30, help="sends to the member (and as many to the Director)")
    parser.add_argument(
        "--settle", type=float, default=None, help="settle delay in seconds (default $CAFLEET_SUBMIT_SETTLE or 0.3)"
    )
    args = parser.parse_args()
    settle = args.settle if args.settle is not None else Settings(os.environ).submit_settle
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-")
    bench = Bench(workdir, settle)
    try:
        director, member = bench.setup()
        submitted, exited, plain = [], [], []
        for i in range(args.sends):
            started, took = bench.send(director, member, f"benchmark task {i}: please summarise the change")
            submitted.append(bench.submitted_at(member, i + 1) - started)
            exited.append(took)
            plain.append(bench.send(member, director, f"benchmark reply {i}")[1])
    finally:
        subprocess.run(["tmux", "-S", bench.socket, "kill-server"], capture_output=True, timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)

    command = "cafleet" if len(bench.cafleet) == 1 else "python -m cafleet"
    print(f"delivery latency: {args.sends} sends into a stand-in pane ({command}), settle delay {settle * 1000:.0f} ms")
    print(report("send -> preview submitted", submitted))
    print(report("send -> send process exited", exited))
    print(report("send to the Director (no typing)", plain))
    delivery = [e - p for e, p in zip(exited, plain)]
    beyond = statistics.median(delivery) - settle
    print(
        f"  overhead beyond the settle delay:  {beyond * 1000:.0f} ms median "
        f"(member send minus a plain send, minus {settle * 1000:.0f} ms settle; "
        f"tmux calls, screen checks, confirmation)"
    )
    print(
        f"  submitted -> exited:               {statistics.median([e - s for e, s in zip(exited, submitted)]) * 1000:.0f} ms median "
        "(confirming the submission, stamping notified_at, exit)"
    )


if __name__ == "__main__":
    main()
