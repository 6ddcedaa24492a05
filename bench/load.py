"""Benchmark: sustained throughput and latency with many processes on one database.

    python bench/load.py [--senders N] [--messages N] [--receivers N] [--pollers N]
                         [--listeners N] [--pane-messages N] [--pane-gap S]
                         [--wait-probes N] [--probe-gap S] [--spawn]
                         [--store sqlite|postgres|both]

One throw-away fleet in a private tmux server (its own socket in a temporary folder): a
Director pane, one member running the stand-in agent in a real pane, and ``--receivers``
members without a pane. All at once:

* ``--senders`` processes each send ``--messages`` messages, round-robin over the
  receivers (half of them from the Director, half member to member);
* each receiver runs ``message wait`` + ``message ack`` until it has ACKed its share;
* ``--pollers`` processes loop ``message poll`` on receivers' inboxes, ``--poll-gap``
  seconds apart;
* ``--listeners`` ``message listen`` processes stream an extra member nobody ACKs
  (one message in ten goes there);
* two processes send ``--pane-messages`` each to the stand-in's pane, ``--pane-gap``
  seconds apart: every one of those sends types a preview (pane lock, settle delay,
  confirmation), and every receiver's ``message wait`` also retries previews owed there.

Then, unless ``--wait-probes 0``, a second phase measures ``message wait`` while another
member's pane is being typed into: one process sends to the stand-in's pane back to back
(so its pane-input lock is held almost all the time and a preview is owed there), one
member loops ``message wait`` + ``message ack``, and a probe sender sends it
``--wait-probes`` messages ``--probe-gap`` seconds apart. Reported: commit -> returned by
that member's wait, for the probes committed while a pane send was in progress.

The workers are tests/support/load_workers.py: each command runs in-process with a fresh
connection (open, diagnose, work, close: one invocation minus interpreter start-up), or
as a real ``python -m cafleet`` process with ``--spawn``. Reported: messages stored per
second over the run; per operation the count, rate and p50/p95/p99 latency; the delivery
latencies (message stored -> returned by a wait, -> printed by a listen, send started ->
preview submitted in the pane); and the checks: nothing lost or duplicated, no process
wrote to stderr (so no "database is locked"), each listen got every message once, each
pane message previewed exactly once. Nothing outside the temporary folder is touched.

``--store`` chooses the database: a SQLite file in the work folder (the default), a fresh
database on a private PostgreSQL cluster started for the run (tests/support/postgres.py:
Debian's server on a Unix socket, as the postgres user when run as root; needs psycopg),
or ``both``: the same load on a SQLite file and then on PostgreSQL, each in its own fleet,
followed by a table of ratios, PostgreSQL over SQLite, for the throughput and the p50/p99
of send, ack, wait and listen.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from _pane_fleet import PaneFleet
from cafleet.broker import members
from cafleet.config import Settings
from cafleet.store.engines import open_store


def epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


class Bench(PaneFleet):
    """A private tmux server, an isolated environment, a database and a stand-in record
    folder, all inside ``workdir`` (see _pane_fleet.py)."""

    def __init__(self, workdir: str, database_url: str | None = None) -> None:
        keep = {k: os.environ[k] for k in ("CAFLEET_SUBMIT_SETTLE", "CAFLEET_LOCK_TIMEOUT") if k in os.environ}
        super().__init__(workdir, "load", keep)
        if database_url is not None:  # PostgreSQL; else the SQLite file in the work folder
            self.env["CAFLEET_DATABASE_URL"] = database_url
        self.cafleet = [sys.executable, "-m", "cafleet"]


class Listener:
    """``message listen --json``; each line kept with the time it was read."""

    def __init__(self, env: dict, member: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "message", "listen", str(member), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.lines: list[tuple[float, dict]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            item = json.loads(line)
            if item.get("event") != "end":  # the stream's last line, on SIGTERM
                self.lines.append((time.time(), item))

    def stop(self) -> bytes:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Load:
    def __init__(self, bench: Bench, args: argparse.Namespace) -> None:
        self.bench = bench
        self.args = args
        self.env = dict(bench.env, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "src"), ROOT]))
        self.failures: list[str] = []
        self.started = 0
        self.processes: list[subprocess.Popen] = []  # everything started, for cleanup

    def worker(self, *args: str) -> tuple[subprocess.Popen, str]:
        """Start a load worker; its JSON lines go to a file (a pipe left unread would fill
        up and stall it)."""
        spawn = ["--spawn"] if self.args.spawn else []
        self.started += 1
        path = os.path.join(self.bench.workdir, f"worker-{self.started}.jsonl")
        with open(path, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.load_workers", *spawn, *args],
                cwd=ROOT,
                env=self.env,
                stdout=out,
                stderr=subprocess.PIPE,
            )
        self.processes.append(proc)
        return proc, path

    def kill_all(self) -> None:
        """Stop whatever is still running (after a failure or an interrupt), by pid."""
        for proc in self.processes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def finish(self, name: str, started: tuple[subprocess.Popen, str]) -> list[dict]:
        proc, path = started
        _, err = proc.communicate(timeout=600)
        if proc.returncode != 0 or err:
            self.failures.append(f"{name} exited {proc.returncode}: {err.decode(errors='replace').strip()}")
        with open(path, "rb") as handle:
            return [json.loads(line) for line in handle]

    def register(self, director: int, count: int) -> list[int]:
        """Members without a pane (pending placements), in the Director's fleet."""
        shown = json.loads(self.bench.run("member", "show", str(director), "--json"))
        store = open_store(self.env["CAFLEET_DATABASE_URL"])
        try:
            return [
                members.register_member(
                    store,
                    fleet_id=shown["fleet_id"],
                    name=f"r{i}",
                    description="load receiver",
                    backend="tmux",
                    session=shown["placement"]["session"],
                    window_id=shown["placement"]["window_id"],
                    coding_agent="standin",
                )
                for i in range(count)
            ]
        finally:
            store.close()

    def run(self) -> dict:
        args = self.args
        director, pane_member = self.bench.setup()
        receivers = self.register(director, args.receivers)
        [listened] = self.register(director, 1)
        stop_polling = os.path.join(self.bench.workdir, "stop-polling")

        plan = {}
        for i in range(args.senders):
            sender = director if i % 2 == 0 else receivers[i % len(receivers)]
            targets = [m for m in receivers if m != sender]
            rotated = targets[i % len(targets) :] + targets[: i % len(targets)]
            to = [listened if k % 10 == 9 else rotated[k % len(rotated)] for k in range(args.messages)]
            plan[f"s{i}"] = (sender, to)
        share = Counter(m for _, to in plan.values() for m in to)

        listeners = [Listener(self.env, listened) for _ in range(args.listeners)]
        self.processes += [listener.proc for listener in listeners]
        time.sleep(0.5)  # listeners up before the first send
        started = time.time()
        receiving = {m: self.worker("receive", str(m), str(share[m]), "--deadline", "300") for m in receivers}
        polling = [
            self.worker("poll", str(receivers[i % len(receivers)]), stop_polling, "--gap", str(args.poll_gap))
            for i in range(args.pollers)
        ]
        # A sender's list of targets, one per message: "send" cycles through the list given.
        sending = {
            tag: self.worker("send", str(sender), ",".join(map(str, to)), str(args.messages), tag)
            for tag, (sender, to) in plan.items()
        }
        pane_sending = [
            self.worker(
                "send", str(director), str(pane_member), str(args.pane_messages), f"p{i}", "--gap", str(args.pane_gap)
            )
            for i in range(2)
        ]
        try:
            sent = [r for tag, proc in sending.items() for r in self.finish(f"sender {tag}", proc)]
            pane_sent = [r for i, proc in enumerate(pane_sending) for r in self.finish(f"pane sender {i}", proc)]
            received = [r for m, proc in receiving.items() for r in self.finish(f"receiver {m}", proc)]
            ended = time.time()
            deadline = time.monotonic() + 30
            while any(len(li.lines) < share[listened] for li in listeners) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            open(stop_polling, "w").close()
            polled = [r for i, proc in enumerate(polling) for r in self.finish(f"poller {i}", proc)]
            for i, listener in enumerate(listeners):
                err = listener.stop()
                if listener.proc.returncode != 0 or err:
                    self.failures.append(f"listener {i} exited {listener.proc.returncode}: {err.decode().strip()}")
        return {
            "started": started,
            "ended": ended,
            "sent": sent,
            "pane_sent": pane_sent,
            "received": received,
            "director": director,
            "polled": polled,
            "listeners": listeners,
            "listened": listened,
            "pane_member": pane_member,
            "receivers": receivers,
            "plan": plan,
        }

    def busy_wait(self, director: int, pane_member: int) -> dict:
        """``message wait`` while another member's pane is being typed into (see above)."""
        args = self.args
        [waiter] = self.register(director, 1)
        stop_busy = os.path.join(self.bench.workdir, "stop-busy")
        busy = self.worker("send", str(director), str(pane_member), "1000000", "b", "--until", stop_busy)
        time.sleep(1.0)  # the first pane send is under way
        receiving = self.worker("receive", str(waiter), str(args.wait_probes), "--deadline", "300")
        time.sleep(0.5)  # the waiter is blocked in its first wait
        probing = self.worker(
            "send", str(director), str(waiter), str(args.wait_probes), "w", "--gap", str(args.probe_gap)
        )
        try:
            probes = self.finish("probe sender", probing)
            received = self.finish("busy-pane waiter", receiving)
        finally:
            open(stop_busy, "w").close()
            busy_sent = self.finish("busy pane sender", busy)
        return {"probes": probes, "received": received, "busy": busy_sent}

    def check(self, result: dict) -> list[str]:
        """Loss, duplicates, listens and previews; returns what is wrong (empty: all good)."""
        problems = list(self.failures)
        sent = result["sent"] + result["pane_sent"]
        ids = [r["id"] for r in sent]
        if len(ids) != len(set(ids)):
            problems.append("a message id was printed twice")
        store = open_store(self.env["CAFLEET_DATABASE_URL"])
        try:
            rows = store.execute("SELECT message_id, to_member_id, text FROM messages").fetchall()
            if store.engine == "sqlite" and store.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
                problems.append("integrity_check failed")
        finally:
            store.close()
        expected_texts = Counter(f"{tag}-{k}" for tag, (_, to) in result["plan"].items() for k in range(len(to)))
        expected_texts.update(f"p{i}-{k}" for i in range(2) for k in range(self.args.pane_messages))
        if Counter(r[2] for r in rows) != expected_texts or sorted(r[0] for r in rows) != sorted(ids):
            problems.append("the stored messages differ from the ones sent")
        acked = Counter(r["id"] for r in result["received"] if r["op"] == "ack")
        waited = Counter(m[0] for r in result["received"] if r["op"] == "wait" for m in r["messages"])
        to_receivers = Counter(r[0] for r in rows if r[1] in set(result["receivers"]))
        if acked != to_receivers or waited != to_receivers:
            problems.append("the waits/ACKs do not match the messages sent to the receivers one to one")
        to_listened = sorted(r[0] for r in rows if r[1] == result["listened"])
        for i, listener in enumerate(result["listeners"]):
            if [line["message_id"] for _, line in listener.lines] != to_listened:
                problems.append(f"listener {i} did not print every message once in order")
        headers = Counter()
        for record in self.bench_records(result["pane_member"]):
            for r in result["pane_sent"]:
                if f"[cafleet msg {r['id']} from " in record["text"]:
                    headers[r["id"]] += 1
        if headers != Counter({r["id"]: 1 for r in result["pane_sent"]}):
            problems.append(
                f"pane previews not exactly once each: {len(headers)} of {len(result['pane_sent'])} "
                f"seen, {sum(1 for c in headers.values() if c > 1)} more than once"
            )
        return problems

    def bench_records(self, member_id: int) -> list[dict]:
        path = os.path.join(self.bench.records, f"member-{member_id}.jsonl")
        if not os.path.exists(path):
            return []
        with open(path, encoding="utf-8") as handle:
            return [r for r in map(json.loads, handle) if r["kind"] == "submit"]


