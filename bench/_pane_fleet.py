"""A throw-away fleet for the benchmarks: a private tmux server, an isolated environment,
a database and a stand-in record folder, all inside one work folder.

    fleet = PaneFleet(workdir, name="load", env_extra={...})
    director, member = fleet.setup()    # Director pane + fleet + one stand-in member, ready
    ...
    fleet.kill()                        # only this private tmux server
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

ISOLATED_PREFIXES = ("CAFLEET_", "TMUX", "HERDR", "XDG_")
READY_TIMEOUT = 20.0


def cafleet_argv() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m cafleet``."""
    script = os.path.join(os.path.dirname(sys.executable), "cafleet")
    return [script] if os.path.exists(script) else [sys.executable, "-m", "cafleet"]


class PaneFleet:
    def __init__(self, workdir: str, name: str, env_extra: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.name = name
        self.socket = os.path.join(workdir, "tmux.sock")
        self.records = os.path.join(workdir, "records")
        home = os.path.join(workdir, "home")
        os.mkdir(self.records)
        os.mkdir(home)
        base = {k: v for k, v in os.environ.items() if not k.startswith(ISOLATED_PREFIXES)}
        self.env = dict(
            base,
            HOME=home,
            XDG_DATA_HOME=os.path.join(home, "data"),
            XDG_CONFIG_HOME=os.path.join(home, "config"),
            CAFLEET_DATABASE_URL=os.path.join(workdir, f"{name}.db"),
            CAFLEET_STANDIN_RECORD_DIR=self.records,
            CAFLEET_KEEPER="off",  # each benchmark measures its own commands; bench/keeper.py measures the keeper
            **(env_extra or {}),
        )
        self.cafleet = cafleet_argv()

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

    def run(self, *args: str) -> str:
        done = subprocess.run([*self.cafleet, *args], capture_output=True, text=True, env=self.env, timeout=60)
        if done.returncode != 0:
            raise SystemExit(f"cafleet {' '.join(args[:2])} failed: {done.stderr.strip()}")
        return done.stdout

    def setup(self) -> tuple[int, int]:
        """A Director pane, its fleet, one stand-in member ready at its input line."""
        self.tmux("new-session", "-d", "-s", self.name, "-x", "200", "-y", "50", "sleep", "86400")
        director_pane = self.tmux("display-message", "-p", "-t", self.name, "#{pane_id}")
        self.env.update(TMUX=f"{self.socket},0,0", TMUX_PANE=director_pane)
        fleet = json.loads(self.run("fleet", "create", "--name", self.name, "--coding-agent", "standin", "--json"))
        member = json.loads(
            self.run(
                "member",
                "create",
                "--fleet-id",
                str(fleet["fleet_id"]),
                "--name",
                "target",
                "--description",
                "benchmark target",
                "--coding-agent",
                "standin",
                "--json",
                "Benchmark target.",
            )
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while not self.tmux("capture-pane", "-p", "-t", member["pane_id"]).rstrip().endswith(">"):
            if time.monotonic() > deadline:
                raise SystemExit("the stand-in agent did not draw its input line in time")
            time.sleep(0.05)
        return fleet["director_member_id"], member["member_id"]

    def kill(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True, timeout=10)
