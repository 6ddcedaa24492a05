"""The herdr backend: drives herdr's ``herdr pane ...`` command line.

What this module relies on, from herdr's CLI reference and its source:

* Success: exit 0. ``pane current|get|list|split|close|process-info`` print one compact JSON
  envelope ``{"id": ..., "result": {"type": ..., ...}}`` on stdout; the pane is at
  ``result.pane`` (``PaneInfo``: ``pane_id``, ``terminal_id``, ``workspace_id``, ``tab_id``,
  ``focused``, ...), a list at ``result.panes``. ``pane send-text|send-keys|run`` print
  nothing. ``pane read`` prints the pane's text itself, not JSON.
* Server-side failure: exit 1 and ``{"id": ..., "error": {"code": ..., "message": ...}}``
  on stderr; a missing pane is code ``pane_not_found``. Usage errors: exit 2, plain text.
* ``pane split`` cannot run a command: it opens a shell pane (``--cwd`` applies to that
  shell) and ``pane run`` types a command line plus Enter into it; the member's variables
  go on that command line as ``env K=V ...``, which every herdr version honours. The argv is
  therefore quoted for a POSIX shell (``shlex``) and prefixed with ``exec`` so the program
  replaces the shell and the pane ends with it; a leading space keeps it out of the
  history of shells that ignore space-prefixed lines. A fish user's shell would read
  ``\\\\`` inside single quotes as one backslash; nothing else in a quoted word differs.
* ``HERDR_PANE_ID`` and ``HERDR_SOCKET_PATH`` are set in every herdr pane; the CLI honours
  ``HERDR_SOCKET_PATH`` to select the server.
* Sizes: ``pane get|list`` report none, but ``pane layout --pane ID`` (herdr 0.6.9 and
  later) prints the pane's tab as ``result.layout`` (``PaneLayoutSnapshot``: ``tab_id``,
  ``area`` and ``panes`` of ``{pane_id, focused, rect: {x, y, width, height}}``, in cells).
  A rectangle includes the pane's frame: with herdr's default ``pane_borders`` a pane of a
  tab of several panes draws a one-cell border inside it. A split halves the pane's
  rectangle (``pane split`` without ``--ratio``: 0.5, the first half rounded).
* Tabs: ``tab list [--workspace ID]`` prints ``result.tabs`` (``TabInfo``: ``tab_id``,
  ``workspace_id``, ``number``, ``label``, ``focused``, ``pane_count``, ...; ``label`` is
  the one given, else the tab's position); ``tab create --workspace ID --label TEXT
  --no-focus [--cwd PATH]`` prints ``result.tab`` and ``result.root_pane`` (a shell). A
  tab closes with its last pane. herdr offers no tab option or other mark of our own.

Choices where herdr's documentation is silent or that are ours:

* ``session`` is ``<workspace_id>@<socket_path>`` (just ``<workspace_id>`` when the socket
  is unknown), so that a process outside the pane (WebUI, tests) reaches the same server;
  ``window_id`` is herdr's ``tab_id``.
* New panes split ``down`` (like tmux's default ``split-window``), or ``right`` when asked
  (``beside``), with ``--no-focus``. A new tab's root pane runs the member like a split.
* :meth:`Herdr.capture` reads ``--source visible`` (passive: ``recent`` reads may scroll a
  full-screen agent's viewport) and keeps the last ``lines`` non-trailing-blank lines.
* :meth:`Herdr.current_pane` insists on ``HERDR_PANE_ID``: without it herdr would answer
  with the *focused* pane, which need not be the caller's.
* A pane's identity is its shell process: ``<shell_pid>:<start time>`` from
  ``pane process-info`` and ``/proc/<pid>/stat`` (just ``<shell_pid>`` where there is no
  ``/proc``). The member's agent replaces that shell (``exec``), keeping both, and a herdr
  restarted on the same socket gives its pane of the same id another process. A pane with
  no process has no identity and never matches. The check is one ``process-info`` call
  (free in :meth:`Herdr.inspect`, which makes that call anyway).
"""

from __future__ import annotations

from cafleet.errors import MuxError, PaneGone, PaneStale
from cafleet.mux import (
    check_argv,
    check_cwd,
    damaged,
    first_line,
    is_number,
    is_socket_path,
    stale,
    tail_lines,
    text_chunks,
)

TYPE_CHECKING = False  # true for the type checker only: typing costs milliseconds on every command
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from cafleet.mux.base import PaneContext, Program

