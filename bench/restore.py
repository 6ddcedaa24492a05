"""Benchmark: `cafleet fleet restore` after the fleet's tmux server died, in one run.

    python bench/restore.py [--members 1,4,16] [--rounds 5] [--samples 10]

For each size N: a throw-away fleet (SQLite in a temporary folder, the keeper on) whose
Director sits in a pane of a private tmux server (``tmux -L cafleet-bench-restore-<hex>``,
no config file) and N members started by ``cafleet member create --coding-agent standin``.
Then, ``--rounds`` times each, alternating:

* **clean round**: the keeper is ended, the tmux server is killed (SIGKILL: every pane is
  lost), a new server is started on the same socket name (as after a reboot, see
  tests/test_restore.py) with one pane running ``sleep``, and ``cafleet fleet restore F
  --json`` runs from that pane. Measured: the command's wall time (start -> exit), and the
  time from its start until every restored member's stand-in shows its input line (a row
  starting with ``>`` in ``tmux capture-pane``, polled every 20 ms once the command has
  printed the new panes).
* **loaded round**: the same, and the Director's command ``cafleet member list F`` run
  from the new pane's environment ``--samples`` times back to back just before the restore
  (idle), then back to back for as long as the restore runs (during; a run counts when it
  started before the restore exited). Reported: median during / median idle. Each run of
  it is followed by one of ``python -c pass`` (the same interpreter), timed the same way: a
  control that says how much of the ratio is the machine's CPU being taken (two cores,
  the restore and the agents it starts) rather than anything cafleet's command waits on;
  the CPU time of each run of the command (``wait4``) is reported beside it.

Every member's outcome must be ``restored``; any other outcome is printed with its detail.

Members are placed as ``member create`` and ``restore`` place them (docs/delivery.md,
"Where members appear"): beside the Director while every pane keeps its minimum size,
then in the fleet's own tiled windows; tmux is left as it is (no hook, no config file).

Nothing outside the temporary folder and the private server is touched. At the end (also
on error) the keeper is ended by its pid, the private server is killed by its pid, and any
process left whose environment names this run's database is ended by its pid.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import contextlib

from _pane_fleet import cafleet_argv

ISOLATED_PREFIXES = ("CAFLEET_", "TMUX", "HERDR", "XDG_", "CLAUDE_", "CODEX_", "OPENCODE_")
READY_TIMEOUT = 60.0


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def end(pid: int, timeout: float = 10.0) -> None:
    """SIGTERM ``pid``, SIGKILL it after ``timeout`` s, and wait (bounded) until it is gone."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, timeout)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not alive(pid):
            return


class Fleet:
    """One fleet in a private tmux server; ``pane_env`` is what a process in the Director's
    (current) pane sees."""

    def __init__(self, work: str) -> None:
        self.work = work
        self.name = f"cafleet-bench-restore-{uuid.uuid4().hex[:12]}"
        self.db = os.path.join(work, "restore.db")
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
            CAFLEET_KEEPER="on",  # as users run it: restore starts the keeper at its end
        )
        self.cafleet_argv = cafleet_argv()
        self.server_pid = 0
        self.socket = ""
        self.pane_env: dict[str, str] = {}
        self.fleet_id = 0
        self.director = 0

    # -- tmux --------------------------------------------------------------------------------
    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-f", "/dev/null", "-L", self.name, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=10,
        )
        if done.returncode != 0:
            raise RuntimeError(f"tmux {args[0]} failed: {done.stderr.strip()}")
        return done.stdout

    def start_server(self) -> None:
        """A new server on this run's socket name, one session ``main`` whose pane runs
        ``sleep``: the Director's pane from now on."""
        self.tmux("new-session", "-d", "-s", "main", "-x", "200", "-y", "50", "--", "sleep", "86400")
        pid, self.socket = self.tmux("display-message", "-p", "#{pid}\t#{socket_path}").rstrip("\n").split("\t")
        self.server_pid = int(pid)
        self.tmux("set-option", "-g", "default-size", "200x50")
        pane = self.tmux("display-message", "-p", "-t", "main:0.0", "#{pane_id}").strip()
        self.pane_env = dict(self.env, TMUX=f"{self.socket},{self.server_pid},0", TMUX_PANE=pane)

    def kill_server(self) -> None:
        """The server dies under the fleet (SIGKILL, as at an OOM kill or a reboot)."""
        if self.server_pid and alive(self.server_pid):
            os.kill(self.server_pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while alive(self.server_pid) and time.monotonic() < deadline:
                time.sleep(0.01)

    def ready(self, pane: str) -> bool:
        try:
            shown = self.tmux("capture-pane", "-p", "-t", pane)
        except RuntimeError:
            return False
        return any(row.startswith(">") for row in shown.splitlines())

    # -- cafleet -----------------------------------------------------------------------------
    def cafleet(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [*self.cafleet_argv, *args], capture_output=True, text=True, env=self.pane_env, timeout=120
        )
        if check and done.returncode != 0:
            raise SystemExit(f"cafleet {' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}")
        return done

    def build(self, count: int) -> None:
        created = json.loads(
            self.cafleet("fleet", "create", "--name", "restore", "--coding-agent", "standin", "--json").stdout
        )
        self.fleet_id, self.director = created["fleet_id"], created["director_member_id"]
        panes = []
        for i in range(count):
            member = self.cafleet(
                "member",
                "create",
                "--fleet-id",
                str(self.fleet_id),
                "--name",
                f"m{i}",
                "--description",
                "benchmark member",
                "--coding-agent",
                "standin",
                "--json",
                "Wait for tasks.",
            )
            panes.append(json.loads(member.stdout)["pane_id"])
        self.wait_ready(panes, time.monotonic())

    def wait_ready(self, panes: list[str], since: float) -> float:
        """Seconds from ``since`` (monotonic) until every pane shows the stand-in's input line."""
        pending = set(panes)
        deadline = time.monotonic() + READY_TIMEOUT
        while pending:
            pending = {pane for pane in pending if not self.ready(pane)}
            if not pending:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"the stand-ins in panes {sorted(pending)} did not draw their input line in time")
            time.sleep(0.02)
        return time.monotonic() - since

    def keeper_pids(self) -> list[int]:
        """The keeper the fleet's record names, and any other `cafleet fleet keep` process
        whose environment names this run's database."""
        pids = set()
        shown = self.cafleet("fleet", "show", str(self.fleet_id), "--json", check=False)
        if shown.returncode == 0:
            keeper = json.loads(shown.stdout).get("keeper") or {}
            if keeper.get("pid") and keeper.get("state") != "not running":
                pids.add(int(keeper["pid"]))
        pids.update(pid for pid in ours() if b"\0fleet\0keep\0" in cmdline(pid))
        return sorted(pids)

    def stop_keepers(self) -> None:
        for pid in self.keeper_pids():
            end(pid)


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


