"""Benchmark: send -> submitted latency to a pane on another host (over SSH) against a local one.

    python bench/remote_latency.py [--sends N] [--store sqlite|postgres]

Builds a throw-away fleet in a private tmux server (bench/_pane_fleet.py) with one local
stand-in member beside the Director, and "another host": a real sshd on 127.0.0.1 with keys
made for the run (tests/support/sshd.py, so the test extras and openssh-server are needed),
with its own HOME and tmux socket directory, where a second stand-in member is created with
``member create --host``. Then, N times each, interleaved, it starts ``cafleet message send``
to the local and to the remote member and measures the time from starting the send to the
stand-in recording the submitted preview. Reports medians, p95 and the ratio remote/local
(goal: within 2x), plus how many SSH connections sshd accepted during the sends (goal: none
beyond the one opened at creation). Nothing outside the temporary folders is touched.

``--rtt MS`` puts the delaying proxy of tests/support/rtt_proxy.py (asyncio, 127.0.0.1)
between the Director's host and the SSH host, so the remote preview crosses a link of that
round-trip time; the report adds the remote cost over the local one in RTT (goal: at most
2 RTT more, with no new SSH handshake) and the round trips the proxy counted per send.

``--store postgres`` puts the fleet in a fresh database of a private PostgreSQL cluster
(tests/support/postgres.py) instead of a SQLite file: the pane-input lock is then the
advisory lock, taken on a connection of its own for each preview, local or remote.
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
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from _pane_fleet import PaneFleet
from tests.support.sshd import running_sshd


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def submitted_at(records: str, member_id: int, count: int) -> float:
    path = os.path.join(records, f"member-{member_id}.jsonl")
    deadline = time.monotonic() + 20
    while True:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as handle:
                submits = [json.loads(line) for line in handle if '"submit"' in line]
            if len(submits) >= count:
                return datetime.fromisoformat(submits[count - 1]["ts"]).timestamp()
        if time.monotonic() > deadline:
            raise SystemExit(f"submission {count} to member {member_id} was never recorded")
        time.sleep(0.01)


def wait_ready(fleet: PaneFleet, member_id: int) -> None:
    deadline = time.monotonic() + 20
    while not fleet.run("member", "capture", str(member_id), "--lines", "3").rstrip().endswith(">"):
        if time.monotonic() > deadline:
            raise SystemExit(f"member {member_id} did not draw its input line in time")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sends", type=int, default=20, help="sends to each member")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rtt", type=float, default=0.0, help="round-trip time to the SSH host, in ms")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    cluster = None
    if args.store == "postgres":
        from tests.support.postgres import Cluster, missing_reason

        reason = missing_reason()
        if reason:
            raise SystemExit(reason)
        cluster = Cluster()
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-")
    sshdir = Path(tempfile.mkdtemp(prefix="cf-ssh-", dir="/tmp"))  # short: socket paths are limited
    fleet = PaneFleet(workdir, "remote")
    remote_path = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    try:
        if cluster is not None:
            cluster.start()
            fleet.env["CAFLEET_DATABASE_URL"] = cluster.fresh_database()
        with running_sshd(sshdir, remote_path) as host:
            proxy = None
            if args.rtt:
                from tests.support.rtt_proxy import DelayProxy

                proxy = DelayProxy(("127.0.0.1", host.port), args.rtt / 1000)
                config = host.config.read_text().replace(f"Port {host.port}\n", f"Port {proxy.port}\n")
                host.config.write_text(config)
                known = host.root / "known_hosts"
                known.write_text(known.read_text().replace(f"]:{host.port} ", f"]:{proxy.port} "))
            fleet.env.update(CAFLEET_SSH_CONFIG=str(host.config), CAFLEET_SSH_CONTROL_DIR=str(sshdir / "control"))
            director, local = fleet.setup()
            remote = json.loads(
                fleet.run(
                    "member",
                    "create",
                    "--fleet-id",
                    str(json.loads(fleet.run("member", "show", str(director), "--json"))["fleet_id"]),
                    "--name",
                    "far",
                    "--description",
                    "remote target",
                    "--coding-agent",
                    "standin",
                    "--host",
                    host.alias,
                    "--json",
                    "Benchmark target.",
                )
            )["member_id"]
            wait_ready(fleet, remote)
            connections_before = host.accepted()
            times: dict[int, list[float]] = {local: [], remote: []}
            trips: list[int] = []
            for i in range(args.sends):
                for member in (local, remote):
                    before = proxy.round_trips() if proxy else 0
                    started = time.time()
                    done = subprocess.run(
                        [
                            *fleet.cafleet,
                            "message",
                            "send",
                            "--from-member-id",
                            str(director),
                            "--to-member-id",
                            str(member),
                            f"benchmark task {i}",
                        ],
                        capture_output=True,
                        text=True,
                        env=fleet.env,
                        timeout=60,
                    )
                    if done.returncode != 0 or done.stderr:
                        raise SystemExit(f"send failed: {done.stderr.strip() or done.returncode}")
                    times[member].append(submitted_at(fleet.records, member, i + 1) - started)
                    if proxy and member == remote:
                        time.sleep(0.2 + 2 * proxy.rtt)  # the last answers have crossed
                        trips.append(proxy.round_trips() - before)
            new_connections = host.accepted() - connections_before
            if proxy:
                proxy.stop()
    finally:
        fleet.kill()
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(sshdir, ignore_errors=True)

    local_median, remote_median = statistics.median(times[local]), statistics.median(times[remote])
    print(f"remote latency: {args.sends} sends each, interleaved, send -> preview submitted; {args.store}")
    for label, values in (("local pane", times[local]), ("pane over SSH (127.0.0.1)", times[remote])):
        print(
            f"  {label:<28} median {statistics.median(values) * 1000:7.0f} ms   "
            f"p95 {percentile(values, 0.95) * 1000:7.0f} ms"
        )
    print(f"  remote / local (median):     {remote_median / local_median:.2f}x   (goal: within 2x)")
    if args.rtt:
        extra = (remote_median - local_median) / (args.rtt / 1000)
        print(f"  link RTT {args.rtt:g} ms: remote - local = {extra:.2f} RTT (goal: at most 2)")
        print(f"  exchanges over the link per remote send (proxy flights answered): {statistics.median(trips):g}")
    print(f"  SSH connections opened by the sends: {new_connections} (one shared connection per host)")


if __name__ == "__main__":
    main()
