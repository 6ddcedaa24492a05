"""Benchmark: what the fleet's size costs, in one run (docs/performance.md, "Fleet size").

    python bench/fleet_size.py [--members 10,30,100] [--remote-at 100] [--hosts 2]
                               [--sends 10] [--broadcasts 2] [--lists 5]
                               [--idle-seconds 30] [--web-seconds 20] [--compare REV]

For each size N: a throw-away fleet whose Director sits in a pane of a private tmux server
(``tmux -L cafleet-bench-size-<hex>``, no config file, a 220x60 window), SQLite in a
temporary folder, the keeper on (started by ``fleet create``), and N members started one
after another by ``cafleet member create --coding-agent standin`` from the Director's pane.
Members are placed as cafleet places them (docs/delivery.md, "Where members appear"): three
beside the Director, then the fleet's own tiled windows. At the sizes named by
``--remote-at``, members are spread round-robin over this machine and ``--hosts`` "other
hosts": real unprivileged ``sshd`` servers on 127.0.0.1 (tests/support/sshd.py), reached
with ``member create --host`` as tests/support/remote_fleet.py does; each host's members
get sessions of their own in that host's tmux server. Then, in this order:

* ``member create``: the wall time of each call (median; and of the last 10 made on this
  machine, which each met a fleet of nearly N);
* ``message send`` from the Director to one member on this machine (always the first one
  created), ``--sends`` times: the command's wall time, median. The stand-ins do not
  answer (no ``CAFLEET_STANDIN_AUTO_REPLY``): the bench measures cafleet, not N agents
  each running three commands at once; the target's inbox grows by the same sends at every
  size;
* ``message broadcast`` from the Director, ``--broadcasts`` times: the command's wall time
  (it returns once every preview was typed and confirmed, or was left owed to the keeper)
  and, from the stand-ins' own records, when the last preview was submitted; every preview
  must have been submitted exactly once;
* ``member list F --state``, ``--lists`` times: wall time, median;
* the keeper idle (nothing owed), ``--idle-seconds`` s: its CPU from ``/proc/<pid>/stat``
  (utime + stime, plus cutime + cstime: the tmux and ssh clients it ran and waited for) as a
  share of one core, and its resident set (``VmRSS``). With the default notice interval of
  15 s, 30 s holds two of its looks at every member's pane;
* the WebUI's screens grid: ``cafleet server`` on a free loopback port and one client
  polling ``GET /api/fleets/F/screens`` as the dashboard's screen grid does (``lines=40``,
  the next request one ``interval`` after the previous answer) for every member (in
  requests of at most 64 members, the API's bound), for ``--web-seconds`` s: the server's
  CPU (with the tmux and ssh clients it waited for) as a share of one core and per refresh,
  and each refresh's wall time. The dashboard's other requests (its event stream, the
  graph) are not made: this is the screens' cost alone.

``--compare REV`` runs every size twice in the same run, once on this tree and once on
``git archive REV`` (every cafleet process, the keeper and the panes' stand-ins included,
started with ``PYTHONPATH`` at that tree's ``src``; members on the sshd hosts run this
tree's stand-in, which is the same program), alternating which goes first from one size
to the next, and prints both and their ratio. Bytecode is cached as an installed package's
is (each tree compiled first, ``PYTHONDONTWRITEBYTECODE`` dropped): a command does not
compile its modules.

The environment sets ``CAFLEET_NOTICE_SILENT_AFTER=86400`` so that no "silent" notice falls
inside a measurement of a fleet that took minutes to build (the look that checks it still
runs). Nothing outside the temporary folders is touched. Every process started (the tmux
servers here and on the hosts, the keeper, ``cafleet server``, the sshd servers and the
connection masters cafleet opened to them) is ended by its pid at the end, also on error.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

from _pane_fleet import cafleet_argv

ISOLATED_PREFIXES = ("CAFLEET_", "TMUX", "HERDR", "XDG_", "CLAUDE_", "CODEX_", "OPENCODE_")
READY_TIMEOUT = 120.0
WIDTH, HEIGHT = 220, 60
TILE_LINES = 40  # what a tile of the dashboard asks for (web/static/fleetview.js)
MAX_MEMBERS = 64  # members in one screens request (cafleet.web.screens.MAX_MEMBERS)
TICK = os.sysconf("SC_CLK_TCK")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def end(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM ``pid``, SIGKILL it after ``timeout`` s, and wait (bounded) until it is gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not alive(pid):
            return


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(own, children waited for) CPU seconds of ``pid``: utime + stime, cutime + cstime."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Place:
    """Where members go: this machine (``host`` None) or one sshd host."""

    def __init__(self, host=None) -> None:
        self.host = host

    @property
    def name(self) -> str:
        return self.host.alias if self.host is not None else "local"


class Fleet:
    """One fleet of stand-ins; ``pane_env`` is what a process in the Director's pane sees."""

    def __init__(self, work: str, env_extra: dict[str, str]) -> None:
        self.work = work
        self.server_name = f"cafleet-bench-size-{uuid.uuid4().hex[:12]}"
        self.db = os.path.join(work, "size.db")
        self.records = os.path.join(work, "records")
        home = os.path.join(work, "home")
        os.makedirs(self.records)
        os.makedirs(home)
        base = {k: v for k, v in os.environ.items() if not k.startswith(ISOLATED_PREFIXES)}
        base.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: bytecode cached, not compiled per command
        self.env = dict(
            base,
            HOME=home,
            XDG_CONFIG_HOME=os.path.join(home, ".config"),
            XDG_DATA_HOME=os.path.join(home, ".local", "share"),
            XDG_STATE_HOME=os.path.join(home, ".local", "state"),
            XDG_CACHE_HOME=os.path.join(home, ".cache"),
            LANG="C.UTF-8",
            LC_ALL="C.UTF-8",
            CAFLEET_DATABASE_URL=self.db,
            CAFLEET_STANDIN_RECORD_DIR=self.records,
            CAFLEET_KEEPER="on",
            CAFLEET_NOTICE_SILENT_AFTER="86400",
            **env_extra,
        )
        self.argv = cafleet_argv()
        self.server_pid = 0
        self.pane_env: dict[str, str] = {}
        self.fleet_id = 0
        self.director = 0
        self.members: list[dict] = []  # {"member_id", "pane_id", "place"}

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-f", "/dev/null", "-L", self.server_name, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=20,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        self.tmux("new-session", "-d", "-s", "main", "-x", str(WIDTH), "-y", str(HEIGHT), "--", "sleep", "86400")
        pid, sock = self.tmux("display-message", "-p", "#{pid}\t#{socket_path}").rstrip("\n").split("\t")
        self.server_pid = int(pid)
        self.tmux("set-option", "-g", "default-size", f"{WIDTH}x{HEIGHT}")
        pane = self.tmux("display-message", "-p", "-t", "main:0.0", "#{pane_id}").strip()
        self.pane_env = dict(self.env, TMUX=f"{sock},{self.server_pid},0", TMUX_PANE=pane)
        created = json.loads(self.cafleet("fleet", "create", "--name", "size", "--coding-agent", "standin", "--json"))
        self.fleet_id, self.director = created["fleet_id"], created["director_member_id"]

    def cafleet(self, *args: str, timeout: float = 600) -> str:
        done = subprocess.run([*self.argv, *args], capture_output=True, text=True, env=self.pane_env, timeout=timeout)
        if done.returncode != 0:
            raise SystemExit(f"cafleet {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}")
        return done.stdout

    def timed(self, *args: str) -> tuple[float, str, str]:
        started = time.perf_counter()
        done = subprocess.run([*self.argv, *args], capture_output=True, text=True, env=self.pane_env, timeout=600)
        took = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"cafleet {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}")
        return took, done.stdout, done.stderr

    def create(self, index: int, place: Place) -> float:
        args = ["member", "create", "--fleet-id", str(self.fleet_id), "--name", f"m{index}"]
        args += ["--description", "benchmark member", "--coding-agent", "standin", "--json"]
        if place.host is not None:
            args += ["--host", place.host.alias]
        took, out, err = self.timed(*args, "Wait for tasks.")
        if err.strip():
            print(f"    member create m{index} said: {err.strip()}", flush=True)
        record = json.loads(out)
        self.members.append({"member_id": record["member_id"], "pane_id": record["pane_id"], "place": place})
        return took

    def screen(self, member: dict) -> str:
        host = member["place"].host
        try:
            if host is None:
                return self.tmux("capture-pane", "-p", "-t", member["pane_id"])
            return host.remote_tmux("capture-pane", "-p", "-t", member["pane_id"])
        except RuntimeError:
            return ""

    def wait_ready(self) -> float:
        started = time.monotonic()
        pending = list(self.members)
        while pending:
            pending = [m for m in pending if not any(r.startswith(">") for r in self.screen(m).splitlines())]
            if not pending:
                break
            if time.monotonic() - started > READY_TIMEOUT:
                raise SystemExit(f"{len(pending)} stand-ins did not draw their input line in time")
            time.sleep(0.2)
        return time.monotonic() - started

    def keeper_pid(self) -> int:
        shown = json.loads(self.cafleet("fleet", "show", str(self.fleet_id), "--json"))
        keeper = shown.get("keeper") or {}
        if not keeper.get("pid") or keeper.get("state") not in ("running",):
            raise SystemExit(f"the fleet's keeper does not run: {keeper}")
        return int(keeper["pid"])

    def owed(self) -> int:
        """How many members are owed a preview now."""
        from cafleet.broker import notifications
        from cafleet.store.engines import open_store

        store = open_store(self.db)
        try:
            return len(notifications.recipients_owed_notifications(store, self.fleet_id))
        finally:
            store.close()

    def submits(self, member_id: int) -> list[tuple[float, str]]:
        path = os.path.join(self.records, f"member-{member_id}.jsonl")
        if not os.path.exists(path):
            return []
        out = []
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                entry = json.loads(line)
                if entry.get("kind") == "submit":
                    out.append((entry["ts"], entry["text"]))
        return out


