"""Real multiplexers for tests: a private tmux server, and the herdr stand-in.

A pytest plugin (list it in ``pytest_plugins``) with two fixtures:

* ``tmux_server`` -- a tmux server of its own (``tmux -L cafleet-test-<uuid>``, no config
  file) with one detached 200x50 session ``main`` running ``sh``; killed at teardown.
* ``herdr_env`` -- the stand-in ``herdr`` (``tests/support/bin``) on PATH, backed by its own
  tmux server whose root pane ``w1:p1`` runs a shell; killed at teardown.

Both build on ``mux_environ``: the environment the servers (and so their panes) start with.
When the project's conftest provides the isolating ``env`` fixture it is used as is (so
panes see the test's database); otherwise this module isolates ``HOME``, ``XDG_*``,
``TMUX*``, ``HERDR*`` and ``CAFLEET_*`` itself. ``wait_for`` polls with a deadline.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest

from tests.support.environ import isolated_environ

WIDTH, HEIGHT = 200, 50
SUPPORT = Path(__file__).resolve().parent
HERDR_BIN_DIR = SUPPORT / "bin"
RECORDER = SUPPORT / "recorder.py"
TMUX_TIMEOUT = 10.0

T = TypeVar("T")


def split(mux, window_id: str, argv, *, cwd: str | None = None, env: dict[str, str] | None = None, **options) -> str:
    """A new pane's id, opened as cafleet opens one (``split_identified``; ``cwd`` and ``env``
    as a :class:`cafleet.mux.base.Program`'s, the other options as there)."""
    from cafleet.mux.base import Program

    return mux.split_identified(window_id, Program(argv, cwd, env), **options)[0]


def wait_for(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.02, what: str = "condition") -> T:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout`` s
    (a bound on a failure only: a check that holds returns at once, so the default is wide
    enough for a machine loaded by other work)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {value!r})")
        time.sleep(interval)


