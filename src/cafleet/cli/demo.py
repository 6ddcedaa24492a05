"""`cafleet demo`: a whole fleet in a private tmux server, driven through the real CLI.

A Director and two stand-in members (the stand-in agent program shipped with cafleet)
exchange messages both ways: the Director sends each member a task, the preview wakes
the member's pane, the member polls, replies and ACKs; the Director waits for the replies
and ACKs them. The timeline is printed, then everything is torn down: the fleet is
deleted, the private tmux server killed, the temporary folder removed, also on Ctrl-C.
Nothing outside that temporary folder is touched.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from cafleet.errors import CafleetError

TYPE_CHECKING = False  # true for the type checker only
if TYPE_CHECKING:
    from cafleet.broker.records import AdminMessage
    from cafleet.cli.context import Context

TASKS = {
    "alice": "Count the open issues labelled 'bug' and report the number.",
    "bob": "Check that the release notes mention the new wait timeout.",
}
REPLY_TIMEOUT = 60.0


class _Demo:
    def __init__(self, ctx: Context, workdir: str) -> None:
        self.ctx = ctx
        self.workdir = workdir
        self.socket = os.path.join(workdir, "tmux.sock")
        self.db = os.path.join(workdir, "demo.db")
        base = {k: v for k, v in ctx.environ.items() if not k.startswith(("TMUX", "HERDR", "CAFLEET_"))}
        self.server_env = dict(base, CAFLEET_DATABASE_URL=self.db, CAFLEET_STANDIN_AUTO_REPLY="1")
        self.env = dict(self.server_env)
        self.fleet_id: int | None = None

    def say(self, text: str) -> None:
        self.ctx.out(text)

    def tmux(self, *args: str) -> str:
        done = subprocess.run(
            ["tmux", "-S", self.socket, *args], capture_output=True, text=True, env=self.server_env, timeout=10
        )
        if done.returncode != 0:
            raise CafleetError(f"tmux {args[0]} failed: {done.stderr.strip() or done.returncode}.")
        return done.stdout.strip()

    def cafleet(self, *args: str, show: bool = True) -> str:
        if show:
            self.say("$ cafleet " + " ".join(shlex.quote(a) for a in args))
        done = subprocess.run(
            [sys.executable, "-m", "cafleet", *args], capture_output=True, text=True, env=self.env, timeout=120
        )
        if show:
            for line in (done.stdout + done.stderr).splitlines():
                self.say("  " + line)
        if done.returncode not in (0, 3):
            raise CafleetError(f"`cafleet {' '.join(args[:2])}` failed: {done.stderr.strip()}")
        return done.stdout

    def run(self) -> None:
        self.say(f"cafleet demo: private tmux server {self.socket}, database {self.db}")
        director_pane = self._start_director_pane()
        fleet = json.loads(self.cafleet("fleet", "create", "--name", "demo", "--coding-agent", "standin", "--json"))
        fleet_id, director = fleet["fleet_id"], fleet["director_member_id"]
        self.fleet_id = fleet_id  # its keeper (started by `fleet create`) is ended at teardown
        self.say(f"  fleet {fleet_id}, Director member {director} in pane {director_pane}")
        member_ids = {name: self._create_member(fleet_id, name) for name in TASKS}
        self._wait_for_prompts(member_ids)
        self.cafleet("member", "list", str(fleet_id))
        for name, task in TASKS.items():
            self.cafleet(
                "message", "send", "--from-member-id", str(director), "--to-member-id", str(member_ids[name]), task
            )
        replies = self._collect_replies(director, len(TASKS))
        for record in replies:
            self.cafleet("message", "ack", str(record["message_id"]))
        self.say("")
        self.say("timeline (oldest first):")
        records = self._timeline(fleet_id, director, member_ids)
        tasks = [r for r in records if r["from_member_id"] == director]
        if not all(r["notified"] for r in tasks) or not all(r["status_state"] == "completed" for r in records):
            raise CafleetError("the exchange did not complete: see the timeline above.")
        self.say("")
        self._show_pane("alice", member_ids["alice"])
        self.say("")
        self.cafleet("fleet", "delete", str(fleet_id))

    def _start_director_pane(self) -> str:
        """The private server's first pane, where the Director's commands run; its id."""
        self.tmux(
            "new-session",
            "-d",
            "-s",
            "demo",
            "-x",
            "160",
            "-y",
            "48",
            "sh",
            "-c",
            "echo Director pane; exec sleep 86400",
        )
        director_pane = self.tmux("display-message", "-p", "-t", "demo", "#{pane_id}")
        self.env.update(TMUX=f"{self.socket},0,0", TMUX_PANE=director_pane, CAFLEET_MULTIPLEXER="tmux")
        return director_pane

    def _create_member(self, fleet_id: int, name: str) -> int:
        """A stand-in member named ``name``; its member id."""
        created = json.loads(
            self.cafleet(
                "member",
                "create",
                "--fleet-id",
                str(fleet_id),
                "--name",
                name,
                "--description",
                f"{name}, a stand-in agent",
                "--coding-agent",
                "standin",
                "--json",
                f"You are {name} (member {{member_id}}). Wait for tasks from the Director {{director_member_id}}.",
            )
        )
        self.say(f"  {name} is member {created['member_id']} in pane {created['pane_id']}")
        return created["member_id"]

    def _show_pane(self, name: str, member_id: int) -> None:
        self.say(f"{name}'s pane:")
        for line in self.cafleet("member", "capture", str(member_id), "--lines", "12", show=False).splitlines():
            self.say(("  | " + line).rstrip())

    def stop_keeper(self) -> None:
        """End the fleet's keeper if it still runs (`fleet delete` ends it by itself; an
        interrupted demo must not leave it behind)."""
        if self.fleet_id is None or not os.path.exists(self.db):
            return
        from cafleet import config
        from cafleet.delivery.supervision import keeper_control
        from cafleet.store.engines import open_store

        store = open_store(self.db)
        try:
            keeper_control.stop(store, config.Settings(self.env, self.db), self.fleet_id)
        finally:
            store.close()

    def _wait_for_prompts(self, member_ids: dict) -> None:
        """Wait until each stand-in has drawn its input line (it is ready for previews)."""
        deadline = time.monotonic() + 20
        for member_id in member_ids.values():
            while True:
                screen = self.cafleet("member", "capture", str(member_id), "--lines", "5", show=False)
                if any(line.startswith(">") for line in screen.splitlines()):
                    break
                if time.monotonic() > deadline:
                    raise CafleetError(f"member {member_id}'s stand-in agent did not start.")
                time.sleep(0.1)

    def _collect_replies(self, director: int, expected: int) -> list[dict]:
        deadline = time.monotonic() + REPLY_TIMEOUT
        seen: dict[int, dict] = {}
        while len(seen) < expected:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise CafleetError(f"only {len(seen)} of {expected} replies arrived within {REPLY_TIMEOUT:g} s.")
            out = self.cafleet("message", "wait", str(director), "--timeout", f"{remaining:.1f}", "--json", show=False)
            for record in json.loads(out or "[]"):
                if record["message_id"] not in seen:
                    seen[record["message_id"]] = record
                    self.say(f"  reply {record['message_id']} from member {record['from_member_id']}: {record['text']}")
            if len(seen) < expected:
                time.sleep(0.2)
        return sorted(seen.values(), key=lambda r: r["message_id"])

    def _timeline(self, fleet_id: int, director: int, member_ids: dict) -> list[AdminMessage]:
        from cafleet.broker.timeline import fleet_timeline
        from cafleet.store.engines import open_store

        names = {director: "Director", **{v: k for k, v in member_ids.items()}}
        store = open_store(self.db)
        try:
            records = fleet_timeline(store, fleet_id, limit=1000)
        finally:
            store.close()
        for record in reversed(records):
            woke = "preview typed" if record["notified"] else "no preview (the Director waits)"
            self.say(
                f"  #{record['message_id']} {names[record['from_member_id']]} -> {names[record['to_member_id']]}: "
                f"{record['status_state']}, {woke}: {record['text']}"
            )
        return records


SOCKET_PATH_MAX = 107  # bytes of a Unix socket's path (sun_path holds 108 with the closing NUL)


def _workdir() -> str:
    """A private folder for the demo's tmux socket and database: under TMPDIR, or under /tmp
    when TMPDIR is so deep that the socket's path would not fit a Unix socket address."""
    workdir = tempfile.mkdtemp(prefix="cafleet-demo-")
    if len(os.fsencode(os.path.join(workdir, "tmux.sock"))) <= SOCKET_PATH_MAX:
        return workdir
    os.rmdir(workdir)
    return tempfile.mkdtemp(prefix="cafleet-demo-", dir="/tmp")


def demo(ctx: Context, keep):
    if shutil.which("tmux", path=ctx.environ.get("PATH")) is None:
        raise CafleetError("tmux is not installed; install it (for example `apt-get install tmux`) and rerun.")
    workdir = _workdir()
    demo = _Demo(ctx, workdir)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        demo.run()
        ctx.out(
            "demo finished: messages went both ways, every task's preview woke its member, every message was ACKed."
        )
    except KeyboardInterrupt:
        ctx.err("demo interrupted; tearing down.")
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
        try:
            demo.stop_keeper()
        except (CafleetError, OSError) as error:
            ctx.err(f"Warning: the demo fleet's keeper could not be stopped ({error}).")
        if keep:
            ctx.out(f"kept: tmux -S {demo.socket} attach   (database {demo.db})")
        else:
            subprocess.run(["tmux", "-S", demo.socket, "kill-server"], capture_output=True, timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)


def _interrupt(_signum, _frame):
    raise KeyboardInterrupt