def epoch(stamp) -> float:
    if isinstance(stamp, (int, float)):
        return float(stamp)
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def measure_broadcast(fleet: Fleet, round_no: int) -> tuple[float, float, list[str]]:
    """(command wall s, start -> last preview submitted s, problems)."""
    text = f"broadcast {round_no}: status check"
    wall_start = time.time()
    took, out, err = fleet.timed("message", "broadcast", "--from-member-id", str(fleet.director), "--json", text)
    problems = []
    if err.strip():
        problems.append(f"broadcast said: {err.strip()[:300]}")
    result = json.loads(out)
    sent = result["sent"]
    if len(sent) != len(fleet.members) or result["failed"]:
        problems.append(f"{len(sent)} sent, {len(result['failed'])} failed for {len(fleet.members)} members")
    deadline = time.monotonic() + 120
    last = 0.0
    for record in sent:
        header = f"[cafleet msg {record['message_id']} "
        while True:
            seen = [ts for ts, line in fleet.submits(record["to_member_id"]) if header in line]
            if seen or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if len(seen) != 1:
            problems.append(f"message {record['message_id']}: submitted {len(seen)} times")
        if seen:
            last = max(last, epoch(seen[0]))
    return took, (last - wall_start) if last else float("nan"), problems


def measure_idle(fleet: Fleet, seconds: float) -> tuple[float, float, float]:
    """(keeper CPU % of one core, of which its own, RSS MiB) over ``seconds`` with nothing owed."""
    deadline = time.monotonic() + 120
    while fleet.owed():
        if time.monotonic() > deadline:
            raise SystemExit("previews are still owed two minutes after the broadcasts")
        time.sleep(0.5)
    time.sleep(3)  # the keeper's last deliveries settle
    pid = fleet.keeper_pid()
    own0, kids0 = cpu_seconds(pid)
    t0 = time.monotonic()
    time.sleep(seconds)
    own1, kids1 = cpu_seconds(pid)
    wall = time.monotonic() - t0
    total = (own1 - own0) + (kids1 - kids0)
    return 100 * total / wall, 100 * (own1 - own0) / wall, rss_mib(pid)


