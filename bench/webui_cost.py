"""What an open WebUI page costs the server: multiplexer calls per second and CPU.

    python bench/webui_cost.py [--members 8] [--seconds 20] [--pages 0,1,3] [--sends 5]

Starts a private tmux server (killed at the end) with a Director pane and N stand-in
members, and `cafleet server` on a free loopback port with a counting `tmux` first on its
PATH (a shell script that appends one byte to a file per call, then runs the real tmux).
Then, for each page count, opens that many pages of the dashboard in Debian's headless
Chromium (all member tiles on screen) and measures for ``--seconds``:

- tmux calls per second made by the server (screens, member states of each event
  stream, everything), from the counting shim;
- the server's CPU (user + system, with the tmux clients it waited for, from /proc) as a
  share of one core.

Last, with one page open, it sends ``--sends`` messages between two members through the
broker and reports how long each took to appear as an edge of the graph.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from cafleet.broker import fleets, members, messages
from cafleet.store.engines import open_store
from tests.support.browser import CHROMIUM, CHROMIUM_ARGS

SHIM = '#!/bin/sh\nprintf . >> "$CAFLEET_BENCH_TMUX_CALLS"\nexec {tmux} "$@"\n'


def cpu(pid: int) -> float:
    """User + system time of the process and of its waited-for children, in seconds."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pages", default="0,1,3")
    parser.add_argument("--sends", type=int, default=5)
    args = parser.parse_args()
    page_counts = [int(p) for p in args.pages.split(",")]
    real_tmux = shutil.which("tmux")
    if real_tmux is None or not os.path.exists(CHROMIUM):
        raise SystemExit("needs tmux and /usr/bin/chromium")
    work = tempfile.mkdtemp(prefix="cafleet-webui-bench-")
    sock, db = os.path.join(work, "tmux.sock"), os.path.join(work, "x.db")
    calls_file = os.path.join(work, "tmux-calls")
    shim_dir = os.path.join(work, "bin")
    os.mkdir(shim_dir)
    with open(os.path.join(shim_dir, "tmux"), "w") as handle:
        handle.write(SHIM.format(tmux=real_tmux))
    os.chmod(os.path.join(shim_dir, "tmux"), 0o755)
    open(calls_file, "w").close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TMUX", "CAFLEET_", "HERDR"))}
    env.update(CAFLEET_DATABASE_URL=db, HOME=work)
    server_env = dict(env, PATH=f"{shim_dir}{os.pathsep}{env.get('PATH', '')}", CAFLEET_BENCH_TMUX_CALLS=calls_file)

    def tmux(*a):
        return subprocess.run(
            [real_tmux, "-S", sock, *a], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()

    server = None
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
        fleet_id = fleet["fleet_id"]
        ids = []
        for i in range(args.members):
            member_id = members.register_member(
                store,
                fleet_id=fleet_id,
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
            identity = tmux("display-message", "-p", "-t", pane, "#{pid}:#{start_time}:#{pane_pid}")
            members.set_pane_id(store, member_id, pane, identity)
            ids.append(member_id)
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "cafleet", "server", "--port", str(port)],
            env=server_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        first = server.stdout.readline().decode()
        if not first.startswith("serving "):
            raise SystemExit(f"cafleet server did not start: {first!r}")
        login = server.stdout.readline().decode().strip().removeprefix("log in: ")
        url = f"http://127.0.0.1:{port}/#fleet={fleet_id}"

        from playwright.sync_api import sync_playwright

        print(f"{args.members} members, {args.seconds:g} s per row, tmux calls counted at the server's PATH")
        print(f"{'pages':>5}  {'tmux calls/s':>12}  {'server CPU':>10}")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for count in page_counts:
                pages = []
                for _ in range(count):
                    page = browser.new_page(viewport={"width": 1600, "height": 2400})
                    page.goto(login)  # the session cookie, then the fleet's page
                    page.goto(url)
                    page.wait_for_function(
                        f"() => document.querySelectorAll('#screens .tile pre[data-status=ok]').length"
                        f" === {args.members}",
                        timeout=30_000,
                    )
                    pages.append(page)
                time.sleep(2)  # opening is not steady state
                calls0, cpu0, t0 = os.path.getsize(calls_file), cpu(server.pid), time.monotonic()
                time.sleep(args.seconds)
                calls1, cpu1, t1 = os.path.getsize(calls_file), cpu(server.pid), time.monotonic()
                wall = t1 - t0
                print(f"{count:>5}  {(calls1 - calls0) / wall:>12.2f}  {100 * (cpu1 - cpu0) / wall:>9.2f}%")
                for page in pages:
                    page.close()
            if args.sends:
                page = browser.new_page(viewport={"width": 1600, "height": 2400})
                page.goto(login)
                page.goto(url)
                page.wait_for_selector("#graph svg", timeout=30_000)
                latencies = []
                for n in range(args.sends):
                    sender, recipient = ids[(2 * n) % len(ids)], ids[(2 * n + 1) % len(ids)]
                    before = page.locator(f'#graph g.edge[data-from="{sender}"][data-to="{recipient}"]')
                    had = int(before.get_attribute("data-count")) if before.count() else 0
                    sent = time.monotonic()
                    messages.send(store, sender, recipient, f"bench {n}")
                    page.wait_for_function(
                        f"""() => {{ const e = document.querySelector('#graph g.edge[data-from="{sender}"][data-to="{recipient}"]');
                                   return e && Number(e.dataset.count) > {had}; }}""",
                        polling=10,
                        timeout=30_000,
                    )
                    latencies.append(time.monotonic() - sent)
                    time.sleep(0.5)
                print(
                    f"send -> graph edge: median {statistics.median(latencies):.2f} s, "
                    f"max {max(latencies):.2f} s over {len(latencies)} sends"
                )
            browser.close()
        store.close()
    finally:
        if server is not None and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=10)
        subprocess.run([real_tmux, "-S", sock, "kill-server"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
