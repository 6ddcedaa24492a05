"""Benchmark: the fleet keeper, in one run (docs/performance.md).

    python bench/keeper.py [--rounds 20] [--members 8] [--seconds 30] [--store sqlite|postgres]

A throw-away fleet in a private tmux server (its own socket in a temporary folder), the
Director in a pane that runs `sleep`, the keeper on (started by `fleet create`), members
running the stand-in agent and registered through the broker (each in a window of its
own). Three measurements:

* **pane ready -> submitted**, ``--rounds`` times each, for two ways a pane becomes ready
  with no command running: the stand-in draws its input box late (``--start-delay``: the
  preview is sent while it shows none, and owed), and a permission prompt is answered (the
  answer is typed with tmux ``send-keys``). Ready is the stand-in's own record of the box
  being drawn / of the answer, submitted its record of the preview; both from its clock.
  Each round waits a random 0.2-2 s between the send and the pane becoming ready, so the
  keeper's back-off is met at every phase. Median and p95; the goal is 2 s.
* **idle CPU and RSS**: ``--members`` members in all (the two used above and idle ones),
  nothing owed, ``--seconds`` s: the keeper's CPU time from ``/proc/<pid>/schedstat`` (with
  the tmux clients it ran and waited for, from ``/proc/<pid>/stat``) as a share of one
  core (goal: under 0.5 %), then its resident set and peak (``/proc/<pid>/status``).
* **CPU while one member is held** (a permission prompt that nobody answers, a preview
  owed): the cost of the once-a-second look at that pane, over the same time.

With ``--store postgres`` the database is a fresh one on a private PostgreSQL cluster
(tests/support/postgres.py). Nothing outside the temporary folder is touched; the keeper
is ended by its pid and the tmux server killed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

import contextlib

from cafleet.broker import members
from cafleet.store.engines import open_store

STANDIN = [sys.executable, "-m", "cafleet.agents.standin"]
ISOLATED_PREFIXES = ("CAFLEET_", "TMUX", "HERDR", "XDG_")


def cpu(pid: int) -> float:
    """CPU seconds of the process (``/proc/<pid>/schedstat``: nanoseconds, finer than the
    clock ticks of ``stat``) plus those of the children it waited for (the tmux clients it
    ran: ``stat``'s cutime + cstime, in ticks)."""
    with open(f"/proc/{pid}/schedstat") as handle:
        own = int(handle.read().split()[0]) / 1e9
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return own + sum(int(f) for f in fields[13:15]) / os.sysconf("SC_CLK_TCK")


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


class Fleet:
    def __init__(self, work: str, url: str) -> None:
        self.work = work
        self.socket = os.path.join(work, "tmux.sock")
        home = os.path.join(work, "home")
        os.mkdir(home)
        base = {k: v for k, v in os.environ.items() if not k.startswith(ISOLATED_PREFIXES)}
        self.env = dict(base, HOME=home, CAFLEET_DATABASE_URL=url, CAFLEET_KEEPER="on")
        self.env["PYTHONPATH"] = os.pathsep.join(
            [os.path.join(HERE, "..", "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        self.url = url

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-f", "/dev/null", "-S", self.socket, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=10,
            check=True,
        )
        return done.stdout.strip()

    def cafleet(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [sys.executable, "-m", "cafleet", *args], capture_output=True, text=True, env=self.env, timeout=60
        )
        if check and done.returncode != 0:
            raise SystemExit(f"cafleet {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done

    def start(self) -> None:
        self.tmux("new-session", "-d", "-s", "k", "-x", "200", "-y", "50", "sleep", "86400")
        pane = self.tmux("display-message", "-p", "-t", "k", "#{pane_id}")
        self.env.update(TMUX=f"{self.socket},0,0", TMUX_PANE=pane)
        created = json.loads(
            self.cafleet("fleet", "create", "--name", "k", "--coding-agent", "standin", "--json").stdout
        )
        self.fleet_id, self.director = created["fleet_id"], created["director_member_id"]
        self.session = self.tmux("display-message", "-p", "-t", "k", "#{session_id}") + "@" + self.socket
        self.keeper_pid = self.wait(lambda: self.keeper()["pid"], "the keeper to start")

    def keeper(self) -> dict:
        return json.loads(self.cafleet("fleet", "show", str(self.fleet_id), "--json").stdout)["keeper"]

    def wait(self, check, what: str, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}")
            time.sleep(0.02)

    def member(self, name: str, *flags: str) -> tuple[int, str, str]:
        store = open_store(self.url)
        try:
            member_id = members.register_member(
                store,
                fleet_id=self.fleet_id,
                name=name,
                description=name,
                backend="tmux",
                session=self.session,
                window_id="@0",
                coding_agent="standin",
            )
            record = os.path.join(self.work, f"{name}.jsonl")
            argv = [*STANDIN, "--member-id", str(member_id), "--record", record, *flags]
            pane = self.tmux("new-window", "-d", "-P", "-F", "#{pane_id}", "-t", "k:", *argv)
            members.set_pane_id(store, member_id, pane)
        finally:
            store.close()
        return member_id, pane, record

    def respawn(self, pane: str, member_id: int, record: str, *flags: str) -> None:
        self.tmux("respawn-pane", "-k", "-t", pane, *STANDIN, "--member-id", str(member_id), "--record", record, *flags)

    def send(self, to_id: int, text: str) -> dict:
        done = self.cafleet(
            "message", "send", "--from-member-id", str(self.director), "--to-member-id", str(to_id), text, "--json"
        )
        return json.loads(done.stdout)


def records(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def submitted_at(path: str, message_id: int) -> float | None:
    for entry in records(path):
        if entry["kind"] == "submit" and entry["text"].startswith(f"[cafleet msg {message_id} "):
            return epoch(entry["ts"])
    return None


def last_ts(path: str, kind: str) -> float | None:
    found = [epoch(entry["ts"]) for entry in records(path) if entry["kind"] == kind]
    return found[-1] if found else None


def latencies(fleet: Fleet, rounds: int, how: str) -> list[float]:
    member_id, pane, record = fleet.member(f"ready-{how}")
    out = []
    for _ in range(rounds):
        os.unlink(record) if os.path.exists(record) else None
        pause = random.uniform(0.2, 2.0)  # send -> pane ready
        if how == "box":
            fleet.respawn(pane, member_id, record, "--start-delay", f"{pause + 1.5:.2f}")
            fleet.wait(lambda: "starting…" in fleet.tmux("capture-pane", "-p", "-t", pane), "the late box")
        else:
            fleet.respawn(pane, member_id, record, "--permission-prompt")
            fleet.wait(lambda: "2. No" in fleet.tmux("capture-pane", "-p", "-t", pane), "the prompt")
        sent = fleet.send(member_id, "a task")
        if sent["notified"]:
            raise SystemExit("the pane took the preview at once; nothing for the keeper to do")
        if how == "prompt":
            time.sleep(pause)
            fleet.tmux("send-keys", "-t", pane, "1", "Enter")
        message_id = sent["message_id"]
        done = fleet.wait(lambda m=message_id: submitted_at(record, m), "the keeper's delivery")
        ready = last_ts(record, "box-drawn" if how == "box" else "permission")
        if ready is None:
            raise SystemExit("the stand-in recorded no ready time")
        out.append(done - ready)
        fleet.cafleet("message", "ack", str(sent["message_id"]))
    return out


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def cpu_share(pid: int, seconds: float) -> float:
    c0, t0 = cpu(pid), time.monotonic()
    time.sleep(seconds)
    c1, t1 = cpu(pid), time.monotonic()
    return 100 * (c1 - c0) / (t1 - t0)


def memory(pid: int) -> tuple[int, int]:
    """The process's resident set now and its peak, in KiB (``/proc/<pid>/status``)."""
    found = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0])
    return found["VmRSS"], found["VmHWM"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="cafleet-keeper-bench-")
    cluster = None
    fleet = None
    try:
        if args.store == "postgres":
            from tests.support.postgres import Cluster

            cluster = Cluster()
            cluster.start()
            url = cluster.fresh_database()
        else:
            url = os.path.join(work, "k.db")
        fleet = Fleet(work, url)
        fleet.start()
        print(
            f"store {args.store}; keeper pid {fleet.keeper_pid}; settle {fleet.env.get('CAFLEET_SUBMIT_SETTLE', 'default')}"
        )
        for how, label in (("box", "input box drawn late"), ("prompt", "permission prompt answered")):
            values = latencies(fleet, args.rounds, how)
            print(
                f"pane ready -> submitted, {label}: median {1000 * statistics.median(values):.0f} ms, "
                f"p95 {1000 * p95(values):.0f} ms, max {1000 * max(values):.0f} ms ({len(values)} rounds)"
            )
        idle = [fleet.member(f"idle-{i}") for i in range(max(0, args.members - 2))]  # the 2 above count
        for _, pane, _ in idle:
            fleet.wait(
                lambda p=pane: any(
                    row.startswith(">") for row in fleet.tmux("capture-pane", "-p", "-t", p).splitlines()
                ),
                "a stand-in",
            )
        time.sleep(2)  # the last deliveries and ACKs settle
        share = cpu_share(fleet.keeper_pid, args.seconds)
        print(f"keeper CPU, {len(idle) + 2} members, nothing owed, {args.seconds:g} s: {share:.3f}% of a core")
        rss, peak = memory(fleet.keeper_pid)
        print(f"keeper RSS, {len(idle) + 2} members, nothing owed: {rss / 1024:.1f} MiB (peak {peak / 1024:.1f} MiB)")
        held_id, held_pane, _ = fleet.member("held", "--permission-prompt")
        fleet.wait(lambda: "2. No" in fleet.tmux("capture-pane", "-p", "-t", held_pane), "the prompt")
        fleet.send(held_id, "held task")
        time.sleep(2)
        share = cpu_share(fleet.keeper_pid, args.seconds)
        print(f"keeper CPU, one member held by a prompt, {args.seconds:g} s: {share:.3f}% of a core")
        if fleet.keeper()["pid"] != fleet.keeper_pid:
            print("note: the keeper was replaced during the run")
    finally:
        if fleet is not None and getattr(fleet, "keeper_pid", None):
            with contextlib.suppress(ProcessLookupError):
                os.kill(fleet.keeper_pid, signal.SIGTERM)
        subprocess.run(["tmux", "-S", os.path.join(work, "tmux.sock"), "kill-server"], capture_output=True)
        if cluster is not None:
            cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