def measure_web(fleet: Fleet, seconds: float) -> dict:
    """The screens grid polled by one client, for every member; the server's CPU."""
    port = free_port()
    env = {k: v for k, v in fleet.env.items() if not k.startswith("TMUX")}
    server = subprocess.Popen(
        [*fleet.argv, "server", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        first = server.stdout.readline().decode()
        if not first.startswith("serving "):
            raise SystemExit(f"cafleet server did not start: {first!r} {server.stderr.read().decode()[:300]}")
        token = server.stdout.readline().decode().strip().rsplit("token=", 1)[-1]
        ids = [m["member_id"] for m in fleet.members]
        chunks = [ids[i : i + MAX_MEMBERS] for i in range(0, len(ids), MAX_MEMBERS)]
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

        def refresh() -> tuple[float, float, int]:
            started = time.perf_counter()
            interval = 1.0
            ok = 0
            for chunk in chunks:
                path = f"/api/fleets/{fleet.fleet_id}/screens?members={','.join(map(str, chunk))}&lines={TILE_LINES}"
                conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {token}"})
                response = conn.getresponse()
                body = json.loads(response.read())
                if response.status != 200:
                    raise SystemExit(f"screens answered {response.status}: {body}")
                interval = body["interval"]
                ok += sum(1 for s in body["screens"] if s["status"] == "ok")
            return time.perf_counter() - started, interval, ok

        for _ in range(3):  # warm: the server's imports, the first captures
            _took, interval, _ok = refresh()
            time.sleep(interval)
        own0, kids0 = cpu_seconds(server.pid)
        t0 = time.monotonic()
        walls, oks = [], []
        while time.monotonic() - t0 < seconds:
            took, interval, ok = refresh()
            walls.append(took)
            oks.append(ok)
            time.sleep(interval)
        own1, kids1 = cpu_seconds(server.pid)
        wall = time.monotonic() - t0
        conn.close()
        cpu = (own1 - own0) + (kids1 - kids0)
        return {
            "cpu_pct": 100 * cpu / wall,
            "per_refresh_ms": 1000 * cpu / len(walls),
            "refresh_ms": 1000 * median(walls),
            "refreshes": len(walls),
            "all_ok": all(ok == len(ids) for ok in oks),
        }
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=15)


def start_hosts(stack: ExitStack, count: int, records: str, env: dict[str, str]) -> list:
    """``count`` sshd hosts in one short private folder, named in one ssh_config; their
    members record into ``records``. Sets CAFLEET_SSH_CONFIG and CAFLEET_SSH_CONTROL_DIR in ``env``."""
    from tests.support.sshd import running_sshd

    root = Path(tempfile.mkdtemp(prefix="cf-size-", dir="/tmp"))
    stack.callback(shutil.rmtree, root, True)
    os.chmod(root, 0o700)
    remote_path = os.pathsep.join([os.path.dirname(sys.executable), os.environ["PATH"]])
    hosts = []
    for n in range(count):
        alias = f"host{n + 1}"
        host = stack.enter_context(
            running_sshd(
                root / alias,
                remote_path,
                alias,
                extra_env={"CAFLEET_STANDIN_RECORD_DIR": records},
                control_dir=root / "control",
            )
        )
        stack.callback(stop_remote_tmux, host)  # runs before the host's own teardown
        hosts.append(host)
    config = root / "ssh_config"
    config.write_text("".join(h.config.read_text(encoding="utf-8") for h in hosts), encoding="utf-8")
    env["CAFLEET_SSH_CONFIG"] = str(config)
    env["CAFLEET_SSH_CONTROL_DIR"] = str(root / "control")
    return hosts


def stop_remote_tmux(host) -> None:
    """End the host's tmux server (cafleet started it there for this run) by its pid."""
    try:
        pid = int(host.remote_tmux("display-message", "-p", "#{pid}").strip())
    except (RuntimeError, ValueError):
        return
    end(pid)


def run_size(count: int, hosts_wanted: int, args, tree: str | None = None) -> dict:
    work = tempfile.mkdtemp(prefix="cafleet-size-bench-")
    out: dict = {"members": count}
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, work, True)
        env_extra: dict[str, str] = {"PYTHONPATH": os.path.join(tree, "src")} if tree else {}
        hosts = start_hosts(stack, hosts_wanted, os.path.join(work, "records"), env_extra) if hosts_wanted else []
        fleet = Fleet(work, env_extra)
        stack.callback(teardown, fleet)
        fleet.start()
        places = [Place(None)] + [Place(h) for h in hosts]
        creates: list[tuple[str, float]] = []
        built = time.monotonic()
        for i in range(count):
            place = places[i % len(places)]
            creates.append((place.name, fleet.create(i, place)))
            if (i + 1) % 10 == 0:
                print(f"  {i + 1} members created ({time.monotonic() - built:.0f} s)", flush=True)
        ready = fleet.wait_ready()
        print(f"  all {count} stand-ins ready {ready:.1f} s after the last creation", flush=True)
        local = [t for where, t in creates if where == "local"]
        out["create"] = median(t for _, t in creates)
        out["create_local_last10"] = median(local[-10:])
        out["create_remote"] = median(t for where, t in creates if where != "local")
        out["placement"] = ", ".join(f"{sum(1 for m in fleet.members if m['place'] is p)} {p.name}" for p in places)
        out["windows"] = len(fleet.tmux("list-windows", "-t", "main", "-F", "#{window_id}").split())

        target = fleet.members[0]["member_id"]
        sends = []
        for n in range(args.sends):
            took, _o, err = fleet.timed(
                "message", "send", "--from-member-id", str(fleet.director), "--to-member-id", str(target), f"task {n}"
            )
            if err.strip():
                print(f"    send said: {err.strip()[:200]}", flush=True)
            sends.append(took)
        out["send"] = median(sends)
        remote_target = next((m for m in fleet.members if m["place"].host is not None), None)
        if remote_target is not None:
            remote_sends = []
            for n in range(args.sends):
                took, _o, _e = fleet.timed(
                    "message",
                    "send",
                    "--from-member-id",
                    str(fleet.director),
                    "--to-member-id",
                    str(remote_target["member_id"]),
                    f"far task {n}",
                )
                remote_sends.append(took)
            out["send_remote"] = median(remote_sends)

        walls, lasts, problems = [], [], []
        for n in range(args.broadcasts):
            took, last, trouble = measure_broadcast(fleet, n)
            walls.append(took)
            lasts.append(last)
            problems += trouble
            print(f"  broadcast {n}: {took:.2f} s, last preview submitted at {last:.2f} s", flush=True)
            time.sleep(1)
        out["broadcast"] = median(walls)
        out["broadcast_last"] = median(lasts)
        out["problems"] = problems

        lists = []
        for _ in range(args.lists):
            took, listed, _e = fleet.timed("member", "list", str(fleet.fleet_id), "--state", "--json")
            lists.append(took)
        states = [r["state"] for r in json.loads(listed) if r["kind"] != "director"]
        out["list_state"] = median(lists)
        out["states"] = ", ".join(f"{states.count(s)} {s}" for s in sorted(set(states)))

        out["keeper_cpu"], out["keeper_own"], out["keeper_rss"] = measure_idle(fleet, args.idle_seconds)
        out["web"] = measure_web(fleet, args.web_seconds) if args.web_seconds else None
        for problem in problems:
            print(f"  PROBLEM: {problem}", flush=True)
    return out


