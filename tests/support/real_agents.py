"""The real coding agents (claude, opencode) as fleet members, offline.

Each agent runs in a private tmux server with a throw-away HOME, pointed at a scripted
model API on 127.0.0.1 (:mod:`tests.support.model_api`). The programs are the pinned ones
under ``$CAFLEET_AGENT_PREFIX/node_modules/.bin`` (scripts/test.sh installs them there);
:func:`agent_binary` finds them and tests skip when they are absent.

How a program is made to start straight into its composer, with no network:

* claude: ``$CLAUDE_CONFIG_DIR/.claude.json`` says onboarding is done (``hasCompletedOnboarding``,
  a ``theme``), approves the fake key (``customApiKeyResponses.approved`` holds its last 20
  characters) and trusts the working directory (``projects[<dir>].hasTrustDialogAccepted``).
  ``ANTHROPIC_BASE_URL`` points at the model API; ``CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC``
  (auto-updater, telemetry, error reports) and ``DISABLE_AUTOUPDATER`` keep it offline.
* opencode: ``$XDG_CONFIG_HOME/opencode/opencode.json`` gives the built-in ``anthropic``
  provider ``options.baseURL`` and a fake ``apiKey`` (no provider package is downloaded:
  the Anthropic SDK is built in), turns auto-update and sharing off and asks before any
  shell command other than the ones the cafleet agent preset allows;
  ``OPENCODE_DISABLE_AUTOUPDATE``, ``OPENCODE_DISABLE_MODELS_FETCH``,
  ``OPENCODE_DISABLE_LSP_DOWNLOAD`` and ``OPENCODE_DISABLE_DEFAULT_PLUGINS`` keep it offline.

A member is started by the real ``cafleet member create`` from the Director's pane, so it
runs with the argv cafleet builds (``claude --permission-mode dontAsk --allowedTools
'Bash(cafleet message *)' …``, ``opencode --agent cafleet …``). cafleet finds the program
on PATH; the PATH given to the tmux server and to the command line starts with a private
folder holding links to the pinned programs and leaves out every other folder holding a
program of the same name, and :meth:`RealFleet.start_member` checks that the pane's process
is the pinned executable. :meth:`RealFleet.start_plain` opens the same program by absolute
path without cafleet's flags (claude's default permission mode asks before a shell command:
that is how the permission dialog is drawn).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from cafleet.delivery.keystrokes import screen
from tests.support.hooked import cafleet_argv
from tests.support.model_api import ModelAPI
from tests.support.recorder import READY
from tests.support.tmux_fixtures import RECORDER, isolated_environ, running_tmux_server

SRC = Path(__file__).resolve().parents[2] / "src"
AGENTS = ("claude", "opencode")
PROGRAMS = ("claude", "codex", "opencode")
FAKE_KEY = "sk-ant-api03-cafleet-test-" + "0" * 60 + "FAKEKEYFORTESTSONLY1"
START_TIMEOUT = 60.0
# The settle delay each agent's members get (CAFLEET_SUBMIT_SETTLE). claude: cafleet's
# default. opencode draws typed text late on a loaded machine: with 0.3 s the text was not
# yet seen when the echo wait ran out in 10 of 10 sends (bench/real_agent_latency.py), 1 s
# was needed.
SETTLE = {"claude": "0.3", "opencode": "1.0"}

CLAUDE_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
}
OPENCODE_ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_TERMINAL_TITLE": "1",
    # 1.18 offers its question tool to the TUI only when asked to (its app and desktop
    # clients always have it); the config below allows it for every agent
    "OPENCODE_ENABLE_QUESTION_TOOL": "1",
}


def agent_prefix() -> Path | None:
    prefix = os.environ.get("CAFLEET_AGENT_PREFIX")
    return Path(prefix) if prefix else None


def agent_binary(agent: str) -> Path | None:
    """The pinned program's absolute path, or None when it is not installed."""
    prefix = agent_prefix()
    if prefix is None:
        return None
    path = prefix / "node_modules" / ".bin" / agent
    return path if os.access(path, os.X_OK) else None