def line(label: str, values: list[float], span: float | None = None) -> str:
    """Count, rate over ``span`` seconds (if given) and p50/p95/p99 of ``values``."""
    if not values:
        return f"  {label:<36} (none)"
    rate = f"{len(values) / span:8.1f}/s" if span else " " * 10
    return (
        f"  {label:<36} {len(values):6d} {rate}  p50 {percentile(values, 0.5) * 1000:7.1f}  "
        f"p95 {percentile(values, 0.95) * 1000:7.1f}  p99 {percentile(values, 0.99) * 1000:7.1f} ms"
    )


def op_line(label: str, records: list[dict]) -> str:
    """An operation's latencies, its rate taken over its own active span (first start to
    last end), so a slow tail of other work does not dilute it."""
    if not records:
        return line(label, [])
    span = max(r["end"] for r in records) - min(r["start"] for r in records)
    return line(label, [r["end"] - r["start"] for r in records], span)


def report(load: Load, result: dict, settle: float) -> dict:
    """Print the run and its checks (SystemExit when one failed); return its figures for
    the ratio table: messages stored per second and, per operation, its latencies."""
    args = load.args
    if load.failures:
        raise SystemExit("load run failed:\n  " + "\n  ".join(load.failures))
    sent, received, polled = result["sent"], result["received"], result["polled"]
    acks = [r for r in received if r["op"] == "ack"]
    send_span = max(r["end"] for r in sent) - min(r["start"] for r in sent)
    mode = "a real process per command" if args.spawn else "in-process commands, fresh connection each"
    print(
        f"load: {args.senders} senders x {args.messages}, {args.receivers} wait+ack receivers, {args.pollers} "
        f"pollers ({args.poll_gap * 1000:.0f} ms apart), {args.listeners} listeners, 2 pane senders x "
        f"{args.pane_messages} ({args.pane_gap * 1000:.0f} ms apart); {mode}; settle {settle * 1000:.0f} ms; "
        f"{os.cpu_count()} CPUs; {store_name(load.env['CAFLEET_DATABASE_URL'])}"
    )
    print(
        f"  sustained: {len(sent)} messages stored in {send_span:.1f} s = {len(sent) / send_span:.0f} messages/s "
        f"(whole run {result['ended'] - result['started']:.1f} s, {len(acks)} ACKs, {len(polled)} polls)"
    )
    print(f"  {'operation':<36} {'count':>6} {'rate':>10}  latency")
    print(op_line("send (no pane)", sent))
    print(op_line("send + preview typed (pane)", result["pane_sent"]))
    print(op_line("ack", acks))
    print(op_line("poll", polled))
    waits = [r for r in received if r["op"] == "wait"]
    print(op_line("wait (until it returned)", waits))
    print("  delivery")
    stored_to_wait = [r["end"] - epoch(m[2]) for r in waits for m in r["messages"]]
    print(line("stored -> returned by a wait", stored_to_wait))
    store = open_store(load.env["CAFLEET_DATABASE_URL"])
    try:
        stamps = dict(store.execute("SELECT message_id, created_at FROM messages").fetchall())
    finally:
        store.close()
    stored_to_listen = [seen - epoch(stamps[rec["message_id"]]) for li in result["listeners"] for seen, rec in li.lines]
    print(line("stored -> printed by a listen", stored_to_listen))
    submitted = {}
    for record in load.bench_records(result["pane_member"]):
        for r in result["pane_sent"]:
            if f"[cafleet msg {r['id']} from " in record["text"]:
                submitted.setdefault(r["id"], epoch(record["ts"]))
    to_preview = [submitted[r["id"]] - r["start"] for r in result["pane_sent"] if r["id"] in submitted]
    print(line("send started -> preview submitted", to_preview))
    problems = load.check(result)
    print(
        "  checks: "
        + (
            "nothing lost, nothing duplicated, no error output, every listen and preview exact"
            if not problems
            else "FAILED: " + "; ".join(problems)
        )
    )
    if problems:
        raise SystemExit(1)
    return {
        "throughput": len(sent) / send_span,
        "send (no pane)": [r["end"] - r["start"] for r in sent],
        "send + preview typed (pane)": [r["end"] - r["start"] for r in result["pane_sent"]],
        "ack": [r["end"] - r["start"] for r in acks],
        "poll": [r["end"] - r["start"] for r in polled],
        "wait (until it returned)": [r["end"] - r["start"] for r in waits],
        "stored -> returned by a wait": stored_to_wait,
        "stored -> printed by a listen": stored_to_listen,
        "send started -> preview submitted": to_preview,
    }