def teardown(fleet: Fleet) -> None:
    """The keeper, then this run's tmux server, each by its pid."""
    try:
        if fleet.fleet_id:
            shown = subprocess.run(
                [*fleet.argv, "fleet", "show", str(fleet.fleet_id), "--json"],
                capture_output=True,
                text=True,
                env=fleet.pane_env,
                timeout=60,
            )
            if shown.returncode == 0:
                pid = (json.loads(shown.stdout).get("keeper") or {}).get("pid")
                if pid:
                    end(int(pid))
    finally:
        if fleet.server_pid:
            end(fleet.server_pid)


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×" if base and base == base and value == value else "—"


def report(rows: list[dict], title: str) -> None:
    base = rows[0]
    print()
    print(f"{title}: sizes {', '.join(str(r['members']) for r in rows)}; ratios against {base['members']} members")
    print()
    head = ["members", "placed", "create (median)", "create, last 10 here", "send to one (median)"]
    head += ["broadcast (wall)", "last preview in", "`member list --state`", "keeper idle CPU", "keeper RSS"]
    head += ["screens refresh (wall)", "server CPU, 1 s refreshes", "CPU per refresh"]
    print("| " + " | ".join(head) + " |")
    print("|" + " --- |" * len(head))
    for r in rows:
        web = r["web"] or {}
        b = base["web"] or {}
        cells = [
            str(r["members"]),
            r["placement"],
            f"{r['create'] * 1000:.0f} ms ({ratio(r['create'], base['create'])})",
            f"{r['create_local_last10'] * 1000:.0f} ms ({ratio(r['create_local_last10'], base['create_local_last10'])})",
            f"{r['send'] * 1000:.0f} ms ({ratio(r['send'], base['send'])})",
            f"{r['broadcast']:.2f} s ({ratio(r['broadcast'], base['broadcast'])})",
            f"{r['broadcast_last']:.2f} s",
            f"{r['list_state'] * 1000:.0f} ms ({ratio(r['list_state'], base['list_state'])})",
            f"{r['keeper_cpu']:.2f} % ({ratio(r['keeper_cpu'], base['keeper_cpu'])})",
            f"{r['keeper_rss']:.1f} MiB",
        ]
        if web:
            cells += [
                f"{web['refresh_ms']:.0f} ms ({ratio(web['refresh_ms'], b.get('refresh_ms', 0))})",
                f"{web['cpu_pct']:.1f} %",
                f"{web['per_refresh_ms']:.1f} ms ({ratio(web['per_refresh_ms'], b.get('per_refresh_ms', 0))})",
            ]
        else:
            cells += ["—", "—", "—"]
        print("| " + " | ".join(cells) + " |")
    print()
    for r in rows:
        extra = [f"keeper's own CPU {r['keeper_own']:.2f} %", f"states: {r['states']}", f"{r['windows']} windows"]
        if r.get("create_remote") == r.get("create_remote"):
            extra.append(f"create on a host {r['create_remote'] * 1000:.0f} ms")
        if "send_remote" in r:
            extra.append(f"send to a member on a host {r['send_remote'] * 1000:.0f} ms")
        if r["web"]:
            extra.append(f"{r['web']['refreshes']} refreshes, every screen ok: {r['web']['all_ok']}")
        extra.append(f"problems: {len(r['problems'])}")
        print(f"{r['members']} members: " + "; ".join(extra))
    print()
    by = {r["members"]: r for r in rows}
    if 10 in by and 100 in by:
        print(f"send at 100 / at 10: {by[100]['send'] / by[10]['send']:.2f}× (goal ≤ 1.2×)")
    if 100 in by:
        print(f"member list --state at 100: {by[100]['list_state'] * 1000:.0f} ms (goal ≤ 500 ms)")
        print(f"keeper idle at 100: {by[100]['keeper_cpu']:.2f} % of a core (goal ≤ 1 %)")
    if 30 in by:
        print(f"broadcast to 30: {by[30]['broadcast']:.2f} s (goal ≤ 2 s)")