def skip_reason(agent: str) -> str | None:
    if agent_prefix() is None:
        return (
            "CAFLEET_AGENT_PREFIX is not set; run scripts/test.sh (it installs the pinned agents "
            "into .cache/agents) or set it to an npm prefix holding them"
        )
    if agent_binary(agent) is None:
        return f"{agent} is not installed under {agent_prefix()}/node_modules/.bin; run scripts/test.sh"
    return None


def agent_version(agent: str) -> str:
    """``1.2.3`` from ``<agent> --version`` (its first number-like word)."""
    import re

    out = subprocess.run(
        [str(agent_binary(agent)), "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
        env={"PATH": os.defpath, "HOME": "/nonexistent"},
    ).stdout
    found = re.search(r"\d+\.\d+\.\d+", out)
    return found.group(0) if found else "unknown"


def _clean_path(pinned: Path, environ: Mapping[str, str]) -> str:
    """``pinned`` first, then the PATH folders that hold no program named like an agent."""
    kept = [str(pinned)]
    for folder in (environ.get("PATH") or os.defpath).split(os.pathsep):
        if folder and not any(os.path.exists(os.path.join(folder, name)) for name in PROGRAMS):
            kept.append(folder)
    return os.pathsep.join(kept)


def agent_environ(root: Path, api_url: str, workdir: Path, agent: str = "claude") -> dict[str, str]:
    """The environment of the tmux server, its panes and the command line: an isolated
    HOME under ``root``, the config files both agents need, and a PATH that only finds the
    pinned programs."""
    home = root / "home"
    environ = isolated_environ(home)
    for key in list(environ):
        if key.startswith(("CLAUDE_", "ANTHROPIC_", "OPENCODE_", "CODEX_", "OPENAI_")):
            del environ[key]
    pinned = root / "bin"
    pinned.mkdir(parents=True, exist_ok=True)
    for agent in PROGRAMS:
        binary = agent_binary(agent)
        link = pinned / agent
        if binary is not None and not link.exists():
            link.symlink_to(binary)
    wrapper = pinned / "cafleet"  # what a member's shell tool runs: this checkout's command line
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m cafleet "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    claude_dir = home / ".claude"
    environ.update(
        PATH=_clean_path(pinned, environ),
        TERM="xterm-256color",
        CAFLEET_DATABASE_URL=str(root / "db" / "cafleet.db"),
        CAFLEET_WAIT_INTERVAL="0.05",
        CAFLEET_SUBMIT_SETTLE=SETTLE.get(agent, "0.3"),
        CLAUDE_CONFIG_DIR=str(claude_dir),
        ANTHROPIC_BASE_URL=api_url,
        ANTHROPIC_API_KEY=FAKE_KEY,
        HISTFILE="/dev/null",
        PYTHONPATH=os.pathsep.join(p for p in (str(SRC), environ.get("PYTHONPATH")) if p),
        **CLAUDE_ENV,
        **OPENCODE_ENV,
    )
    environ.pop("NO_COLOR", None)
    _write_claude_config(claude_dir, workdir)
    _write_opencode_config(Path(environ["XDG_CONFIG_HOME"]) / "opencode", api_url)
    return environ


def _write_claude_config(claude_dir: Path, workdir: Path) -> None:
    claude_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "hasCompletedOnboarding": True,
        "theme": "dark",
        "autoUpdates": False,
        "customApiKeyResponses": {"approved": [FAKE_KEY[-20:]], "rejected": []},
        "projects": {
            str(workdir): {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True, "allowedTools": []}
        },
    }
    (claude_dir / ".claude.json").write_text(json.dumps(state, indent=2), encoding="utf-8")


def _write_opencode_config(config_dir: Path, api_url: str) -> None:
    config_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "autoupdate": False,
        "share": "disabled",
        "model": "anthropic/claude-sonnet-4-5",
        "small_model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": {"baseURL": api_url + "/v1", "apiKey": FAKE_KEY}}},
        "permission": {"bash": "ask", "question": "allow"},
    }
    (config_dir / "opencode.json").write_text(json.dumps(config, indent=2), encoding="utf-8")