def report_busy_wait(load: Load, phase: dict) -> dict:
    """Commit -> returned by the waiter's wait, for probes committed during a pane send."""
    if load.failures:
        raise SystemExit("busy-pane wait phase failed:\n  " + "\n  ".join(load.failures))
    store = open_store(load.env["CAFLEET_DATABASE_URL"])
    try:
        stamps = dict(store.execute("SELECT message_id, created_at FROM messages").fetchall())
    finally:
        store.close()
    busy = [(r["start"], r["end"]) for r in phase["busy"]]
    returned = {m[0]: r["end"] for r in phase["received"] if r["op"] == "wait" for m in r["messages"]}
    during, other = [], []
    for probe in phase["probes"]:
        committed = epoch(stamps[probe["id"]])
        latency = returned[probe["id"]] - committed
        (during if any(start <= committed <= end for start, end in busy) else other).append(latency)
    waits = [r for r in phase["received"] if r["op"] == "wait"]
    lost = sorted(set(p["id"] for p in phase["probes"]) - set(returned))
    print(
        f"wait while another member's pane is being typed into: {len(phase['probes'])} probes "
        f"{load.args.probe_gap * 1000:.0f} ms apart, {len(phase['busy'])} pane sends back to back "
        f"(each, pane lock held while typing, took p50 {percentile([e - s for s, e in busy], 0.5) * 1000:.0f} ms)"
    )
    print(line("commit -> returned by a wait (pane busy)", during))
    print(line("commit -> returned by a wait (pane idle)", other))
    print(op_line("wait (until it returned)", waits))
    print(
        "  checks: "
        + (
            "every probe returned by a wait, no error output"
            if not lost
            else f"FAILED: probes never returned by a wait: {lost}"
        )
    )
    if lost:
        raise SystemExit(1)
    return {"busy pane: commit -> returned by a wait": during}


