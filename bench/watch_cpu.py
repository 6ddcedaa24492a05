"""CPU cost of `cafleet fleet watch` on a 10-member fleet at the default interval.

    python bench/watch_cpu.py [--members 10] [--seconds 60] [--interval 5]

Starts a private tmux server (killed at the end), a Director pane and N stand-in members,
runs `cafleet fleet watch` for the given time and reports the watch process's CPU time
(user + system, including the tmux clients it runs, from /proc) as a share of one core, and the tmux server's share too.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.broker import fleets, members
from cafleet.store.engines import open_store


def cpu(pid: int) -> float:
    """User + system time of the process and of its waited-for children (the tmux clients
    it runs), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--interval", type=float, default=5)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cafleet-watch-bench-")
    sock, db = os.path.join(work, "tmux.sock"), os.path.join(work, "x.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "CAFLEET_", "HERDR"))}
    env["CAFLEET_DATABASE_URL"] = db

    def tmux(*a):
        return subprocess.run(
            ["tmux", "-S", sock, *a], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()

    try:
        tmux("new-session", "-d", "-s", "w", "-x", "200", "-y", "50", "sleep", "86400")
        director_pane = tmux("display-message", "-p", "-t", "w", "#{pane_id}")
        session = tmux("display-message", "-p", "-t", "w", "#{session_id}") + "@" + sock
        store = open_store(db)
        fleet = fleets.create_fleet(
            store,
            name="bench",
            coding_agent="standin",
            backend="tmux",
            session=session,
            window_id="@0",
            pane_id=director_pane,
        )
        for i in range(args.members):
            member_id = members.register_member(
                store,
                fleet_id=fleet["fleet_id"],
                name=f"m{i}",
                description="d",
                backend="tmux",
                session=session,
                window_id="@0",
                coding_agent="standin",
            )
            pane = tmux(
                "new-window",
                "-d",
                "-P",
                "-F",
                "#{pane_id}",
                "-t",
                "w:",
                sys.executable,
                "-m",
                "cafleet.agents.standin",
                "--member-id",
                str(member_id),
            )
            members.set_pane_id(store, member_id, pane)
        store.close()
        server_pid = int(tmux("display-message", "-p", "#{pid}"))
        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cafleet",
                "fleet",
                "watch",
                str(fleet["fleet_id"]),
                "--interval",
                str(args.interval),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
        )
        time.sleep(2)  # start-up is not steady state
        w0, s0, t0 = cpu(watch.pid), cpu(server_pid), time.monotonic()
        time.sleep(args.seconds)
        w1, s1, t1 = cpu(watch.pid), cpu(server_pid), time.monotonic()
        watch.terminate()
        watch.wait(timeout=10)
        wall = t1 - t0
        print(f"{args.members} members, interval {args.interval:g} s, {wall:.0f} s measured")
        print(f"watch process and its tmux clients: {100 * (w1 - w0) / wall:.2f}% of a core")
        print(f"tmux server:   {100 * (s1 - s0) / wall:.2f}% of a core")
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
