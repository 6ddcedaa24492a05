"""Benchmark: each hot command's round trips to PostgreSQL, and its wall time over a slow link.

    python bench/pg_roundtrips.py [--runs N] [--rtts 5,20,80]

Starts a private PostgreSQL cluster (tests/support/postgres.py, a Unix socket) and, for
each round-trip time, a delaying TCP proxy on 127.0.0.1 in front of it
(tests/support/rtt_proxy.py: half the RTT each way, one more RTT before the client's first
bytes for the TCP handshake; netem is not available here). Each hot command runs as its
own ``cafleet`` process with ``CAFLEET_DATABASE_URL`` naming the proxy; the proxy counts
its connections and round trips (the handshake plus each client flight the server
answered), which depend on the protocol conversation only. A proxy with no delay gives the
command's cost without the link; ``(wall - wall at 0) / RTT`` is what the link cost, in
round trips.

Then ``message wait`` through the proxy, woken by a ``message send`` on the server's own
socket (another host's commit): the time from the sender's exit to the waiter's, in RTT.

The client is libpq (``cafleet.store.libpq``), so the conversation is libpq's: over TCP
with the default ``sslmode=prefer`` it asks the server for TLS first (one round trip),
then logs in, then the store's one-round-trip open. Each count is printed beside its goal
(``GOALS``, at most; the wake-up: at most ``WAKE_GOAL`` RTT at the largest RTT).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "src"))
sys.path.insert(0, ROOT)

from bench.hot_commands import hot_argvs

GOALS = {
    "message poll": 5,
    "message send": 8,
    "message ack": 6,
    "member list": 11,
    "message show": 5,
    "fleet list": 5,
}
WAKE_GOAL = 1.6  # RTT, from the commit to the waiter's first line


def tcp_url(unix_url: str, port: int) -> str:
    """The cluster's database URL, through the proxy on 127.0.0.1."""
    database = unix_url.split("@/", 1)[1].split("?", 1)[0]
    return f"postgresql://postgres@127.0.0.1:{port}/{database}"


def hot_commands(fleet_id: int, director: int, workers: list[int], ack_id) -> dict[str, list[str] | None]:
    return {
        **hot_argvs(fleet_id, director, workers),
        "message ack": ["message", "ack", str(ack_id())],
        "fleet list": ["fleet", "list"],
    }