RATIO_ROWS = (  # the latencies in the ratio table, each by its p50 and p99
    "send (no pane)",
    "ack",
    "wait (until it returned)",
    "stored -> returned by a wait",
    "stored -> printed by a listen",
    "send + preview typed (pane)",
    "busy pane: commit -> returned by a wait",
)


def store_name(url: str) -> str:
    return "PostgreSQL" if url.startswith(("postgresql://", "postgres://")) else "SQLite"


def report_ratios(figures: dict[str, dict]) -> None:
    """PostgreSQL over SQLite, from the two runs just printed."""
    lite, pg = figures["sqlite"], figures["postgres"]
    print(
        "postgres / sqlite, the same load one after the other (throughput: above 1 is PostgreSQL "
        "faster; latencies: below 1 is PostgreSQL faster)"
    )
    print(f"  {'figure':<48} {'sqlite':>10} {'postgres':>10} {'ratio':>8}")
    print(
        f"  {'throughput (messages stored per second)':<48} {lite['throughput']:>10.1f} "
        f"{pg['throughput']:>10.1f} {pg['throughput'] / lite['throughput']:>7.2f}x"
    )
    for name in RATIO_ROWS:
        if not lite.get(name) or not pg.get(name):
            continue
        for label, fraction in (("p50", 0.5), ("p99", 0.99)):
            a, b = percentile(lite[name], fraction) * 1000, percentile(pg[name], fraction) * 1000
            ratio = f"{b / a:>7.2f}x" if a > 0 else "       -"
            print(f"  {name + ' ' + label + ' (ms)':<48} {a:>10.1f} {b:>10.1f} {ratio}")