def allow_every_command(environ: Mapping[str, str], agent: str) -> None:
    """Make ``agent`` run every shell command without asking, as a user who allowed them
    all would: claude's user settings allow its ``Bash`` tool (a member's ``dontAsk`` mode
    then refuses nothing); opencode's user config allows ``bash``. Before the member
    starts: both read their settings at start."""
    if agent == "claude":
        settings = Path(environ["CLAUDE_CONFIG_DIR"]) / "settings.json"
        settings.write_text(json.dumps({"permissions": {"allow": ["Bash"]}}), encoding="utf-8")
    elif agent == "opencode":
        path = Path(environ["XDG_CONFIG_HOME"]) / "opencode" / "opencode.json"
        config = json.loads(path.read_text(encoding="utf-8"))
        config["permission"]["bash"] = "allow"
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")
    else:
        raise ValueError(f"no settings written for {agent}")


class Result:
    def __init__(self, code: int, out: bytes, err: bytes) -> None:
        self.code, self.out, self.err = code, out.decode("utf-8"), err.decode("utf-8")

    def json(self):
        return json.loads(self.out)

    def __repr__(self) -> str:
        return f"Result(code={self.code}, out={self.out!r}, err={self.err!r})"


class RealFleet:
    """A fleet whose Director pane runs the byte recorder and whose members are real agents."""

    def __init__(
        self, root: Path, api: ModelAPI, server, environ: dict[str, str], workdir: Path, director_bytes: Path
    ) -> None:
        self.root = root
        self.api = api
        self.server = server
        self.env = environ
        self.workdir = workdir
        self.director_bytes = director_bytes
        self.director_pane = server.main_pane()
        self.environ = dict(environ, **server.environ_for(self.director_pane))  # the Director's view
        self.db = environ["CAFLEET_DATABASE_URL"]
        self.fleet_id = 0
        self.director = 0

    # -- the command line
    def cafleet(
        self, *args: str, input: bytes = b"", environ: Mapping[str, str] | None = None, timeout: float = 60
    ) -> Result:
        env = dict(self.environ if environ is None else environ)
        done = subprocess.run(
            [*cafleet_argv(env), *args],
            input=input,
            capture_output=True,
            env=env,
            cwd=self.workdir,
            timeout=timeout,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def start_cli(self, *args: str, input: bytes = b"") -> subprocess.Popen:
        proc = subprocess.Popen(
            [*cafleet_argv(self.environ), *args],
            env=dict(self.environ),
            cwd=self.workdir,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        return proc

    def send(self, to_id: int, body: str, *extra: str) -> Result:
        return self.cafleet(
            "message",
            "send",
            "--from-member-id",
            str(self.director),
            "--to-member-id",
            str(to_id),
            "--file",
            "-",
            *extra,
            input=body.encode("utf-8"),
        )

    def create_fleet(self, agent: str) -> None:
        setup = self.cafleet("setup", "--coding-agent", agent)
        assert setup.code == 0, setup
        created = self.cafleet("fleet", "create", "--name", "real", "--coding-agent", agent, "--json")
        assert created.code == 0, created
        self.fleet_id = created.json()["fleet_id"]
        self.director = created.json()["director_member_id"]

    # -- members
    def create_member(self, agent: str, name: str, prompt: str = "Wait for messages.", *, ready: bool = True) -> dict:
        """``cafleet member create`` with the agent's real argv; returns its JSON record
        (``member_id``, ``pane_id``). With ``ready``, waits until the agent has answered its
        spawn prompt (a turn reached the model API) and shows an empty composer again."""
        turns = len(self.api.turns())
        created = self.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(self.fleet_id),
            "--name",
            name,
            "--description",
            f"{name}, a real {agent}",
            "--coding-agent",
            agent,
            "--json",
            prompt,
        )
        assert created.code == 0, created
        record = created.json()
        self.check_pinned(record["pane_id"], agent)
        if ready:
            self.api.wait(lambda _: len(self.api.turns()) > turns, START_TIMEOUT)
            self.wait_screen(
                record["pane_id"],
                lambda s: len(self.api.turns()) > turns and composer_empty(agent, s),
                START_TIMEOUT,
                f"{agent} to answer its spawn prompt",
            )
        return record

    def start_plain(self, agent: str, name: str) -> dict:
        """The pinned program by absolute path, no cafleet flags, registered as a member."""
        from cafleet.broker import members
        from cafleet.store.engines import open_store

        shown = self.cafleet("member", "show", str(self.director), "--json").json()["placement"]
        store = open_store(self.db)
        try:
            member_id = members.register_member(
                store,
                fleet_id=self.fleet_id,
                name=name,
                description=f"{name}, a plain {agent}",
                backend="tmux",
                session=shown["session"],
                window_id=shown["window_id"],
                coding_agent=agent,
            )
            env = {
                "CAFLEET_DATABASE_URL": self.db,
                "CAFLEET_MEMBER_ID": str(member_id),
                "CAFLEET_FLEET_ID": str(self.fleet_id),
            }
            pane_id = self.server.new_pane([str(agent_binary(agent))], cwd=str(self.workdir), env=env)
            members.set_pane_id(store, member_id, pane_id)
        finally:
            store.close()
        return {"member_id": member_id, "pane_id": pane_id}

    def check_pinned(self, pane_id: str, agent: str) -> None:
        pid = int(self.server.run("display-message", "-p", "-t", pane_id, "#{pane_pid}").strip())
        exe = os.path.realpath(f"/proc/{pid}/exe")
        assert exe == os.path.realpath(agent_binary(agent)), f"pane {pane_id} runs {exe}, not the pinned {agent}"

    def stop_panes(self) -> None:
        """SIGKILL every process the panes run (an agent may outlive its tmux server)."""
        import signal

        try:
            listed = self.server.run("list-panes", "-a", "-F", "#{pane_pid}")
        except RuntimeError:
            return
        for pid in listed.split():
            with suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(pid), signal.SIGKILL)

    # -- the screen
    def capture(self, pane_id: str) -> str:
        return self.server.run("capture-pane", "-p", "-t", pane_id)

    def wait_screen(self, pane_id: str, check, timeout: float = START_TIMEOUT, what: str = "screen") -> str:
        """Capture until ``check(screen)`` holds; fail with the last screen otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            shown = self.capture(pane_id)
            if check(shown):
                return shown
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; the screen:\n{shown}")
            time.sleep(0.05)

    def wait_state(self, pane_id: str, agent: str, state: str, timeout: float = START_TIMEOUT) -> str:
        return self.wait_screen(
            pane_id, lambda s: screen.classify(agent, s) == state, timeout, f"{agent} in pane {pane_id} to look {state}"
        )

    def wait_composer(self, pane_id: str, agent: str, timeout: float = START_TIMEOUT) -> str:
        """Wait until the agent is idle with an empty composer (its startup is over)."""
        return self.wait_screen(
            pane_id, lambda s: composer_empty(agent, s), timeout, f"{agent}'s empty composer in pane {pane_id}"
        )

    def type_keys(self, pane_id: str, text: str) -> None:
        self.server.run("send-keys", "-t", pane_id, "-l", text)

    def press(self, pane_id: str, *keys: str) -> None:
        self.server.run("send-keys", "-t", pane_id, *keys)

    # -- the database
    def query(self, sql: str, *params):
        conn = sqlite3.connect(self.db)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def notified_at(self, message_id: int) -> str | None:
        return self.query("SELECT notified_at FROM messages WHERE message_id = ?", message_id)[0][0]

    def status(self, message_id: int) -> str:
        """``input_required`` until the recipient ACKs it, then ``completed``."""
        return self.query("SELECT status_state FROM messages WHERE message_id = ?", message_id)[0][0]


PLACEHOLDERS = {
    # 2.1.197 draws an empty "❯ " row when idle; while a submitted line waits in the queue
    # the empty composer reads "❯ Press up to edit queued messages"
    "claude": ("Press up to edit queued messages",),
    # the start page's empty box: 'Ask anything… "Fix a TODO in the codebase"'
    "opencode": ("Ask anything…",),
}


def composer_empty(agent: str, shown: str) -> bool:
    """Idle, and the input box holds no text (a placeholder counts as empty)."""
    if screen.classify(agent, shown) != screen.PaneState.IDLE:
        return False
    return not composer_text(agent, shown)


def composer_text(agent: str, shown: str) -> str:
    """What the input box holds: the placeholder, the box's own glyphs and opencode's
    agent · model row left out, and each row cut at the box's right edge (at 200 columns
    opencode draws its session sidebar on the same rows, right of the box)."""
    box = screen.input_box(agent, shown) or []
    lines = screen.screen_lines(shown)
    edge = None
    if agent == "opencode":
        for line in lines:
            found = re.match(r"^(\s*╹▀+)", line)
            if found:
                edge = len(found.group(1))
    rows = []
    for row in box:
        piece = re.sub(r"^\s*[│┃❯>›]?", "", row[:edge] if edge else row)
        piece = re.split(r"\s{3,}", piece)[0].strip()  # opencode's sidebar, far to the right
        if agent == "opencode" and "·" in piece and piece.split("·")[0].strip().istitle():
            continue  # "Build · Claude Sonnet 4.5 (latest) Anthropic", the foot of the box
        if piece.startswith(PLACEHOLDERS.get(agent, ())):
            continue
        if any(re.search(hint, piece) for hint in screen.CUES[agent].empty):
            continue  # a hint cafleet itself reads as an empty box (codex's suggestions)
        if piece:
            rows.append(piece)
    return " ".join(rows)


def preview_count(api: ModelAPI, marker: str) -> int:
    """How many times the last conversation turn's user side carries ``marker`` (each
    turn resends the whole conversation, so the last one holds every message received)."""
    from tests.support.model_api_anthropic import user_texts

    turns = api.turns()
    if not turns:
        return 0
    return sum(text.count(marker) for text in user_texts(turns[-1].body))


def received_count(api: ModelAPI, marker: str) -> int:
    """The most times any one turn carried ``marker`` (conversations may fork or restart)."""
    from tests.support.model_api_anthropic import user_texts

    return max((sum(t.count(marker) for t in user_texts(r.body)) for r in api.turns()), default=0)


@contextmanager
def real_fleet(agent: str, root: Path, extra: Mapping[str, str] | None = None) -> Iterator[RealFleet]:
    """A model API, a private tmux server whose first pane is the Director's (the byte
    recorder), and a fleet of ``agent`` created there; everything stopped on exit.
    ``extra`` is added to the environment of the server and the command line (for example
    ``CAFLEET_KEEPER=on``: then ``fleet create`` starts the fleet's keeper)."""
    workdir = root / "home" / "work"  # shown as ~/work: the same text in every capture
    workdir.mkdir(parents=True, exist_ok=True)
    with ModelAPI() as api:
        environ = agent_environ(root, api.url, workdir, agent)
        environ.update(extra or {})
        director_bytes = root / "director.bytes"
        command = (sys.executable, str(RECORDER), str(director_bytes))
        with running_tmux_server(environ, command=command) as server:
            fleet = RealFleet(root, api, server, environ, workdir, director_bytes)
            deadline = time.monotonic() + 15
            while READY not in fleet.capture(fleet.director_pane):
                assert time.monotonic() < deadline, "the Director's recorder did not start"
                time.sleep(0.02)
            try:
                fleet.create_fleet(agent)
                yield fleet
                assert director_bytes.read_bytes() == b"", "something was typed into the Director's pane"
            finally:
                fleet.stop_panes()


def write_fixture(agent: str, version: str, state: str, text: str, base: Path, suffix: str = "txt") -> Path:
    """Save a capture as ``<base>/<agent>-<version>/<state>.<suffix>`` (trailing blanks trimmed)."""
    folder = base / f"{agent}-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [row.rstrip() for row in text.rstrip("\n").splitlines()]
    while rows and not rows[-1]:
        rows.pop()
    path = folder / f"{state}.{suffix}"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def plain_argv(agent: str) -> Sequence[str]:
    return [str(agent_binary(agent))]