def compare(before: list[dict], after: list[dict]) -> None:
    print()
    print("after / before, each size (same run):")
    print()
    names = [
        ("create", "create"),
        ("send", "send to one"),
        ("broadcast", "broadcast"),
        ("list_state", "`member list --state`"),
        ("keeper_cpu", "keeper idle CPU"),
    ]
    print("| members | " + " | ".join(label for _, label in names) + " | screens CPU per refresh |")
    print("|" + " --- |" * (len(names) + 2))
    for old, new in zip(before, after):
        cells = [ratio(new[key], old[key]) for key, _ in names]
        cells.append(ratio((new["web"] or {}).get("per_refresh_ms", 0), (old["web"] or {}).get("per_refresh_ms", 0)))
        print(f"| {new['members']} | " + " | ".join(cells) + " |")


def archive(rev: str, into: str) -> str:
    """``git archive REV`` of this repository, unpacked in ``into``."""
    tree = os.path.join(into, "tree")
    os.mkdir(tree)
    data = subprocess.run(["git", "-C", ROOT, "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", tree], input=data, check=True)
    return tree


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", default="10,30,100", help="fleet sizes, comma-separated")
    parser.add_argument("--remote-at", default="100", help="sizes whose members are spread over the sshd hosts")
    parser.add_argument("--hosts", type=int, default=2, help="sshd hosts at those sizes (besides this machine)")
    parser.add_argument("--sends", type=int, default=10)
    parser.add_argument("--broadcasts", type=int, default=2)
    parser.add_argument("--lists", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--web-seconds", type=float, default=20)
    parser.add_argument("--compare", metavar="REV", help="also run every size on this git revision, interleaved")
    args = parser.parse_args()
    sizes = [int(p) for p in args.members.split(",") if p.strip()]
    remote = {int(p) for p in args.remote_at.split(",") if p.strip()}
    with ExitStack() as stack:
        trees: list[tuple[str, str | None]] = [("this tree", None)]
        if args.compare:
            folder = tempfile.mkdtemp(prefix="cafleet-size-rev-")
            stack.callback(shutil.rmtree, folder, True)
            trees.insert(0, (args.compare, archive(args.compare, folder)))
        for _label, tree in trees:  # each tree's bytecode written once, before anything is timed
            src = os.path.join(tree or ROOT, "src")
            subprocess.run([sys.executable, "-m", "compileall", "-q", src], check=True, stdout=subprocess.DEVNULL)
        rows: dict[str, list[dict]] = {label: [] for label, _ in trees}
        for n, count in enumerate(sizes):
            for label, tree in trees if n % 2 == 0 else list(reversed(trees)):
                print(f"{count} members, {label} (load average {os.getloadavg()[0]:.1f})", flush=True)
                rows[label].append(run_size(count, args.hosts if count in remote else 0, args, tree))
                print(f"  done (load average {os.getloadavg()[0]:.1f})", flush=True)
    for label, _ in trees:
        report(rows[label], label)
    if args.compare:
        compare(rows[args.compare], rows["this tree"])


if __name__ == "__main__":
    main()
