"""The tmux backend: every operation is one ``tmux`` client call with an argv and a timeout.

Facts about tmux (checked against tmux 3.3a) that shape this module:

* tmux re-parses its own argv: an argument ending in ``;`` ends the command (the rest of
  the argv becomes a second command), and a trailing ``\\;`` becomes ``;``. Every argument
  is therefore passed through :func:`~cafleet.mux.tmux_syntax.protect`, which turns a final
  ``;`` into ``\\;`` so the argument arrives exactly as given.
* ``split-window`` runs a command given as several arguments directly (no shell), but a
  single argument through ``sh -c``; a one-element argv is therefore quoted and prefixed
  with ``exec`` so that it, too, runs exactly.
* ``-c start-directory`` is format-expanded (``#{...}``), so ``#`` is doubled there.
* One client command must fit in a 16 KiB message ("command too long"), so text is typed
  in chunks of at most :data:`cafleet.mux.CHUNK_BYTES` UTF-8 bytes, never splitting a character.
* ``display-message -t <missing pane>`` succeeds with empty output, so existence checks
  compare the printed pane id instead of relying on the exit status.
* A pane's identity is ``<server pid>:<server start time>:<pane pid>``
  (``#{pid}:#{start_time}:#{pane_pid}``). Pane ids restart at ``%0`` with a new server on
  the same socket; the server's pid and start time tell the servers apart, the pane's pid
  the panes of one server. It is checked in the same client call as whatever is done to
  the pane: read with ``display-message`` chained before ``capture-pane``, and for input
  and kills as the condition of ``if-shell -F`` whose command runs only when the pane still
  has that identity (else it prints :data:`_MISMATCH`), so no keystroke can slip between
  check and input. That command is a string tmux parses; single quotes keep everything in
  it literal (no format, variable or ``~`` expansion, ``;`` included), and ``'`` itself is
  written ``'\\''``.
* Stored values are checked before use (:mod:`cafleet.mux.tmux_syntax`'s ``check_session``,
  ``check_pane``, ``check_window``, ``check_identity``): only ``$N@<absolute socket path>``,
  ``%N``, ``@N`` and three numbers pass, so no stored text becomes part of a format or a
  command string, and no stored pane id or socket is an option to tmux.
* On another host (``remote``, :mod:`cafleet.mux.ssh`) the same argv runs there through one
  ``ssh`` call, quoted word by word for the remote shell, so every guarantee above holds.
"""

from __future__ import annotations

from cafleet.errors import MuxError, PaneGone, PaneStale
from cafleet.mux import check_argv, check_cwd, first_line, is_number, is_socket_path, stale, tail_lines, text_chunks
from cafleet.mux.tmux_syntax import (
    COMMAND_SEPARATOR,
    IDENTITY_FORMAT,
    check_identity,
    check_pane,
    check_session,
    check_window,
    command_words,
    env_args,
    is_gone,
    look,
    marked_parts,
    protect,
    quote_for_tmux,
    server_gone,
)

TYPE_CHECKING = False  # true for the type checker only: typing costs milliseconds on every command
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from cafleet.mux.base import PaneContext, Program
    from cafleet.mux.ssh import Ssh

_GUARDED_CHUNK_BYTES = 2048  # quoted inside an if-shell command: up to 4x longer, still < 16 KiB
_MISMATCH = "cafleet-pane-identity-mismatch"
ARROWS = {"left": "Left", "right": "Right", "up": "Up", "down": "Down"}  # press_arrow's keys, as send-keys names them
_BATCH_BYTES = 12 * 1024  # the words of one batched read (inspect_many): inside the 16 KiB bound with room to spare
CONNECT_GRACE = 5.0  # extra seconds a call to another host may take: the first one opens the connection