_SPLIT_DIRECTION = "down"
# Error codes meaning the pane no longer exists: closed, or its whole server has stopped.
_GONE_CODES = ("pane_not_found", "server_not_running")


def check_id(what: str, value: str) -> str:
    """A stored herdr id (``w1``, ``w1:t2``, ``w4:p11``): ASCII letters and digits with
    ``:``, ``_``, ``.``, ``-`` after the first, at most 64; never an option to herdr."""
    if not (
        0 < len(value) <= 64
        and value.isascii()
        and value[0].isalnum()
        and all(c.isalnum() or c in ":_.-" for c in value)
    ):
        raise damaged(
            f"herdr {what} id", value, f"a herdr {what} id (like w1:p1)", pane=value if what == "pane" else None
        )
    return value


def check_identity(identity: str | None) -> str | None:
    """A stored herdr pane identity: ``<shell pid>[:<start time>]``, or None."""
    if identity is not None and not (identity.count(":") <= 1 and all(map(is_number, identity.split(":")))):
        raise damaged("herdr pane identity", identity, "<shell pid>:<start time>")
    return identity


def _process_identity(info: dict[str, Any]) -> str:
    """``<shell_pid>:<start time>`` of a ``process-info`` result ("" when there is no process)."""
    pid = info.get("shell_pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return ""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            started = handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return str(pid)
    return f"{pid}:{started}"


def _command_line(argv: Sequence[str], env: dict[str, str] | None) -> str:
    """What ``pane run`` types into a new shell pane: `` exec env K=V argv...``. The
    variables travel on the command line, not as a split option, so they reach the
    program whatever options a herdr version accepts."""
    import shlex

    check_argv(argv)
    assignments = []
    for key, value in (env or {}).items():
        if not key or "=" in key:
            raise MuxError(f"{key!r} is not a valid environment variable name.")
        assignments.append(f"{key}={value}")
    return " exec " + shlex.join(["env", *assignments, *argv] if assignments else list(argv))


def _error_of(stderr: str) -> tuple[str, str]:
    """(code, message) from herdr's JSON error envelope, or ("", first line) otherwise."""
    import json

    for line in stderr.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            error = json.loads(line).get("error")
        except (ValueError, AttributeError):
            continue
        if isinstance(error, dict):
            return str(error.get("code", "")), str(error.get("message", ""))[:200]
    return "", first_line(stderr)


class _Failure(Exception):
    """A herdr call that exited non-zero; turned into a MuxError by the caller."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Herdr:
    """A herdr server reached through ``HERDR_SOCKET_PATH`` (herdr's default when None)."""

    name = "herdr"

    def __init__(
        self,
        socket: str | None = None,
        timeout: float = 5.0,
        *,
        pane: str | None = None,
        workspace: str | None = None,
        binary: str | None = None,
    ) -> None:
        self.socket = socket
        self.timeout = timeout
        self.pane = pane
        self.workspace = workspace
        self.binary = binary or "herdr"  # CAFLEET_HERDR_BIN, passed by the caller
        self.expected: dict[str, str | None] = {}  # pane id -> identity it must still have

    @classmethod
    def from_env(cls, environ: Mapping[str, str], timeout: float = 5.0) -> Herdr:
        """The server and pane this process runs in."""
        return cls(
            environ.get("HERDR_SOCKET_PATH") or None,
            timeout,
            pane=environ.get("HERDR_PANE_ID") or None,
            workspace=environ.get("HERDR_WORKSPACE_ID") or None,
            binary=environ.get("CAFLEET_HERDR_BIN") or "herdr",
        )

    @classmethod
    def from_session(cls, session: str, timeout: float = 5.0, binary: str | None = None) -> Herdr:
        """Reach the server named by a stored ``<workspace_id>[@<socket_path>]`` string."""
        workspace, _, socket = session.partition("@")
        check_id("workspace", workspace)
        if socket and not is_socket_path(socket):
            raise damaged("herdr session", session, "<workspace id>@<absolute socket path>")
        return cls(socket or None, timeout, workspace=workspace, binary=binary)

    # -- subprocess plumbing -------------------------------------------------------------

    def _call(self, args: Sequence[str]) -> str:
        """Run ``herdr <args>``; return stdout, raise _Failure on a non-zero exit."""
        import subprocess

        env = None
        if self.socket:
            from cafleet.config import child_environ

            env = child_environ(HERDR_SOCKET_PATH=self.socket)
        try:
            done = subprocess.run(
                [self.binary, *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                env=env,
            )
        except FileNotFoundError:
            raise MuxError(
                f"{self.binary} is not installed or not on PATH; install herdr or set CAFLEET_HERDR_BIN."
            ) from None
        except subprocess.TimeoutExpired:
            raise MuxError(
                f"herdr {' '.join(args[:2])} did not answer within {self.timeout:g} s; "
                "check that the herdr server is responsive."
            ) from None
        except (ValueError, OSError) as error:  # NUL in an argument, unusable binary
            raise MuxError(f"herdr {' '.join(args[:2])} could not be run: {error}.") from None
        if done.returncode != 0:
            code, message = _error_of(done.stderr.decode("utf-8", "replace"))
            raise _Failure(code, message or f"exit status {done.returncode}")
        return done.stdout.decode("utf-8", "replace")

    def _result(self, args: Sequence[str]) -> dict[str, Any]:
        """Run a JSON-printing command and return its ``result`` object."""
        import json

        out = self._call(args)
        try:
            result = json.loads(out)["result"]
        except (ValueError, KeyError, TypeError):
            raise MuxError(f"herdr {' '.join(args[:2])} printed no JSON result (got {out.strip()[:60]!r}).") from None
        if not isinstance(result, dict):
            raise MuxError(f"herdr {' '.join(args[:2])} printed a malformed result.")
        return result

    @staticmethod
    def _failed(args: Sequence[str], failure: _Failure, pane_id: str | None = None) -> MuxError:
        reason = f"{failure.message} ({failure.code})" if failure.code else failure.message
        if pane_id is not None and failure.code in _GONE_CODES:
            return PaneGone(f"herdr pane {pane_id} is gone ({reason}).", pane=pane_id)
        return MuxError(f"herdr {' '.join(args[:2])} failed: {reason}.")

    def _on_pane(self, pane_id: str, args: Sequence[str], *, json_result: bool = False) -> Any:
        try:
            return self._result(args) if json_result else self._call(args)
        except _Failure as failure:
            raise self._failed(args, failure, pane_id) from None

    def _pane_in_tab(self, tab_id: str) -> str:
        """A pane of ``tab_id`` to split: its focused pane, else its first one."""
        args = ["pane", "list"] + (["--workspace", self.workspace] if self.workspace else [])
        try:
            panes = self._result(args).get("panes") or []
        except _Failure as failure:
            raise self._failed(args, failure) from None
        in_tab = [p for p in panes if isinstance(p, dict) and p.get("tab_id") == tab_id]
        if not in_tab:
            raise MuxError(f"herdr tab {tab_id} has no pane to split; it may have been closed.")
        return str(next((p for p in in_tab if p.get("focused")), in_tab[0])["pane_id"])

    # -- the Multiplexer protocol --------------------------------------------------------

    def current_pane(self) -> PaneContext:
        from cafleet.mux.base import PaneContext

        if not self.pane:
            raise MuxError("HERDR_PANE_ID is not set, so the calling herdr pane is unknown; run inside a herdr pane.")
        args = ["pane", "current", "--pane", self.pane]
        pane = self._on_pane(self.pane, args, json_result=True).get("pane") or {}
        try:
            workspace, tab, pane_id = pane["workspace_id"], pane["tab_id"], pane["pane_id"]
        except (KeyError, TypeError):
            raise MuxError("herdr pane current printed a pane without its ids.") from None
        return PaneContext(
            backend="herdr",
            session=f"{workspace}@{self.socket}" if self.socket else str(workspace),
            window_id=str(tab),
            pane_id=str(pane_id),
            identity=self.identity(str(pane_id)) or None,
        )

    def expect(self, pane_id: str, identity: str | None, recorded_at: float | None = None) -> None:  # noqa: ARG002 -- the protocol's signature; herdr tells nothing of a server's age
        self.expected[check_id("pane", pane_id)] = check_identity(identity)

    def identity(self, pane_id: str) -> str:
        return _process_identity(self._process_info(pane_id))

    def _check(self, pane_id: str, identity: str) -> None:
        want = self.expected.get(pane_id)
        if want and identity != want:
            why = (
                "its process has ended"
                if not identity
                else "its herdr server was restarted or the pane's process was replaced"
            )
            raise stale("herdr", pane_id, why)

    def _verify(self, pane_id: str) -> None:
        """One ``process-info`` call checking the expected identity, before input or a kill."""
        if self.expected.get(pane_id):
            self._check(pane_id, self.identity(pane_id))

    def split_identified(
        self, window_id: str, program: Program, *, target_pane: str | None = None, beside: bool = False
    ) -> tuple[str, str | None]:
        """``beside``: the new pane to the right of ``target_pane``, else below it."""
        command = _command_line(program.argv, program.env)
        check_cwd(program.cwd)
        check_id("tab", window_id)
        target = check_id("pane", target_pane) if target_pane else self._pane_in_tab(window_id)
        args = ["pane", "split", "--pane", target, "--direction", "right" if beside else _SPLIT_DIRECTION]
        args.append("--no-focus")
        if program.cwd is not None:
            args += ["--cwd", program.cwd]
        pane = self._on_pane(target, args, json_result=True).get("pane") or {}
        new_pane = pane.get("pane_id") if isinstance(pane, dict) else None
        if not new_pane:
            raise MuxError("herdr pane split did not report the new pane id.")
        return str(new_pane), self._start(str(new_pane), command)

    def _start(self, pane_id: str, command: str) -> str | None:
        """Run ``command`` (:func:`_command_line`) in the new shell pane ``pane_id``; its
        identity (the shell's, which the program exec'd there keeps). The pane is closed
        when that fails: no idle shell pane is left behind."""
        try:
            identity = self.identity(pane_id)
            self._on_pane(pane_id, ["pane", "run", pane_id, command])
        except MuxError:
            try:  # noqa: SIM105 - contextlib stays off the hot commands' path
                self.kill(pane_id)
            except MuxError:
                pass
            raise
        return identity or None

    # -- placement: tabs and their panes' sizes ------------------------------------------

    def tab_layout(self, pane_id: str) -> tuple[str, list[tuple[str, int, int]]]:
        """(the tab of ``pane_id``, [(pane id, width, height)] of each of its panes) from
        ``pane layout``: herdr's rectangles in cells, a pane's frame included."""
        layout = self._on_pane(pane_id, ["pane", "layout", "--pane", pane_id], json_result=True).get("layout")
        tab = layout.get("tab_id") if isinstance(layout, dict) else None
        panes = []
        for pane in (layout.get("panes") if isinstance(layout, dict) else None) or []:
            rect = pane.get("rect") if isinstance(pane, dict) else None
            width, height = (rect.get("width"), rect.get("height")) if isinstance(rect, dict) else (None, None)
            if not (rect and pane.get("pane_id") and type(width) is int and type(height) is int):
                raise MuxError("herdr pane layout printed a pane without its id or size.")
            panes.append((str(pane["pane_id"]), width, height))
        if not tab or not panes:
            raise MuxError(f"herdr pane layout did not report the tab of pane {pane_id}.")
        return check_id("tab", str(tab)), panes

    def labelled_tabs(self, label: str) -> list[tuple[str, list[str]]]:
        """(tab id, its pane ids) of each tab of this client's workspace labelled
        ``label``, oldest first: ``tab list`` and ``pane list``, two calls."""
        workspace = self._workspace()
        tabs = self._listed(["tab", "list", "--workspace", workspace], "tabs")
        found = [t for t in tabs if t.get("label") == label and t.get("tab_id")]
        found.sort(key=lambda t: t["number"] if type(t.get("number")) is int else 0)
        if not found:
            return []
        panes: dict[str, list[str]] = {str(t["tab_id"]): [] for t in found}
        for pane in self._listed(["pane", "list", "--workspace", workspace], "panes"):
            if pane.get("tab_id") in panes and pane.get("pane_id"):
                panes[pane["tab_id"]].append(str(pane["pane_id"]))
        return list(panes.items())

    def new_tab(self, program: Program, *, label: str) -> tuple[str, str, str | None]:
        """A new tab of this client's workspace labelled ``label``, focus left where it
        is, whose root pane (a shell) then runs ``program`` as :meth:`split_identified`
        runs one: (tab id, pane id, identity)."""
        command = _command_line(program.argv, program.env)
        check_cwd(program.cwd)
        args = ["tab", "create", "--workspace", self._workspace(), "--label", label, "--no-focus"]
        if program.cwd is not None:
            args += ["--cwd", program.cwd]
        try:
            result = self._result(args)
        except _Failure as failure:
            raise self._failed(args, failure) from None
        tab, root = result.get("tab"), result.get("root_pane")
        tab_id = tab.get("tab_id") if isinstance(tab, dict) else None
        pane_id = root.get("pane_id") if isinstance(root, dict) else None
        if not tab_id or not pane_id:
            raise MuxError("herdr tab create did not report the new tab and its root pane.")
        tab_id, pane_id = check_id("tab", str(tab_id)), check_id("pane", str(pane_id))
        return tab_id, pane_id, self._start(pane_id, command)

    def _workspace(self) -> str:
        if not self.workspace:
            raise MuxError("the herdr workspace is unknown; the Director's placement names none.")
        return self.workspace

    def _listed(self, args: Sequence[str], key: str) -> list[dict[str, Any]]:
        try:
            items = self._result(args).get(key)
        except _Failure as failure:
            raise self._failed(args, failure) from None
        return [item for item in items or [] if isinstance(item, dict)]

    def capture(self, pane_id: str, lines: int = 50, ansi: bool = False) -> str:
        args = ["pane", "read", pane_id, "--source", "visible"]
        if ansi:
            args += ["--format", "ansi"]
        self._verify(pane_id)
        return tail_lines(self._on_pane(pane_id, args), lines)

    def kill(self, pane_id: str) -> bool:
        args = ["pane", "close", pane_id]
        try:
            self._verify(pane_id)
        except MuxError as error:
            if type(error) is PaneGone:
                return False
            raise
        try:
            self._call(args)
        except _Failure as failure:
            if failure.code in _GONE_CODES:
                return False
            raise self._failed(args, failure) from None
        return True

    def pane_exists(self, pane_id: str) -> bool:
        try:
            self._on_pane(pane_id, ["pane", "get", pane_id], json_result=True)
        except PaneGone:
            return False
        return True

    def type_text(self, pane_id: str, text: str) -> None:
        self._verify(pane_id)
        for chunk in text_chunks(text):
            self._on_pane(pane_id, ["pane", "send-text", pane_id, chunk])

    def press_enter(self, pane_id: str) -> None:
        self._verify(pane_id)
        self._on_pane(pane_id, ["pane", "send-keys", pane_id, "enter"])

    def press_backspace(self, pane_id: str, count: int) -> None:
        self._verify(pane_id)
        for done in range(0, count, 200):
            self._on_pane(pane_id, ["pane", "send-keys", pane_id, *["backspace"] * min(200, count - done)])

    def press_arrow(self, pane_id: str, direction: str, count: int) -> None:
        if direction not in ("left", "right", "up", "down"):
            raise ValueError(f"no arrow key {direction!r}")
        self._verify(pane_id)
        for done in range(0, count, 200):
            self._on_pane(pane_id, ["pane", "send-keys", pane_id, *[direction] * min(200, count - done)])

    # -- supervision ---------------------------------------------------------------------

    def _process_info(self, pane_id: str) -> dict[str, Any]:
        args = ["pane", "process-info", "--pane", pane_id]
        info = self._on_pane(pane_id, args, json_result=True).get("process_info")
        return info if isinstance(info, dict) else {}

    def pane_dead(self, pane_id: str) -> bool:
        """Whether the pane is still there but its process has exited (no shell pid)."""
        return not self._process_info(pane_id).get("shell_pid")

    def inspect(self, pane_id: str, lines: int = 30) -> tuple[bool, bool, str, str]:
        """(exists, dead, foreground command, screen tail): two herdr calls (process-info
        and read), as herdr has no combined query."""
        try:
            info = self._process_info(pane_id)
            if info.get("shell_pid"):  # a pane whose process ended reads as dead, below
                self._check(pane_id, _process_identity(info))
            screen = tail_lines(self._on_pane(pane_id, ["pane", "read", pane_id, "--source", "visible"]), lines)
        except PaneStale:
            raise
        except PaneGone:
            return False, False, "", ""
        processes = info.get("foreground_processes") or []
        first = processes[0] if processes and isinstance(processes[0], dict) else {}
        return True, not info.get("shell_pid"), str(first.get("name", "")), screen

    def pane_current_command(self, pane_id: str) -> str:
        """The name of the pane's foreground program ("" when herdr does not know it)."""
        processes = self._process_info(pane_id).get("foreground_processes") or []
        first = processes[0] if processes and isinstance(processes[0], dict) else {}
        return str(first.get("name", ""))