def measure(cafleet: list[str], argv: list[str], env: dict, proxy) -> tuple[float, int, int]:
    """(wall seconds, connections, round trips) of one command through ``proxy``."""
    proxy.reset()
    started = time.perf_counter()
    done = subprocess.run(cafleet + argv, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    time.sleep(0.05 + proxy.rtt)  # the closing bytes reach the proxy
    links = proxy.snapshot()
    return elapsed, len(links), sum(link.round_trips for link in links)


def wake_time(cafleet, env, store, member: int, sender: int, proxy) -> float:
    """Seconds from a commit on the server's own socket (this process: another host) to the
    first line of a ``message wait`` that listens through the proxy."""
    from cafleet.broker import messages

    waiter = subprocess.Popen(
        [*cafleet, "message", "wait", str(member), "--timeout", "30"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.5 + 10 * proxy.rtt)  # connected, listening and read once
    sent = messages.send(store, sender, member, "wake")
    committed = time.perf_counter()
    line = waiter.stdout.readline()
    woken = time.perf_counter()
    waiter.communicate(timeout=60)
    messages.ack(store, sent["message_id"])  # the next wait waits again
    if not line:
        raise SystemExit("message wait printed nothing")
    return woken - committed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rtts", default="5,20,80", help="round-trip times in milliseconds")
    args = parser.parse_args()
    rtts = [0.0] + [float(x) / 1000 for x in args.rtts.split(",")]
    from bench.hot_commands import bench_fleet, cafleet_bin
    from cafleet.broker import messages
    from cafleet.store.engines import open_store
    from tests.support.postgres import Cluster, missing_reason
    from tests.support.rtt_proxy import DelayProxy

    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    cafleet = cafleet_bin()
    cluster = Cluster()
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-rtt-")
    try:
        cluster.start()
        url = cluster.fresh_database()
        store = open_store(url)
        fleet_id, director, workers = bench_fleet(store)
        for i in range(5):
            messages.send(store, director, workers[0], f"task {i}")
        acks = [
            messages.send(store, director, workers[1], "to ack")["message_id"]
            for _ in range((len(rtts) + 2) * args.runs)
        ]
        store.close()
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("CAFLEET_", "TMUX", "HERDR", "PG")) and k != "PYTHONDONTWRITEBYTECODE"
        }
        socket_path = os.path.join(cluster.socket_dir, ".s.PGSQL.5432")
        table: dict[str, dict[float, tuple[float, int, int]]] = {}
        wakes: dict[float, float] = {}
        proxies = {rtt: DelayProxy(socket_path, rtt) for rtt in rtts}
        envs = {rtt: dict(base_env, CAFLEET_DATABASE_URL=tcp_url(url, proxy.port)) for rtt, proxy in proxies.items()}
        try:
            # Paired: each run takes every command over every RTT in turn, so the machine's
            # load (shared, noisy) weighs on every column alike.
            samples: dict[tuple[str, float], list[tuple[float, int, int]]] = {}
            for _ in range(args.runs):
                for name, argv in hot_commands(fleet_id, director, workers, acks.pop).items():
                    for rtt in rtts:
                        if name == "message ack":
                            argv = hot_commands(fleet_id, director, workers, acks.pop)[name]
                        samples.setdefault((name, rtt), []).append(measure(cafleet, argv, envs[rtt], proxies[rtt]))
            for (name, rtt), values in samples.items():
                counts = {(c, r) for _, c, r in values}
                if len(counts) != 1:
                    print(f"note: {name} at {rtt * 1000:g} ms varied: {sorted(counts)} (its data grew)")
                table.setdefault(name, {})[rtt] = (
                    statistics.median(v[0] for v in values),
                    statistics.median_low(v[1] for v in values),
                    statistics.median_low(v[2] for v in values),
                )
            direct = open_store(url)
            try:
                for rtt in rtts[1:]:
                    wakes[rtt] = statistics.median(
                        wake_time(cafleet, envs[rtt], direct, workers[3], workers[4], proxies[rtt]) for _ in range(3)
                    )
            finally:
                direct.close()
        finally:
            for proxy in proxies.values():
                proxy.stop()
        print(
            f"{args.runs} runs per command and RTT, paired, medians; connections and round trips counted at the proxy"
        )
        print("extra: wall minus wall over the undelayed proxy, in RTT (the round trips are its floor)")
        head = f"{'command':<13} {'conns':>5} {'RTs':>4} {'goal':>8} {'wall@0':>8}"
        for rtt in rtts[1:]:
            head += f" {'wall@' + format(rtt * 1000, 'g'):>9} {'extra':>6}"
        print(head)
        for name, by_rtt in table.items():
            wall0, conns, trips = by_rtt[0.0]
            verdict = "ok" if trips <= GOALS[name] else "OVER"
            line = f"{name:<13} {conns:>5} {trips:>4} {f'{GOALS[name]} {verdict}':>8} {wall0 * 1000:>6.0f}ms"
            for rtt in rtts[1:]:
                wall, c, r = by_rtt[rtt]
                line += f" {wall * 1000:>7.0f}ms {(wall - wall0) / rtt:>6.1f}"
                if (c, r) != (conns, trips):
                    line += f" ({c} conns, {r} RTs)"
            print(line)
        print("message wait woken by a commit on the server's socket (commit -> the waiter's first line), median of 3:")
        for rtt, seconds in wakes.items():
            print(f"  RTT {rtt * 1000:g} ms: {seconds * 1000:.0f} ms = {seconds / rtt:.2f} RTT")
        if wakes:
            worst = max(wakes)
            verdict = "met" if wakes[worst] / worst <= WAKE_GOAL else "NOT met"
            print(f"  goal: at most {WAKE_GOAL} RTT at {worst * 1000:g} ms: {verdict}")
    finally:
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
