"""A fleet whose Director sits in a real pane, driven through the real command line.

Used by the end-to-end delivery and member-lifecycle tests. The Director pane runs
``recorder.py``, so every byte anyone ever types into it is kept: the fixtures assert at
teardown that it received none (the Director is never woken by typing).

Members are started by ``cafleet member create --coding-agent standin``; the stand-in finds
``CAFLEET_STANDIN_RECORD_DIR`` in the server's environment and records what it receives
to ``<records>/member-<id>.jsonl``. ``FAKE_BIN`` holds a ``claude`` that records the argv
it was started with (``<records>/argv-<member id>.json``) and then becomes the stand-in
with claude's ``❯`` composer, so the spawn prompt can be checked as the agent received it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from tests.support.hooked import cafleet_argv
from tests.support.recorder import READY
from tests.support.tmux_fixtures import RECORDER, running_herdr, running_tmux_server, wait_for

SETTLE = "0.15"
FAKE_CLAUDE = """\
import json, os, sys
member = os.environ["CAFLEET_MEMBER_ID"]
record = os.path.join(os.environ["CAFLEET_STANDIN_RECORD_DIR"], f"argv-{member}.json")
with open(record + ".part", "w") as out:  # renamed whole: a test never reads it half written
    json.dump(sys.argv[1:], out)
os.replace(record + ".part", record)
os.execv(sys.executable, [sys.executable, "-m", "cafleet.agents.standin", "--member-id", member, "--prompt", "\u276f "])
"""


class CliResult:
    """One finished ``python -m cafleet`` process."""

    def __init__(self, code: int, out: bytes, err: bytes) -> None:
        self.code = code
        self.out = out.decode("utf-8")
        self.err = err.decode("utf-8")

    def json(self):
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out!r}, err={self.err!r})"


def cafleet(args: Sequence[str], environ: Mapping[str, str], *, input: bytes = b"", timeout: float = 60) -> CliResult:
    """Run the real command line in a subprocess with exactly ``environ``."""
    done = subprocess.run(
        [*cafleet_argv(environ), *args], input=input, capture_output=True, env=dict(environ), timeout=timeout
    )
    return CliResult(done.returncode, done.stdout, done.stderr)


def start(args: Sequence[str], environ: Mapping[str, str]) -> subprocess.Popen:
    """Start the real command line without waiting for it."""
    return subprocess.Popen(
        [*cafleet_argv(environ), *args], env=dict(environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def write_fake_claude(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "claude"
    script.write_text(f"#!{sys.executable}\n{FAKE_CLAUDE}", encoding="utf-8")
    script.chmod(0o755)


class PaneFleet:
    """A live fleet: ``environ`` is what a process in the Director's pane sees; ``server``
    is the multiplexer (a ``TmuxServer`` or a ``HerdrEnv``) and ``director_pane`` the
    Director's pane in it."""

    def __init__(self, environ: dict, server, director_pane: str, records: Path, director_bytes: Path) -> None:
        self.environ = environ
        self.server = server
        self.director_pane = director_pane
        self.records_dir = records
        self.director_bytes = director_bytes
        self.db = environ["CAFLEET_DATABASE_URL"]
        created = self.cafleet("fleet", "create", "--name", "e2e", "--coding-agent", "standin", "--json")
        assert created.code == 0, created
        self.fleet_id = created.json()["fleet_id"]
        self.director = created.json()["director_member_id"]

    def cafleet(
        self, *args: str, input: bytes = b"", environ: Mapping[str, str] | None = None, timeout: float = 60
    ) -> CliResult:
        return cafleet(args, self.environ if environ is None else environ, input=input, timeout=timeout)

    def send(self, from_id: int, to_id: int, body: str, *extra: str, environ=None) -> CliResult:
        """``message send --file -`` (any body, control characters included)."""
        return self.cafleet(
            "message",
            "send",
            "--from-member-id",
            str(from_id),
            "--to-member-id",
            str(to_id),
            "--file",
            "-",
            *extra,
            input=body.encode("utf-8"),
            environ=environ,
        )

    def create(self, name: str) -> dict:
        """``member create --coding-agent standin --json``, then wait for its input line."""
        record = self.placed(name)
        self.wait_ready(record["member_id"])
        return record

    def try_create(self, name: str, *flags: str, environ: Mapping[str, str] | None = None) -> CliResult:
        """``member create --coding-agent standin FLAGS --json``, as it ends (no wait)."""
        return self.cafleet(
            "member", "create", "--fleet-id", str(self.fleet_id), "--name", name, "--description", f"{name} stand-in",
            "--coding-agent", "standin", *flags, "--json", "Wait for tasks from {director_member_id}.", environ=environ,
        )  # fmt: skip

    def placed(self, name: str, *flags: str) -> dict:
        """:meth:`try_create`, which must succeed: its record (its input line not waited for)."""
        result = self.try_create(name, *flags)
        assert result.code == 0, result
        return result.json()

    def attach(self, name: str, *flags: str, coding_agent: str = "standin") -> dict:
        """A member whose pane the test opens itself (the stand-in started with ``flags``,
        a new window of the Director's session), registered through the broker as
        ``member create`` would register it, recorded as ``coding_agent`` (another agent's
        name: a pane that never draws that agent's input box): ``{"member_id", "pane_id"}``."""
        from cafleet.broker import members
        from cafleet.store.engines import open_store

        shown = self.cafleet("member", "show", str(self.director), "--json").json()["placement"]
        store = open_store(str(self.db))
        try:
            member_id = members.register_member(
                store,
                fleet_id=self.fleet_id,
                name=name,
                description=f"{name} stand-in",
                backend="tmux",
                session=shown["session"],
                window_id=shown["window_id"],
                coding_agent=coding_agent,
            )
            record = self.records_dir / f"member-{member_id}.jsonl"
            standin = [sys.executable, "-m", "cafleet.agents.standin", "--member-id", str(member_id)]
            pane_id = self.server.new_pane([*standin, "--record", str(record), *flags])
            members.set_pane_id(store, member_id, pane_id)
        finally:
            store.close()
        return {"member_id": member_id, "pane_id": pane_id}

    def input_row(self, pane_id: str) -> str:
        """The last row of a pane as tmux shows it (the stand-in's input line)."""
        rows = self.server.run("capture-pane", "-p", "-t", pane_id).rstrip("\n").splitlines()
        return rows[-1] if rows else ""

    def wait_ready(self, member_id: int, prompt: str = ">") -> None:
        def ready():
            shown = self.cafleet("member", "capture", str(member_id), "--lines", "3")
            return any(line.startswith(prompt) for line in shown.out.splitlines())

        wait_for(ready, timeout=15, interval=0.05, what=f"member {member_id}'s stand-in to draw its input line")

    # -- what arrived --------------------------------------------------------------------
    def records(self, member_id: int) -> list[dict]:
        path = self.records_dir / f"member-{member_id}.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    def submits(self, member_id: int) -> list[str]:
        return [r["text"] for r in self.records(member_id) if r["kind"] == "submit"]

    def query(self, sql: str, *params):
        """A read straight from the database (``notified_at`` is not public)."""
        if str(self.db).startswith(("postgresql://", "postgres://")):
            from cafleet.store.engines import open_store

            store = open_store(str(self.db))
            try:
                return store.execute(sql, params).fetchall()
            finally:
                store.close()
        conn = sqlite3.connect(self.db)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def notified_at(self, message_id: int) -> str | None:
        return self.query("SELECT notified_at FROM messages WHERE message_id = ?", message_id)[0][0]

    def member_count(self, status: str = "active") -> int:
        return self.query("SELECT COUNT(*) FROM members WHERE status = ?", status)[0][0]