def run_once(args: argparse.Namespace, database_url: str | None) -> dict:
    """One load on one store, in a work folder and tmux server of its own; its figures."""
    workdir = tempfile.mkdtemp(prefix="cafleet-load-")
    bench = Bench(workdir, database_url)
    settle = Settings(bench.env).submit_settle
    load = Load(bench, args)
    try:
        result = load.run()
        figures = report(load, result, settle)
        if args.wait_probes > 0:
            figures.update(report_busy_wait(load, load.busy_wait(result["director"], result["pane_member"])))
        return figures
    finally:
        load.kill_all()
        bench.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--messages", type=int, default=150, help="messages per sender")
    parser.add_argument("--receivers", type=int, default=4)
    parser.add_argument("--pollers", type=int, default=2)
    parser.add_argument("--poll-gap", type=float, default=0.02, help="seconds between a poller's polls")
    parser.add_argument("--listeners", type=int, default=2)
    parser.add_argument("--pane-messages", type=int, default=10, help="messages per pane sender (two of them)")
    parser.add_argument("--pane-gap", type=float, default=0.25, help="seconds between a pane sender's sends")
    parser.add_argument(
        "--wait-probes",
        type=int,
        default=20,
        help="messages to a waiting member while another pane is busy (0: skip that phase)",
    )
    parser.add_argument("--probe-gap", type=float, default=0.35, help="seconds between probe messages")
    parser.add_argument("--spawn", action="store_true", help="run every command as a real process")
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres", "both"),
        default="sqlite",
        help="a SQLite file, a private PostgreSQL cluster, or both one after the other with their ratios",
    )
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.receivers < 2:
        parser.error("--receivers must be at least 2")
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    stores = ["sqlite", "postgres"] if args.store == "both" else [args.store]
    cluster = None
    if "postgres" in stores:
        sys.path.insert(0, ROOT)
        from tests.support.postgres import Cluster, missing_reason

        reason = missing_reason()
        if reason:
            raise SystemExit(reason)
        cluster = Cluster()
    figures = {}
    try:
        if cluster is not None:
            cluster.start()
        for kind in stores:
            if len(stores) > 1:
                print(f"== {kind} ==")
            figures[kind] = run_once(args, cluster.fresh_database() if kind == "postgres" and cluster else None)
    finally:
        if cluster is not None:
            cluster.stop()
    if len(stores) > 1:
        report_ratios(figures)


if __name__ == "__main__":
    main()