def _protect(arg: str) -> str:
    """tmux splits commands at an argument ending in ';' unless it ends in '\\;'."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def _tmux(selector: Sequence[str], args: Sequence[str], env: Mapping[str, str]) -> str:
    done = subprocess.run(
        ["tmux", "-f", "/dev/null", *selector, *(_protect(a) for a in args)],
        capture_output=True,
        env=dict(env),
        timeout=TMUX_TIMEOUT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tmux {' '.join(args[:1])} failed: {done.stderr.decode().strip()}")
    return done.stdout.decode("utf-8", "replace")


class TmuxServer:
    """A running private tmux server: ``socket`` is its socket path, ``name`` its -L name."""

    def __init__(self, name: str, socket: str, env: Mapping[str, str]) -> None:
        self.name = name
        self.socket = socket
        self.env = dict(env)
        self.pid = 0

    def run(self, *args: str) -> str:
        """Run one tmux command against this server; return its stdout."""
        return _tmux(["-S", self.socket], args, self.env)

    def new_pane(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> str:
        """Open a full-size pane (a new background window of ``main``) running ``argv``.

        ``argv`` runs exactly, without a shell (tmux would hand a lone argument to
        ``sh -c``, so that one is quoted); pass ``["sh", "-c", script]`` for a shell.
        """
        args = ["new-window", "-d", "-P", "-F", "#{pane_id}", "-t", "main:"]
        if cwd is not None:
            args += ["-c", cwd.replace("#", "##")]
        for key, value in (env or {}).items():
            args += ["-e", f"{key}={value}"]
        command = list(argv) if len(argv) > 1 else [f"exec {shlex.quote(argv[0])}"]
        return self.run(*args, "--", *command).strip()

    def main_pane(self) -> str:
        """The first pane of session ``main``."""
        return self.run("display-message", "-p", "-t", "main:0.0", "#{pane_id}").strip()

    def environ_for(self, pane_id: str) -> dict[str, str]:
        """The ``TMUX``/``TMUX_PANE`` variables a process in ``pane_id`` would see."""
        return {"TMUX": f"{self.socket},{self.pid},0", "TMUX_PANE": pane_id}

    def kill(self) -> None:
        """Stop the server, wait for it to exit and remove its socket (tmux leaves it)."""
        subprocess.run(
            ["tmux", "-L", self.name, "kill-server"],
            capture_output=True,
            env=self.env,
            timeout=TMUX_TIMEOUT,
        )
        _await_exit(self.pid)
        if self.socket:
            Path(self.socket).unlink(missing_ok=True)


def _await_exit(pid: int, timeout: float = TMUX_TIMEOUT) -> None:
    """Wait until process ``pid`` (a daemonised tmux server, not our child) has exited.

    A zombie counts as exited: reaping it is init's business, and can be slow.
    """
    deadline = time.monotonic() + timeout
    while pid and time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return
        except (FileNotFoundError, ProcessLookupError):
            return
        time.sleep(0.01)


@contextmanager
def running_tmux_server(
    environ: Mapping[str, str],
    *,
    width: int = WIDTH,
    height: int = HEIGHT,
    command: Sequence[str] = ("sh",),
    name: str | None = None,
) -> Iterator[TmuxServer]:
    """Start a private tmux server (session ``main``) and kill it on exit; ``name``: the
    socket of one that died (a reboot's server, numbering its sessions and panes anew)."""
    name = name or f"cafleet-test-{uuid.uuid4().hex[:12]}"
    selector = ["-L", name]
    size = ["-x", str(width), "-y", str(height)]
    _tmux(selector, ["new-session", "-d", "-s", "main", *size, "--", *command], environ)
    server = TmuxServer(name, "", environ)
    try:
        info = _tmux(selector, ["display-message", "-p", "#{pid}\t#{socket_path}"], environ)
        pid, server.socket = info.rstrip("\n").split("\t", 1)
        server.pid = int(pid)
        server.run("set-option", "-g", "default-size", f"{width}x{height}")
        yield server
    finally:
        server.kill()


class HerdrEnv:
    """A running herdr stand-in server and how to reach it.

    ``environ`` is what a process in the root pane ``w1:p1`` sees (``HERDR_*`` variables and
    a PATH with the stand-in); ``binary`` is the stand-in's absolute path.
    """

    workspace = "w1"
    tab = "w1:t1"
    root_pane = "w1:p1"

    def __init__(self, socket: str, env: Mapping[str, str]) -> None:
        self.socket = socket
        self.env = dict(env)
        self.binary = str(HERDR_BIN_DIR / "herdr")
        self.environ = {
            **self.env,
            "HERDR_ENV": "1",
            "HERDR_SOCKET_PATH": socket,
            "HERDR_WORKSPACE_ID": self.workspace,
            "HERDR_TAB_ID": self.tab,
            "HERDR_PANE_ID": self.root_pane,
        }

    def run(self, *args: str, environ: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Invoke the stand-in ``herdr`` (bytes in ``stdout``/``stderr``)."""
        return subprocess.run(
            [self.binary, *args],
            capture_output=True,
            env=dict(self.environ if environ is None else environ),
            timeout=TMUX_TIMEOUT,
        )

    def tmux(self, *args: str) -> str:
        """Run a tmux command against the backing server."""
        return _tmux(["-S", self.socket], args, self.env)

    def tmux_pane(self, pane_id: str) -> str:
        """The backing tmux pane of a herdr pane id."""
        with open(self.socket + ".standin.json", encoding="utf-8") as handle:
            return json.load(handle)["panes"][pane_id]["tmux"]

    def new_pane(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """Split a pane off the root pane running ``argv`` (through cafleet's Herdr)."""
        from cafleet.mux.herdr import Herdr

        herdr = Herdr(self.socket, timeout=TMUX_TIMEOUT, binary=self.binary)
        return split(herdr, self.tab, argv, cwd=cwd, env=env, target_pane=self.root_pane)

    def kill(self) -> None:
        try:
            pid = int(self.tmux("display-message", "-p", "#{pid}"))
        except RuntimeError:  # already stopped
            return
        subprocess.run(
            ["tmux", "-S", self.socket, "kill-server"],
            capture_output=True,
            env=self.env,
            timeout=TMUX_TIMEOUT,
        )
        _await_exit(pid)


@contextmanager
def running_herdr(environ: Mapping[str, str], width: int = WIDTH, height: int = HEIGHT) -> Iterator[HerdrEnv]:
    """Start a herdr stand-in server (its tabs ``width`` x ``height``) in a private
    directory and stop it on exit."""
    from tests.support import herdr_standin

    directory = tempfile.mkdtemp(prefix="cft-herdr-")  # short: socket paths are limited
    socket = os.path.join(directory, "herdr.sock")
    shell = ["bash", "--noprofile", "--norc"] if shutil.which("bash") else ["sh"]
    env = {
        **environ,
        "PATH": f"{HERDR_BIN_DIR}{os.pathsep}{environ.get('PATH', os.defpath)}",
        "HERDR_STANDIN_PYTHON": sys.executable,
        "HISTFILE": "/dev/null",
        "PS1": "$ ",
    }
    herdr = HerdrEnv(socket, env)
    try:
        herdr_standin.start_server(socket, shell=shell, env=env, width=width, height=height)
        yield herdr
    finally:
        herdr.kill()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def mux_environ(request, tmp_path, monkeypatch) -> dict[str, str]:
    """The isolated environment multiplexer servers start with (see the module docstring)."""
    try:
        provided = request.getfixturevalue("env")
    except pytest.FixtureLookupError:
        provided = None
    if isinstance(provided, dict):
        return dict(provided)
    environ = isolated_environ(tmp_path / "mux-home")
    for key in list(os.environ):
        if key not in environ:
            monkeypatch.delenv(key)
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    return environ


@pytest.fixture
def tmux_server(mux_environ) -> Iterator[TmuxServer]:
    with running_tmux_server(mux_environ) as server:
        yield server


@pytest.fixture
def herdr_env(mux_environ, monkeypatch) -> Iterator[HerdrEnv]:
    with running_herdr(mux_environ) as herdr:
        monkeypatch.setenv("PATH", herdr.env["PATH"])
        monkeypatch.setenv("HERDR_STANDIN_PYTHON", sys.executable)
        monkeypatch.setenv("HERDR_STANDIN_TMUX_SOCKET", herdr.socket)
        yield herdr