def preview_line(record: dict) -> str:
    """The one line a preview is typed as, for a record whose body needs no sanitising."""
    body = record["text"].replace("\n", "\u23ce")
    return f"[cafleet msg {record['message_id']} from {record['from_member_id']} {record['created_at']}]\u23ce{body}"


def prepare_env(env: dict, tmp_path: Path, monkeypatch) -> Path:
    """Point stand-ins at a record folder and put the fake claude on PATH, before any
    multiplexer server starts (its panes inherit this environment)."""
    records = tmp_path / "records"
    records.mkdir()
    fake_bin = tmp_path / "fake-bin"
    write_fake_claude(fake_bin)
    env.update(
        CAFLEET_STANDIN_RECORD_DIR=str(records),
        CAFLEET_SUBMIT_SETTLE=SETTLE,
        PATH=f"{fake_bin}{os.pathsep}{env['PATH']}",
    )
    for key in ("CAFLEET_STANDIN_RECORD_DIR", "CAFLEET_SUBMIT_SETTLE", "PATH"):
        monkeypatch.setenv(key, env[key])
    return records


@contextmanager
def tmux_fleet(env: dict, tmp_path: Path, monkeypatch, size: tuple[int, int] | None = None) -> Iterator[PaneFleet]:
    """A private tmux server whose first pane (the Director's) runs the byte recorder;
    ``size``: its window's (width, height), else the fixtures' default."""
    records = prepare_env(env, tmp_path, monkeypatch)
    director_bytes = tmp_path / "director.bytes"
    command = (sys.executable, str(RECORDER), str(director_bytes))
    sized = {"width": size[0], "height": size[1]} if size else {}
    with running_tmux_server(env, command=command, **sized) as server:
        director = server.main_pane()
        wait_for(lambda: READY in server.run("capture-pane", "-p", "-t", director), what="the recorder")
        environ = dict(env, **server.environ_for(director))
        yield PaneFleet(environ, server, director, records, director_bytes)
        assert director_bytes.read_bytes() == b"", "something was typed into the Director's pane"


@contextmanager
def herdr_fleet(env: dict, tmp_path: Path, monkeypatch, size: tuple[int, int] | None = None) -> Iterator[PaneFleet]:
    """The herdr stand-in; the Director is its root pane ``w1:p1`` (a shell, so no byte
    recorder here); ``size``: its tabs' (width, height), else the fixtures' default."""
    records = prepare_env(env, tmp_path, monkeypatch)
    sized = {"width": size[0], "height": size[1]} if size else {}
    with running_herdr(env, **sized) as herdr:
        monkeypatch.setenv("PATH", herdr.env["PATH"])
        monkeypatch.setenv("HERDR_STANDIN_PYTHON", sys.executable)
        yield PaneFleet(dict(herdr.environ), herdr, herdr.root_pane, records, tmp_path / "unused")