def _pane_failure(pane_id: str, args: Sequence[object], code: int, err: str) -> MuxError:
    """A failed command on ``pane_id`` as one line: PaneGone when tmux no longer knows it."""
    reason = first_line(err) or f"exit status {code}"
    if is_gone(err):
        return PaneGone(f"tmux pane {pane_id} is gone ({reason}).", pane=pane_id)
    return MuxError(f"tmux {args[0]} on pane {pane_id} failed: {reason}.", pane=pane_id)


def _batched_looks(todo: list[str], lines: int, ansi: bool, marker: str) -> tuple[list[str], list[object]]:
    """The first panes of ``todo`` whose looks (:func:`~cafleet.mux.tmux_syntax.look`, each
    headed by ``marker``) fit in one client call, and that call's argv, ending in a marked
    ``end`` line."""
    batch: list[str] = []
    args: list[object] = []
    size = 0
    for pane_id in todo:
        part = [*look(pane_id, lines, f"{marker}\t", ansi), COMMAND_SEPARATOR]
        cost = sum(len(str(a)) + 1 for a in part if a is not COMMAND_SEPARATOR) + 4
        if batch and size + cost > _BATCH_BYTES:
            break
        batch.append(pane_id)
        args += part
        size += cost
    args += ["display-message", "-p", f"{marker}\tend"]
    return batch, args