OURS_MARKER = b""


def ours() -> list[int]:
    """Live processes whose environment names this run's database (set in ``main``)."""
    if not OURS_MARKER:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if OURS_MARKER in environ and alive(int(entry)):
            found.append(int(entry))
    return found


def timed(argv: list[str], env: dict[str, str], cpu: list[float] | None = None) -> float:
    """Wall seconds of one run of ``argv``; its CPU seconds (user + system, from ``wait4``)
    are appended to ``cpu``."""
    with tempfile.TemporaryFile() as errors:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=errors, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            errors.seek(0)
            raise SystemExit(f"{' '.join(argv[-3:])} failed: {errors.read().decode().strip()}")
    if cpu is not None:
        cpu.append(usage.ru_utime + usage.ru_stime)
    return took


class Round:
    def __init__(self) -> None:
        self.wall = 0.0
        self.ready = 0.0
        self.idle: list[float] = []
        self.during: list[float] = []
        self.idle_control: list[float] = []
        self.during_control: list[float] = []
        self.idle_cpu: list[float] = []
        self.during_cpu: list[float] = []
        self.problems: list[str] = []


def restore_round(fleet: Fleet, count: int, loaded: bool, samples: int) -> Round:
    out = Round()
    fleet.stop_keepers()  # before its Director's pane goes (it would end by itself then)
    fleet.kill_server()
    deadline = time.monotonic() + 10  # the stand-ins end with their terminals (SIGHUP)
    while any(b"cafleet.agents.standin" in cmdline(pid) for pid in ours()):
        if time.monotonic() > deadline:
            raise SystemExit("stand-ins of the killed server are still running")
        time.sleep(0.02)
    fleet.start_server()
    director_command = [*fleet.cafleet_argv, "member", "list", str(fleet.fleet_id)]
    control = [sys.executable, "-c", "pass"]
    if loaded:
        for _ in range(samples):
            out.idle.append(timed(director_command, fleet.pane_env, out.idle_cpu))
            out.idle_control.append(timed(control, fleet.pane_env))
    finished: list[float] = []
    started = time.monotonic()
    proc = subprocess.Popen(
        [*fleet.cafleet_argv, "fleet", "restore", str(fleet.fleet_id), "--json"],
        env=fleet.pane_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    result: list[tuple[bytes, bytes]] = []

    def wait() -> None:
        result.append(proc.communicate(timeout=300))
        finished.append(time.monotonic())

    waiter = threading.Thread(target=wait)
    waiter.start()
    while loaded and not finished:
        out.during.append(timed(director_command, fleet.pane_env, out.during_cpu))
        if not finished:
            out.during_control.append(timed(control, fleet.pane_env))
    waiter.join()
    out.wall = finished[0] - started
    stdout, stderr = result[0]
    if proc.returncode != 0:
        out.problems.append(f"restore exited {proc.returncode}: {stderr.decode().strip()}")
    if not stdout.strip():
        raise SystemExit(f"restore printed nothing: {stderr.decode().strip()}")
    rows = json.loads(stdout)["members"]
    panes = []
    for row in rows:
        if row["member_id"] == fleet.director:
            continue
        if row["outcome"] == "restored":
            panes.append(row["pane_id"])
        else:
            out.problems.append(f"member {row['member_id']}: {row['outcome']} ({row['detail']})")
    if len(rows) != count + 1:
        out.problems.append(f"{len(rows)} outcomes for {count} members and the Director")
    out.ready = fleet.wait_ready(panes, started)
    return out


def median(values) -> float:
    """The median, NaN for no values (a restore that ended before one run did)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def median_ms(values: list[float]) -> float:
    return 1000 * median(values)


def main() -> None:
    global OURS_MARKER
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", default="1,4,16", help="fleet sizes, comma-separated")
    parser.add_argument("--rounds", type=int, default=5, help="clean rounds and loaded rounds per size (each)")
    parser.add_argument("--samples", type=int, default=10, help="idle runs of the Director's command per loaded round")
    args = parser.parse_args()
    sizes = [int(part) for part in args.members.split(",") if part.strip()]
    summary = []
    for count in sizes:
        work = tempfile.mkdtemp(prefix="cafleet-restore-bench-")
        fleet = Fleet(work)
        OURS_MARKER = f"CAFLEET_DATABASE_URL={fleet.db}".encode()
        try:
            fleet.start_server()
            built = time.monotonic()
            fleet.build(count)
            print(f"{count} members: fleet built in {time.monotonic() - built:.1f} s", flush=True)
            rounds = []
            for i in range(2 * args.rounds):
                loaded = i % 2 == 1
                one = restore_round(fleet, count, loaded, args.samples)
                rounds.append((loaded, one))
                line = f"  {'loaded' if loaded else 'clean '} round: restore {one.wall * 1000:.0f} ms, all ready {one.ready * 1000:.0f} ms"
                if loaded:
                    line += (
                        f", member list idle {median_ms(one.idle):.0f} ms ({len(one.idle)}),"
                        f" during {median_ms(one.during):.0f} ms ({len(one.during)});"
                        f" python -c pass idle {median_ms(one.idle_control):.0f} ms,"
                        f" during {median_ms(one.during_control):.0f} ms ({len(one.during_control)})"
                    )
                print(line, flush=True)
                for problem in one.problems:
                    print(f"    {problem}", flush=True)
            clean = [r for loaded, r in rounds if not loaded]
            heavy = [r for loaded, r in rounds if loaded]
            summary.append(
                {
                    "members": count,
                    "rounds": len(clean),
                    "wall": statistics.median(r.wall for r in clean),
                    "wall_loaded": statistics.median(r.wall for r in heavy),
                    "ready": statistics.median(r.ready for r in clean),
                    "idle": [v for r in heavy for v in r.idle],
                    "during": [v for r in heavy for v in r.during],
                    "idle_control": [v for r in heavy for v in r.idle_control],
                    "during_control": [v for r in heavy for v in r.during_control],
                    "idle_cpu": [v for r in heavy for v in r.idle_cpu],
                    "during_cpu": [v for r in heavy for v in r.during_cpu],
                    "problems": sum(len(r.problems) for _, r in rounds),
                }
            )
        finally:
            try:
                if fleet.fleet_id:
                    fleet.stop_keepers()
            finally:
                fleet.kill_server()
                subprocess.run(["tmux", "-L", fleet.name, "kill-server"], capture_output=True, env=fleet.env)
                for pid in ours():
                    end(pid)
                if fleet.socket:
                    with contextlib.suppress(OSError):
                        os.unlink(fleet.socket)
                shutil.rmtree(work, ignore_errors=True)
    report(summary)


def report(summary: list[dict]) -> None:
    one = next((row for row in summary if row["members"] == 1), None)
    print()
    print(
        "| members | clean rounds | restore wall (median) | per member | per member vs 1 member "
        "| all stand-ins ready (median) | `member list` idle / during (median, runs) | during / idle | `python -c pass` during / idle | problems |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in summary:
        per = row["wall"] / row["members"]
        versus = f"{per / one['wall']:.2f}×" if one else "—"
        idle, during = median(row["idle"]), median(row["during"])
        control = median(row["during_control"]) / median(row["idle_control"])
        print(
            f"| {row['members']} | {row['rounds']} | {row['wall'] * 1000:,.0f} ms | {per * 1000:,.0f} ms | {versus} "
            f"| {row['ready'] * 1000:,.0f} ms | {idle * 1000:.0f} ms ({len(row['idle'])}) / "
            f"{during * 1000:.0f} ms ({len(row['during'])}) | {during / idle:.2f}× | {control:.2f}× | {row['problems']} |"
        )
    if one:
        for row in summary:
            if row["members"] > 1:
                marginal = (row["wall"] - one["wall"]) / (row["members"] - 1)
                print(
                    f"\n{row['members']} members: each member beyond the first adds {marginal * 1000:.0f} ms (median walls)"
                )
    for row in summary:
        idle_cpu, during_cpu = median(row["idle_cpu"]), median(row["during_cpu"])
        print(
            f"{row['members']} members: member list CPU (user + system) idle {idle_cpu * 1000:.0f} ms,"
            f" during {during_cpu * 1000:.0f} ms ({during_cpu / idle_cpu:.2f}×)"
        )
    for row in summary:
        print(f"{row['members']} members: restore wall in loaded rounds {row['wall_loaded'] * 1000:,.0f} ms (median)")


if __name__ == "__main__":
    main()