class Tmux:
    """A tmux server reached through its socket (or tmux's default when ``socket`` is None).

    ``pane`` is the calling pane (``TMUX_PANE``), needed only by :meth:`current_pane`.
    """

    name = "tmux"

    def __init__(
        self,
        socket: str | None = None,
        timeout: float = 5.0,
        *,
        pane: str | None = None,
        binary: str = "tmux",
        remote: Ssh | None = None,
        label: str | None = None,
    ) -> None:
        self.socket = socket
        self.label = label  # ``-L`` server name, used when there is no socket path yet
        self.timeout = timeout
        self.pane = pane
        self.binary = binary
        self.remote = remote  # the host the server runs on, reached over SSH; None: this machine
        self.expected: dict[str, str | None] = {}  # pane id -> identity it must still have
        self.recorded: dict[str, float] = {}  # pane id -> when a legacy placement was recorded
        self.calls = 0  # client calls made so far (the WebUI counts what its screens cost)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], timeout: float = 5.0) -> Tmux:
        """The server and pane this process runs in: ``TMUX`` is ``<socket>,<pid>,<index>``."""
        socket = environ.get("TMUX", "").split(",")[0] or None
        return cls(socket, timeout, pane=environ.get("TMUX_PANE") or None)

    @classmethod
    def from_session(cls, session: str, timeout: float = 5.0, remote: Ssh | None = None) -> Tmux:
        """Reach the server named by a stored ``<session_id>@<socket_path>`` string (on
        ``remote``'s host when given; see :mod:`cafleet.mux.ssh`)."""
        return cls(check_session(session)[1], timeout, remote=remote)

    # -- subprocess plumbing -------------------------------------------------------------

    def _call(self, args: Sequence[object]) -> tuple[int, str, str]:
        import subprocess

        self.calls += 1
        argv = [self.binary]
        if self.socket:
            argv += ["-S", self.socket]
        elif self.label:
            argv += ["-L", self.label]
        argv += [";" if arg is COMMAND_SEPARATOR else protect(str(arg)) for arg in args]
        if self.remote is not None:
            if any("\0" in word for word in argv):
                raise MuxError(f"tmux {args[0]} was given text containing a NUL character.")
            # The same tmux command line, run on the host: one ssh call over the shared connection.
            return self.remote.run(argv, self.timeout + CONNECT_GRACE)
        try:
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
            )
        except FileNotFoundError:
            raise MuxError(
                f"{self.binary} is not installed or not on PATH; install tmux to use this backend."
            ) from None
        except subprocess.TimeoutExpired:
            raise MuxError(
                f"tmux {args[0]} did not answer within {self.timeout:g} s; check that the tmux server is responsive."
            ) from None
        except ValueError:  # an embedded NUL character
            raise MuxError(f"tmux {args[0]} was given text containing a NUL character.") from None
        return (
            done.returncode,
            done.stdout.decode("utf-8", "replace"),
            done.stderr.decode("utf-8", "replace"),
        )

    def _run(self, args: Sequence[object]) -> str:
        """Run a command that does not target a pane; any failure is a MuxError."""
        code, out, err = self._call(args)
        if code != 0:
            raise MuxError(f"tmux {args[0]} failed: {first_line(err) or f'exit status {code}'}.")
        return out

    def _run_on_pane(self, pane_id: str, args: Sequence[object]) -> str:
        """Run a command that targets ``pane_id``; a missing pane is PaneGone."""
        code, out, err = self._call(args)
        if code != 0:
            raise _pane_failure(pane_id, args, code, err)
        return out

    def _pane_fields(self, pane_id: str, fmt: str) -> tuple[str, str]:
        """(identity, ``fmt`` expanded) for ``pane_id``; PaneGone when tmux does not know it."""
        args = ["display-message", "-p", "-t", pane_id, f"#{{pane_id}}\t{IDENTITY_FORMAT}\t{fmt}"]
        out = self._run_on_pane(pane_id, args)
        found, _, rest = out.rstrip("\n").partition("\t")
        if found != pane_id:
            raise PaneGone(f"tmux pane {pane_id} is gone.", pane=pane_id)
        identity, _, value = rest.partition("\t")
        return identity, value

    def _pane_format(self, pane_id: str, fmt: str) -> str:
        """Expand ``fmt`` for ``pane_id``, checking its expected identity."""
        identity, value = self._pane_fields(pane_id, fmt)
        self._check(pane_id, identity)
        return value

    def _check(self, pane_id: str, identity: str) -> None:
        """PaneStale when ``pane_id`` was expected to have another identity, or (a legacy
        placement, no identity) when its server started after the placement was recorded."""
        want = self.expected.get(pane_id)
        if not want:
            recorded = self.recorded.get(pane_id)
            started = identity.split(":")[1] if identity.count(":") == 2 else ""
            if recorded is not None and started.isdigit() and int(started) > int(recorded):
                raise stale("tmux", pane_id, "its tmux server was started after this placement was recorded")
            return
        if identity == want:
            return
        server_then, server_now = want.rsplit(":", 1)[0], identity.rsplit(":", 1)[0]
        why = (
            "its tmux server was restarted"
            if server_then != server_now
            else "the program cafleet started there was replaced"
        )
        raise stale("tmux", pane_id, why)

    def _guarded(self, pane_id: str, command: str, args: Sequence[str]) -> tuple[int, str, str]:
        """Run ``command`` (a tmux command string) only if ``pane_id`` still has its expected
        identity, in one client call; else run ``args`` as they are. PaneStale / PaneGone
        when the check failed, so nothing was done."""
        want = self.expected.get(pane_id)
        if not want:
            if pane_id in self.recorded:  # legacy placement: its own check call first
                self._pane_format(pane_id, "")
            return self._call(args)
        condition = f"#{{==:#{{pane_id}}/{IDENTITY_FORMAT},{pane_id}/{want}}}"
        code, out, err = self._call(
            ["if-shell", "-F", "-t", pane_id, condition, command, f"display-message -p {_MISMATCH}"]
        )
        if code == 0 and _MISMATCH in out:
            self._pane_format(pane_id, "")  # PaneGone or PaneStale, naming why
            raise MuxError(f"tmux pane {pane_id} changed while it was checked; nothing was sent to it.", pane=pane_id)
        return code, out, err

    def expect(self, pane_id: str, identity: str | None, recorded_at: float | None = None) -> None:
        self.expected[check_pane(pane_id)] = check_identity(identity)
        if recorded_at is not None:
            self.recorded[pane_id] = recorded_at

    def identity(self, pane_id: str) -> str:
        return self._pane_fields(pane_id, "")[0]

    # -- the Multiplexer protocol --------------------------------------------------------

    def current_pane(self) -> PaneContext:
        from cafleet.mux.base import PaneContext

        if not self.pane:
            raise MuxError("TMUX_PANE is not set, so the calling tmux pane is unknown; run inside a tmux pane.")
        identity, fields = self._pane_fields(self.pane, "#{session_id}\t#{window_id}\t#{socket_path}")
        session_id, window_id, socket = fields.split("\t", 2)
        if not is_socket_path(socket):
            raise MuxError(
                f"this tmux server's socket path {socket!r} has whitespace, quotes or shell characters, which "
                "cafleet refuses in a stored placement; start tmux with a plain socket path (-S or TMUX_TMPDIR)."
            )
        return PaneContext(
            backend="tmux",
            session=f"{session_id}@{socket}",
            window_id=window_id,
            pane_id=self.pane,
            identity=identity,
        )

    def split_identified(
        self, window_id: str, program: Program, *, target_pane: str | None = None, beside: bool = False
    ) -> tuple[str, str]:
        """``beside``: the new pane to the right of ``target_pane`` (``-h``), else below it."""
        check_argv(program.argv)
        fmt = f"#{{pane_id}}\t{IDENTITY_FORMAT}"
        target = check_pane(target_pane) if target_pane else window_id
        check_window(window_id)
        args = ["split-window", "-d", "-P", "-F", fmt, "-t", target, *(["-h"] if beside else [])]
        check_cwd(program.cwd)
        if program.cwd is not None:
            args += ["-c", program.cwd.replace("#", "##")]
        out = self._run([*args, *env_args(program.env), "--", *command_words(program.argv)]).strip()
        pane_id, _, identity = out.partition("\t")
        if not pane_id.startswith("%") or not identity:
            raise MuxError(f"tmux split-window did not report a pane id (got {out[:40]!r}).")
        return pane_id, identity

    def new_session(self, program: Program, *, window_name: str | None = None) -> tuple[str, str, str, str]:
        """Open a detached session of its own running ``program``, starting the server if
        needed: (``<session_id>@<socket_path>``, window id, pane id, identity). Used for
        members on another host, where there is no Director's window to split."""
        check_argv(program.argv)
        fmt = f"#{{pane_id}}\t{IDENTITY_FORMAT}\t#{{session_id}}\t#{{window_id}}\t#{{socket_path}}"
        args = ["new-session", "-d", "-P", "-F", fmt, "-x", "200", "-y", "50"]
        if window_name:
            args += ["-n", window_name]
        if program.cwd:
            args += ["-c", program.cwd]
        out = self._run([*args, *env_args(program.env), "--", *command_words(program.argv)]).strip()
        fields = out.split("\t")
        if len(fields) != 5 or not fields[0].startswith("%") or not all(fields):
            raise MuxError(f"tmux new-session did not report its pane (got {out[:40]!r}).")
        pane_id, identity, session_id, window_id, socket = fields
        return f"{session_id}@{socket}", window_id, pane_id, identity

    def window_panes(self, window_id: str) -> tuple[int, int, list[tuple[str, int, int]]]:
        """(width, height, [(pane id, width, height)]) of ``window_id``, in one call."""
        fmt = "#{window_width} #{window_height} #{pane_id} #{pane_width} #{pane_height}"
        rows = [
            line.split() for line in self._run(["list-panes", "-t", check_window(window_id), "-F", fmt]).splitlines()
        ]
        rows = [row for row in rows if len(row) == 5 and all(is_number(v) for i, v in enumerate(row) if i != 2)]
        if not rows:
            raise MuxError(f"tmux list-panes did not report the panes of window {window_id}.")
        return int(rows[0][0]), int(rows[0][1]), [(r[2], int(r[3]), int(r[4])) for r in rows]

    def tagged_windows(self, session: str, tag: str) -> list[tuple[str, int, int, int]]:
        """(window id, width, height, panes) of the windows of ``session`` (an id, ``$N``)
        whose window option ``@cafleet_fleet`` is ``tag``, oldest first."""
        fmt = "#{window_id} #{window_width} #{window_height} #{window_panes} #{@cafleet_fleet}"
        found = []
        for line in self._run(["list-windows", "-t", session, "-F", fmt]).splitlines():
            fields = line.split(" ", 4)
            if len(fields) == 5 and fields[4] == tag and all(is_number(v) for v in fields[1:4]):
                found.append((fields[0], int(fields[1]), int(fields[2]), int(fields[3])))
        return found

    def new_window(self, session: str, program: Program, *, name: str, tag: str) -> tuple[str, str, str]:
        """A new background window of ``session`` (an id, ``$N``) named ``name``, tagged
        ``tag`` (its window option ``@cafleet_fleet``), running ``program``: (window id,
        pane id, identity)."""
        check_argv(program.argv)
        fmt = f"#{{window_id}}\t#{{pane_id}}\t{IDENTITY_FORMAT}"
        args = ["new-window", "-d", "-P", "-F", fmt, "-t", f"{session}:", "-n", name]
        check_cwd(program.cwd)
        if program.cwd is not None:
            args += ["-c", program.cwd.replace("#", "##")]
        out = self._run([*args, *env_args(program.env), "--", *command_words(program.argv)]).strip()
        fields = out.split("\t")
        if len(fields) != 3 or not fields[0].startswith("@") or not fields[1].startswith("%") or not fields[2]:
            raise MuxError(f"tmux new-window did not report its pane (got {out[:40]!r}).")
        window_id, pane_id, identity = fields
        self._run(["set-option", "-w", "-t", window_id, "@cafleet_fleet", tag])
        return window_id, pane_id, identity

    def tile(self, window_id: str) -> None:
        """Lay the window's panes out in equal rows and columns (``select-layout tiled``)."""
        self._run(["select-layout", "-t", check_window(window_id), "tiled"])

    def panes_with_pids(self) -> list[tuple[str, int]]:
        """(pane id, its process id) of every pane on this server."""
        pairs = []
        for line in self._run(["list-panes", "-a", "-F", "#{pane_id} #{pane_pid}"]).splitlines():
            pane_id, _, pid = line.partition(" ")
            if pane_id.startswith("%") and pid.isdigit():
                pairs.append((pane_id, int(pid)))
        return pairs

    def capture(self, pane_id: str, lines: int = 50, ansi: bool = False) -> str:
        args = ["capture-pane", "-p", "-J", "-t", pane_id]
        if lines > 0:  # 0: the visible screen alone (capture-pane's default), no history
            args += ["-S", f"-{lines}"]
        if ansi:
            args.insert(1, "-e")
        if not self.expected.get(pane_id) and pane_id not in self.recorded:
            return tail_lines(self._run_on_pane(pane_id, args), lines)
        # The identity check rides in the same client call, before the capture.
        head = ["display-message", "-p", "-t", pane_id, f"#{{pane_id}}\t{IDENTITY_FORMAT}"]
        out = self._run_on_pane(pane_id, [*head, COMMAND_SEPARATOR, *args])
        first, _, screen = out.partition("\n")
        found, _, identity = first.partition("\t")
        if found != pane_id:
            raise PaneGone(f"tmux pane {pane_id} is gone.", pane=pane_id)
        self._check(pane_id, identity)
        return tail_lines(screen, lines)

    def kill(self, pane_id: str) -> bool:
        try:
            code, _, err = self._guarded(
                pane_id, f"kill-pane -t {quote_for_tmux(pane_id)}", ["kill-pane", "-t", pane_id]
            )
        except PaneStale:
            raise
        except PaneGone:
            return False
        if code == 0:
            return True
        if is_gone(err):
            return False
        reason = first_line(err) or f"exit status {code}"
        raise MuxError(f"tmux kill-pane on pane {pane_id} failed: {reason}.", pane=pane_id)

    def pane_exists(self, pane_id: str) -> bool:
        try:
            self._pane_format(pane_id, "")
        except PaneGone:
            return False
        return True

    def type_text(self, pane_id: str, text: str) -> None:
        chunks = text_chunks(text, _GUARDED_CHUNK_BYTES) if self.expected.get(pane_id) else text_chunks(text)
        for chunk in chunks:
            args = ["send-keys", "-l", "-t", pane_id, "--", chunk]
            self._on_pane_guarded(pane_id, args)

    def press_enter(self, pane_id: str) -> None:
        self._on_pane_guarded(pane_id, ["send-keys", "-t", pane_id, "Enter"])

    def _on_pane_guarded(self, pane_id: str, args: Sequence[str]) -> None:
        """:meth:`_run_on_pane`, behind the identity check when one is expected."""
        command = " ".join(quote_for_tmux(arg) for arg in args)
        code, _, err = self._guarded(pane_id, command, args)
        if code != 0:
            raise _pane_failure(pane_id, args, code, err)

    def press_backspace(self, pane_id: str, count: int) -> None:
        for done in range(0, count, 200):
            self._on_pane_guarded(pane_id, ["send-keys", "-t", pane_id, *["BSpace"] * min(200, count - done)])

    def press_arrow(self, pane_id: str, direction: str, count: int) -> None:
        key = ARROWS.get(direction)
        if key is None:
            raise ValueError(f"no arrow key {direction!r}")
        for done in range(0, count, 200):
            self._on_pane_guarded(pane_id, ["send-keys", "-t", pane_id, *[key] * min(200, count - done)])

    # -- supervision ---------------------------------------------------------------------

    def pane_dead(self, pane_id: str) -> bool:
        """Whether the pane's program has exited while the pane stays (``remain-on-exit``)."""
        return self._pane_format(pane_id, "#{pane_dead}") == "1"

    def pane_current_command(self, pane_id: str) -> str:
        """The name of the program in the pane's foreground."""
        return self._pane_format(pane_id, "#{pane_current_command}")

    def inspect(self, pane_id: str, lines: int = 30) -> tuple[bool, bool, str, str]:
        """(exists, dead, foreground command, last ``lines`` of the screen) in ONE tmux call,
        so supervising a fleet costs one subprocess per member per round; the expected
        identity is checked in that call too (PaneStale)."""
        code, out, err = self._call(look(pane_id, lines))
        if code != 0:
            if is_gone(err):
                return False, False, "", ""
            raise MuxError(
                f"tmux could not inspect pane {pane_id}: {first_line(err) or f'exit status {code}'}.", pane=pane_id
            )
        head, _, screen = out.partition("\n")
        found, dead, identity, command = ([*head.split("\t", 3), "", "", "", ""])[:4]
        if found != pane_id:
            return False, False, "", ""
        self._check(pane_id, identity)
        return True, dead == "1", command, tail_lines(screen, lines)

    @property
    def server(self) -> tuple:
        """What tells this client's server apart: two clients with the same ``server`` reach
        the same panes (a stored session names one session of it; every pane id is the
        server's own)."""
        return ("tmux", self.socket, self.label, self.remote.host if self.remote is not None else None)

    def inspect_many(self, pane_ids: Sequence[str], lines: int = 30, ansi: bool = False) -> dict[str, object]:
        """:meth:`inspect` of several panes of this server in as few client calls as tmux's
        16 KiB bound on one command allows (about 70 panes a call): ``{pane id: (exists,
        dead, command, screen) or the error}``, the error being what :meth:`inspect` of that
        pane alone would have raised (PaneStale when its identity changed; MuxError when the
        call failed as a whole: an unreachable host or server, a timeout, so one call, not
        one per pane, finds it out). ``ansi``: the screens keep their colours (``-e``).

        Each pane's part is its identity line and its capture, chained as :meth:`inspect`
        chains them, after a line that starts with a marker made afresh for the call, so
        no screen can pass its text off as another pane's. A gone pane stops tmux's
        command list at its capture (its identity line says it is gone): what came before
        is kept and the rest is asked for again, so each gone pane costs one more call."""
        results: dict[str, object] = {}
        todo = list(dict.fromkeys(pane_ids))
        while todo:
            todo = todo[self._read_batch(todo, lines, ansi, results) :]
        return {pane_id: results[pane_id] for pane_id in dict.fromkeys(pane_ids)}  # in the order asked

    def _read_batch(self, todo: list[str], lines: int, ansi: bool, results: dict[str, object]) -> int:
        """One client call of :meth:`inspect_many` over the first panes of ``todo`` that fit
        in it: their answers (or errors) into ``results``; how many of them it answered."""
        import os

        marker = f"cafleet-panes-{os.urandom(8).hex()}"
        batch, args = _batched_looks(todo, lines, ansi, marker)
        try:
            code, out, err = self._call(args)
        except MuxError as error:  # the call failed as a whole: each pane's inspect would say the same
            results.update((pane_id, error) for pane_id in batch)
            return len(batch)
        parts = marked_parts(out, marker)
        if code == 0:
            if parts and parts[-1][0] == "end":
                parts.pop()
            complete, done = parts, len(batch)
        elif not parts:  # not even the first identity line: the server, or the call, failed
            done = len(batch) if not is_gone(err) or server_gone(err) else 1
            for pane_id in batch[:done]:
                results[pane_id] = (
                    (False, False, "", "")
                    if is_gone(err)
                    else MuxError(
                        f"tmux could not inspect pane {pane_id}: {first_line(err) or f'exit status {code}'}.",
                        pane=pane_id,
                    )
                )
            return done
        else:  # it stopped in the last part begun: a gone pane's capture (or a failure after it)
            complete, done = parts[:-1], len(parts)
            stopped = batch[done - 1]
            if parts[-1][0].split("\t", 1)[0] != stopped:
                results[stopped] = (False, False, "", "")  # gone, as its identity line says
            else:
                results[stopped] = self._inspect_alone(stopped, lines, ansi)
        for pane_id, (head, screen) in zip(batch, complete):
            results[pane_id] = self._answer(pane_id, head, screen, lines)
        for pane_id in batch[:done]:
            results.setdefault(pane_id, MuxError(f"tmux did not answer for pane {pane_id}.", pane=pane_id))
        return done

    def _answer(self, pane_id: str, head: str, screen: str, lines: int) -> object:
        """One pane's part of :meth:`inspect_many`, read as :meth:`inspect` reads its call."""
        found, dead, identity, command = ([*head.split("\t", 3), "", "", "", ""])[:4]
        if found != pane_id:
            return False, False, "", ""
        try:
            self._check(pane_id, identity)
        except PaneStale as error:
            return error
        return True, dead == "1", command, tail_lines(screen, lines)

    def gone(self, pane_id: str) -> PaneGone:
        """The error :meth:`capture` raises for a pane :meth:`inspect_many` found gone (its
        capture fails as tmux says it does, ``can't find pane``)."""
        return PaneGone(f"tmux pane {pane_id} is gone (can't find pane: {pane_id}).", pane=pane_id)

    def _inspect_alone(self, pane_id: str, lines: int, ansi: bool) -> object:
        """One pane's part of :meth:`inspect_many` asked for on its own (its part of a
        batch did not end): the answer, or the error."""
        try:
            found = self.inspect(pane_id, lines)
            if ansi and found[0]:
                found = (*found[:3], self.capture(pane_id, lines, ansi=True))
            return found
        except PaneStale as error:
            return error
        except PaneGone:
            return False, False, "", ""
        except MuxError as error:
            return error
