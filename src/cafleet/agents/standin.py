"""A stand-in coding agent: a tiny full-screen program that behaves like an agent's input
box, for tests and demos that need a real pane without a real agent.

    python -m cafleet.agents.standin --member-id N [--record FILE] [--auto-reply]
                                     [--permission-prompt] [--enter-guard SECONDS]
                                     [--prompt TEXT] [--placeholder TEXT] [--prefill TEXT]
                                     [--startup-clear] [--waiting-for-startup] [--completion]
                                     [--late-echo SECONDS] [--start-delay SECONDS] [--start-gate PATH]
                                     [--reply-lines N] [--inline]

It puts its terminal in raw mode and draws a banner, the lines it received (``• …``), a
rule and the input line ``> `` (the "standin" cues of cafleet.delivery.keystrokes.screen). Printable
keys are echoed into the input line; Enter (CR or LF) submits it: the line moves into the
scrollback and is appended to ``--record`` as one JSON object per line,
``{"ts", "kind": "submit", "text"}``, text exact. Backspace and Ctrl-U edit; Ctrl-C and
Ctrl-D quit, restoring the terminal. Every other control key or escape sequence (a lone
Escape, arrows, ESC [200~ ...) is not acted on but recorded as ``{"kind": "key", "key"}``,
so a test can prove that none reached the pane.

``--permission-prompt`` starts with a claude-like question ("Do you want to proceed?",
``❯ 1. Yes`` / ``2. No``): keys are collected without echo and each Enter records
``{"kind": "permission", "text"}``; the answer ``1`` or ``2`` dismisses it. A submitted
line ``/permission`` draws the question again (an agent asking a second time).

``--prompt "❯ "`` draws claude's composer instead of ``> `` (for tests that use the claude
cues). ``--enter-guard S`` ignores (and records as the key ``enter-too-soon``) an Enter that
arrives less than S seconds after typed text, as codex turns such an Enter into a newline:
it lets tests exercise the settle delay and the Enter retries.

Behaviours of the real agents that delivery must survive, each off by default:

* ``--placeholder TEXT`` draws TEXT, dimmed, in the empty input line (claude's ``Try "…"``,
  codex's suggestions, opencode's ``Ask anything... "…"``).
* ``--prefill TEXT`` starts with TEXT already typed (a person composing).
* ``--startup-clear`` is claude while it starts: the first Enter is not acted on (the key
  ``enter-during-startup``); instead the input line is cleared, recorded as ``{"kind":
  "cleared", "text"}``, and the stand-in's own start-up prompt is submitted (``• (start-up
  prompt)``), as claude does with the prompt on its command line.
* ``--waiting-for-startup`` is codex while it starts: ``Waiting for startup`` shows above the
  rule, typing is accepted but every Enter is held (the key ``enter-while-starting``) until
  the process gets SIGUSR1. ``--late-startup`` enters that state at the first key it
  receives instead (codex drawing it only after the text was typed).
* ``--completion`` opens a file-mention popup under the input line while the text ends in
  ``@word``; Enter then accepts the completion (the word becomes ``word.txt``, without the
  ``@``, as codex does; the key ``completion-accepted``) instead of submitting.
* ``--late-echo S`` is an agent on a loaded machine: Enter submits and clears the input
  line at once, but the line shows in the transcript only S seconds later.
* ``--reply-lines N`` answers every submitted line, once its echo shows, with N lines of
  output (``(reply line 1 of N)`` …): an agent's long answer, which pushes the echo up and
  out of the screen.
* ``--inline`` draws the transcript as claude and codex do: each new row is printed above
  the input box and scrolls up into the terminal's own history (tmux's scrollback), where
  an echo pushed off the screen can still be read; by default the whole screen is redrawn
  in place, as a full-screen program such as opencode draws it, and a row pushed off the
  screen is gone.
* ``--start-gate PATH`` draws the input box only once PATH exists: a test decides when
  the box appears, instead of racing a delay.
* ``--start-delay S`` is an agent that draws its input box only S seconds after it starts
  (opencode's first seconds, any agent on a loaded machine): until then the screen shows
  the banner and ``starting…``, with no rule and no input line, and every key is dropped
  (recorded as the key ``before-input-box``); ``{"kind": "box-drawn"}`` is recorded when
  the box appears.

SIGUSR2 freezes the stand-in (it reads no input and draws nothing, like an agent busy
with its own work; tmux resumes a stopped pane at once, so SIGSTOP cannot do this) and a
second SIGUSR2 thaws it; each is recorded (``{"kind": "frozen"}``, ``{"kind": "thawed"}``).

Every submitted line is echoed into the transcript (``• <text>``). Like the real agents,
the stand-in wraps long rows itself (continuation rows start with two blanks; never the
terminal's auto-wrap, whose stale marks make tmux join unrelated rows), shows only the end
of an input line or an echo taller than the screen, and draws the completion popup's rows
with ``┊``.

Environment (for panes started by ``cafleet member create``, which passes only
``--member-id``): ``CAFLEET_STANDIN_RECORD_DIR`` records into ``<dir>/member-<id>.jsonl``
and ``CAFLEET_STANDIN_AUTO_REPLY=1`` turns on ``--auto-reply``;
``CAFLEET_STANDIN_START_DELAY=S`` sets ``--start-delay`` and ``CAFLEET_STANDIN_START_GATE=PATH``
``--start-gate``.

Shell mode, as claude's ``!``: a ``!`` typed into the empty input line is not text but
switches the line to shell mode (its prompt becomes ``! ``; BackSpace in the empty line
leaves it). Enter then runs the line with ``/bin/sh -c`` in the stand-in's own directory
and environment, shows ``! <line>`` and the output (``  ⎿ …``) in the transcript, and
records ``{"kind": "shell", "text", "output", "status"}``; no reply follows.

``--auto-reply``: when a submitted line holds a cafleet preview header ``[cafleet msg <id>
from <sender> …``, the stand-in shows ``working… (esc to interrupt)`` and runs the real
command line, ``$CAFLEET_BIN`` (default ``python -m cafleet``): ``message poll <me>
--json``, then for each message ``message send --from-member-id <me> --to-member-id
<sender> "ack: <first 40 characters of its body>"`` and ``message ack <id>``, recording
``{"kind": "reply"}`` or ``{"kind": "reply-error"}``.

Standard library only (termios, tty, select, os, sys).
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import select
import signal
import sys
import termios
import time
import tty
from datetime import UTC, datetime

BANNER = "cafleet stand-in agent"
PROMPT = "> "
RULE = "─" * 24
WORKING = "working… (esc to interrupt)"
QUESTION = ("Do you want to proceed?", "❯ 1. Yes", "  2. No")
HEADER_START = "[cafleet msg "
SHELL_PROMPT = "! "  # the input line in shell mode
STARTING = "Waiting for startup"
STARTUP_PROMPT = "(start-up prompt)"
NO_BOX_YET = "starting…"
ASK_AGAIN = "/permission"
_ESC_WAIT = 0.05  # how long a lone ESC waits for the rest of a sequence
_COMMAND_TIMEOUT = 30.0


class StandIn:
    """The stand-in's state and screen; ``feed`` takes decoded input, ``draw`` paints."""

    def __init__(
        self,
        member_id: int,
        record: str | None,
        auto_reply: bool,
        ask: bool,
        enter_guard: float,
        prompt: str = PROMPT,
        *,
        placeholder: str = "",
        prefill: str = "",
        startup_clear: bool = False,
        waiting: bool = False,
        completion: bool = False,
        late_startup: bool = False,
        late_echo: float = 0.0,
        start_delay: float = 0.0,
        start_gate: str | None = None,
        reply_lines: int = 0,
        inline: bool = False,
        command: list[str] | None = None,
    ) -> None:
        self.command = command or [sys.executable, "-m", "cafleet"]  # how a reply runs cafleet (CAFLEET_BIN)
        self.reply_lines = reply_lines
        self.inline = inline
        self.flushed = 0  # --inline: scrollback entries already printed above the box
        self.live_rows = 0  # --inline: rows the box and what is under the transcript took
        self.box_at = time.monotonic() + start_delay if start_delay > 0 else 0.0  # when the input box appears
        self.start_gate = start_gate  # the input box appears once this file exists (then box_at applies)
        self.late_startup = late_startup
        self.late_echo = late_echo
        self.echoes_due: list[tuple[float, str]] = []  # (when, line): echoes drawn late
        self.member_id = member_id
        self.placeholder = placeholder
        self.startup_clear = startup_clear
        self.waiting = waiting
        self.completion = completion
        self.prompt = prompt
        self.record_path = record
        self.auto_reply = auto_reply
        self.asking = ask
        self.enter_guard = enter_guard
        self.last_typed = 0.0
        self.buffer = prefill
        self.shell = False  # `!` typed into the empty box: the next line is a shell command
        self.scrollback: list[str] = []
        self.working = False
        self.pending = ""  # an escape sequence cut by a read
        self.done = False

    # -- input --------------------------------------------------------------------------
    def feed(self, chars: str) -> None:
        text = self.pending + chars
        self.pending = ""
        i = 0
        while i < len(text) and not self.done:
            ch = text[i]
            if ch == "\x1b":
                end = _sequence_end(text, i)
                if end is None:  # incomplete: keep it for the next read
                    self.pending = text[i:]
                    return
                self.record("key", key=_key_name(text[i:end]))
                i = end
                continue
            self.key(ch)
            i += 1

    def flush_escape(self) -> None:
        """Nothing followed an ESC in time: it was the Escape key itself."""
        if self.pending:
            self.record("key", key=_key_name(self.pending))
            self.pending = ""

    def no_box_yet(self) -> bool:
        if self.start_gate is not None:
            if not os.path.exists(self.start_gate):
                return True
            self.start_gate = None
            self.box_at = self.box_at or time.monotonic()
        if self.box_at and time.monotonic() >= self.box_at:
            self.box_at = 0.0
            self.record("box-drawn")  # when the input box appears (what a delivery waited for)
        return bool(self.box_at)

    def key(self, ch: str) -> None:
        if self.no_box_yet() and ch not in "\x03\x04":
            self.record("key", key="before-input-box")
            return
        if self.late_startup:
            self.late_startup = False
            self.waiting = True
        if ch in "\x03\x04":
            self.record("exit", key="ctrl-c" if ch == "\x03" else "ctrl-d")
            self.done = True
        elif ch in "\r\n":
            if time.monotonic() - self.last_typed < self.enter_guard:
                self.record("key", key="enter-too-soon")
            elif self.waiting:
                self.record("key", key="enter-while-starting")
            elif self.startup_clear and not self.asking:
                self.startup_clear = False
                self.record("key", key="enter-during-startup")
                self.record("cleared", text=self.buffer)
                self.buffer = ""
                self.scrollback.append(STARTUP_PROMPT)
            elif not self.asking and (word := self.mention()) is not None:
                self.buffer = self.buffer[: len(self.buffer) - len(word) - 1] + word + ".txt"
                self.record("key", key="completion-accepted")
            else:
                self.enter()
        elif ch in "\x7f\x08":
            if self.shell and not self.buffer:
                self.shell = False  # BackSpace in the empty box leaves shell mode, as claude's does
            self.buffer = self.buffer[:-1]
        elif ch == "\x15":
            self.buffer = ""
        elif ch < " " or "\x7f" <= ch <= "\x9f":
            self.record("key", key=_control_name(ch))
        elif ch == "!" and not self.buffer and not self.shell and not self.asking:
            self.shell = True  # claude's `!`: the box switches to shell mode, the `!` is not text
            self.last_typed = time.monotonic()
        else:
            self.buffer += ch
            self.last_typed = time.monotonic()

    def mention(self) -> str | None:
        """The word after a trailing ``@`` while the completion popup is open, else None."""
        if not self.completion:
            return None
        head, at, word = self.buffer.rpartition("@")
        if not at or any(ch.isspace() for ch in word) or (head and not head[-1].isspace() and head[-1] != "⏎"):
            return None
        return word

    def draw_due_echoes(self) -> float | None:
        """Move the late echoes that are due into the transcript; seconds to the next one."""
        now = time.monotonic()
        while self.echoes_due and self.echoes_due[0][0] <= now:
            self.echo(self.echoes_due.pop(0)[1])
            self.draw()
        return self.echoes_due[0][0] - now if self.echoes_due else None

    def started(self) -> None:
        """SIGUSR1: codex-like start-up is over; Enter works again."""
        self.waiting = False

    def enter(self) -> None:
        line, self.buffer = self.buffer, ""
        if self.asking:
            self.record("permission", text=line)
            self.asking = line.strip() not in ("1", "2")
            return
        if self.shell:
            self.shell = False
            self.run_shell(line)
            return
        self.record("submit", text=line)
        if line == ASK_AGAIN:  # a new permission prompt, as an agent asks again later
            self.scrollback.append(line)
            self.asking = True
            return
        if self.late_echo:
            self.echoes_due.append((time.monotonic() + self.late_echo, line))
        else:
            self.echo(line)
        if self.auto_reply and HEADER_START in line:
            self.working = True
            self.draw()
            try:
                self.reply()
            finally:
                self.working = False

    def echo(self, line: str) -> None:
        """The submitted line into the transcript, with its --reply-lines answer."""
        self.scrollback.append(line)
        self.scrollback.extend(f"(reply line {n} of {self.reply_lines})" for n in range(1, self.reply_lines + 1))

    def run_shell(self, command: str) -> None:
        """A line submitted in shell mode: run with ``sh -c`` here (the pane's directory and
        environment), its output shown in the transcript and recorded as the ``shell``
        entry, as the agent's context would get it; no turn of the model follows."""
        import subprocess

        self.scrollback.append(f"! {command}")
        self.working = True
        self.draw()
        try:
            done = subprocess.run(
                ["/bin/sh", "-c", command],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,  # one stream, as a terminal shows them
                timeout=_COMMAND_TIMEOUT,
            )
            output = done.stdout.decode("utf-8", "replace")
            status: int | None = done.returncode
        except (OSError, subprocess.TimeoutExpired) as error:
            output, status = f"(shell failed: {error})", None
        finally:
            self.working = False
        self.scrollback.extend(f"  ⎿ {line}" for line in output.splitlines())
        self.record("shell", text=command, output=output, status=status)

    # -- the real command line --------------------------------------------------------------
    def reply(self) -> None:
        import subprocess

        base = self.command
        me = str(self.member_id)

        def run(*args: str) -> str:
            done = subprocess.run([*base, *args], capture_output=True, text=True, timeout=_COMMAND_TIMEOUT)
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"cafleet {args[0]} {args[1]} exited {done.returncode}: {last}")
            return done.stdout

        try:
            for message in json.loads(run("message", "poll", me, "--json")):
                sender = str(message["from_member_id"])
                run("message", "send", "--from-member-id", me, "--to-member-id", sender, "ack: " + message["text"][:40])
                run("message", "ack", str(message["message_id"]))
                self.record("reply", message_id=message["message_id"], to=message["from_member_id"])
                self.scrollback.append(f"(replied to msg {message['message_id']})")
        except (RuntimeError, OSError, ValueError, KeyError, TypeError, subprocess.TimeoutExpired) as error:
            self.record("reply-error", error=str(error))
            self.scrollback.append(f"(auto-reply failed: {error})")

    # -- output ------------------------------------------------------------------------
    def record(self, kind: str, **fields: object) -> None:
        if not self.record_path:
            return
        entry = {"ts": datetime.now(UTC).isoformat(), "kind": kind, **fields}
        data = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        fd = os.open(self.record_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    def draw(self) -> None:
        size = os.get_terminal_size(sys.stdout.fileno())
        width = max(size.columns - 1, 4)  # never the last column: no terminal auto-wrap
        room = max(size.lines - 1, 1)  # under the banner
        if self.no_box_yet():
            bottom = [NO_BOX_YET]
        elif self.asking:
            bottom = list(QUESTION)
        else:
            if self.shell:
                box = _wrap(SHELL_PROMPT, _visible(self.buffer), width)
            elif self.buffer or not self.placeholder:
                box = _wrap(self.prompt, _visible(self.buffer), width)
            else:
                box = [f"{self.prompt}\x1b[2m{self.placeholder}\x1b[22m"]
            bottom = [RULE, *box]
            if self.waiting:
                bottom.insert(0, STARTING)
            word = self.mention()
            if word is not None:
                bottom += [f"  ┊ @ {_visible(word)}.txt", "  ┊ enter accepts the completion"]
        if self.working:
            bottom.insert(0, WORKING)
        bottom = bottom[-room:]  # a box taller than the screen shows its end
        if self.inline:
            self.draw_inline(bottom, width)
            return
        rows_left = room - len(bottom)
        shown: list[str] = []
        for entry in reversed(self.scrollback):
            rows = _wrap("• ", _visible(entry), width)
            if len(rows) > rows_left:
                if rows_left > 0:  # its end still shows, as in a scrolled transcript
                    shown[:0] = rows[-rows_left:]
                break
            rows_left -= len(rows)
            shown[:0] = rows
        screen = [f"{BANNER} · member {self.member_id} · Ctrl-C quits", *shown, *bottom]
        # Overwrite in place, clearing each row's rest and what is below; a whole-screen
        # clear would push every old frame into tmux's history (scroll-on-clear), where
        # a stale prompt would still be read as the pane's state. Rows are wrapped here,
        # as the real agents do, never by the terminal.
        sys.stdout.write("\x1b[H" + "\x1b[K\r\n".join(screen) + "\x1b[K\x1b[J")
        sys.stdout.flush()

    def draw_inline(self, bottom: list[str], width: int) -> None:
        """--inline: erase the last frame of the box, print the transcript's new rows where
        it was (the terminal scrolls the top rows into its history), draw the box under them."""
        out = ["\r"]
        if self.live_rows > 1:
            out.append(f"\x1b[{self.live_rows - 1}A")
        out.append("\x1b[J")
        if self.flushed == 0 and not self.live_rows:
            out.append(f"{BANNER} · member {self.member_id} · Ctrl-C quits\r\n")
        for entry in self.scrollback[self.flushed :]:
            out.extend(row + "\x1b[K\r\n" for row in _wrap("• ", _visible(entry), width))
        self.flushed = len(self.scrollback)
        out.append("\x1b[K\r\n".join(bottom) + "\x1b[K")
        self.live_rows = len(bottom)
        sys.stdout.write("".join(out))
        sys.stdout.flush()


def _sequence_end(text: str, i: int) -> int | None:
    """Index after the escape sequence at ``text[i]`` (an ESC); None while it may still
    be arriving. A malformed sequence ends before the first byte that cannot belong."""
    n = len(text)
    if i + 1 == n:
        return None
    kind = text[i + 1]
    if kind == "\x1b":
        return i + 1  # the Escape key, followed by another sequence
    if kind == "O":  # SS3: ESC O <key>
        return i + 3 if i + 2 < n else None
    if kind != "[":
        return i + 2  # Alt-<key>
    j = i + 2
    while j < n and " " <= text[j] <= "?":  # parameters and intermediates
        j += 1
    if j == n:
        return None
    return j + 1 if "@" <= text[j] <= "~" else j


def _key_name(sequence: str) -> str:
    if sequence == "\x1b":
        return "escape"
    return "esc" + "".join(ch if " " <= ch <= "~" else f"\\x{ord(ch):02x}" for ch in sequence[1:])


def _control_name(ch: str) -> str:
    if ch == "\t":
        return "tab"
    if ch < " ":
        return "ctrl-" + chr(ord(ch) + 0x40).lower()
    return f"U+{ord(ch):04X}"


def _visible(text: str) -> str:
    """``text`` with control characters shown in caret notation, so that echoing it can
    never drive this terminal."""
    return "".join(
        f"^{chr(ord(ch) ^ 0x40)}"
        if ch < " " or ch == "\x7f"
        else f"<U+{ord(ch):04X}>"
        if "\x80" <= ch <= "\x9f"
        else ch
        for ch in text
    )


def _wrap(first: str, text: str, width: int) -> list[str]:
    """``first`` + ``text`` cut into rows of at most ``width`` columns; rows after the
    first start with two blanks (as claude and codex indent a wrapped message)."""
    import unicodedata

    rows, row, used = [], first, sum(_cells(ch, unicodedata) for ch in first)
    for ch in text:
        cells = _cells(ch, unicodedata)
        if used + cells > width:
            rows.append(row)
            row, used = "  ", 2
        row += ch
        used += cells
    rows.append(row)
    return rows


def _cells(ch: str, unicodedata) -> int:
    if unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in "WF" else 1


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    fd = sys.stdin.fileno()
    if not os.isatty(fd):
        print("Error: the stand-in agent needs a terminal on its standard input.", file=sys.stderr)
        return 2
    agent = _agent(args)
    saved = termios.tcgetattr(fd)
    frozen = _on_signals(agent)
    try:
        tty.setraw(fd)
        agent.draw()
        _serve(agent, fd, frozen)
    except SystemExit:
        pass
    finally:
        try:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)
            sys.stdout.write("\r\n")
            sys.stdout.flush()
        except (termios.error, OSError):
            pass  # the terminal is gone: nothing left to restore
    return 0


def _options(argv: list[str] | None) -> argparse.Namespace:
    """The command line, completed from the pane's environment."""
    parser = argparse.ArgumentParser(prog="python -m cafleet.agents.standin")
    parser.add_argument("--member-id", type=int, required=True)
    parser.add_argument("--record", help="append what arrives here, one JSON object a line")
    parser.add_argument("--auto-reply", action="store_true")
    parser.add_argument("--permission-prompt", action="store_true")
    parser.add_argument(
        "--prompt", default=PROMPT, help='the input line\'s prompt (default "> "; "❯ " looks like claude)'
    )
    parser.add_argument(
        "--enter-guard",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="ignore an Enter arriving this soon after typed text",
    )
    parser.add_argument("--placeholder", default="", help="hint drawn in the empty input line")
    parser.add_argument("--prefill", default="", help="text already typed when it starts")
    parser.add_argument(
        "--startup-clear", action="store_true", help="the first Enter clears the input line instead (claude starting)"
    )
    parser.add_argument(
        "--waiting-for-startup", action="store_true", help="hold every Enter until SIGUSR1 (codex starting)"
    )
    parser.add_argument(
        "--late-startup", action="store_true", help="enter --waiting-for-startup's state at the first key received"
    )
    parser.add_argument(
        "--completion", action="store_true", help="a trailing @word opens a completion that Enter accepts"
    )
    parser.add_argument(
        "--start-delay",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="draw the input box only this long after starting",
    )
    parser.add_argument(
        "--start-gate",
        metavar="PATH",
        help="draw the input box only once this file exists (a test decides when, not a delay)",
    )
    parser.add_argument(
        "--late-echo",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="clear the input line on Enter at once, echo the line into the transcript this much later",
    )
    parser.add_argument(
        "--reply-lines",
        type=int,
        default=0,
        metavar="N",
        help="answer every submitted line with N lines of output, once its echo shows",
    )
    parser.add_argument(
        "--inline",
        action="store_true",
        help="print the transcript above the input box, scrolling into the terminal's history (claude, codex)",
    )
    args = parser.parse_args(argv)
    # `cafleet member create` starts the stand-in with only --member-id; the demo and the
    # tests choose the rest through the pane's environment.
    from cafleet.config import process_environ

    environ = process_environ()
    record_dir = environ.get("CAFLEET_STANDIN_RECORD_DIR")
    if args.record is None and record_dir:
        args.record = os.path.join(record_dir, f"member-{args.member_id}.jsonl")
    if environ.get("CAFLEET_STANDIN_AUTO_REPLY") == "1":
        args.auto_reply = True
    if environ.get("CAFLEET_STANDIN_START_DELAY") and not args.start_delay:
        args.start_delay = float(environ["CAFLEET_STANDIN_START_DELAY"])
    if environ.get("CAFLEET_STANDIN_START_GATE") and not args.start_gate:
        args.start_gate = environ["CAFLEET_STANDIN_START_GATE"]
    return args


def _agent(args: argparse.Namespace) -> StandIn:
    import shlex

    from cafleet.config import process_environ

    return StandIn(
        args.member_id,
        args.record,
        args.auto_reply,
        args.permission_prompt,
        args.enter_guard,
        args.prompt,
        placeholder=args.placeholder,
        prefill=args.prefill,
        startup_clear=args.startup_clear,
        waiting=args.waiting_for_startup,
        completion=args.completion,
        late_startup=args.late_startup,
        late_echo=args.late_echo,
        start_delay=args.start_delay,
        start_gate=args.start_gate,
        reply_lines=max(0, args.reply_lines),
        inline=args.inline,
        command=shlex.split(process_environ().get("CAFLEET_BIN", "")),
    )


def _on_signals(agent: StandIn) -> list[bool]:
    """SIGTERM, SIGHUP and SIGINT end it; SIGUSR1 ends its start-up; SIGUSR2 freezes and
    thaws it (the returned flag)."""
    signal.signal(signal.SIGTERM, _quit)
    signal.signal(signal.SIGHUP, _quit)
    signal.signal(signal.SIGINT, _quit)

    def on_started(_signum: int, _frame: object) -> None:
        agent.started()
        agent.draw()

    signal.signal(signal.SIGUSR1, on_started)
    frozen = [False]

    def on_freeze(_signum: int, _frame: object) -> None:
        frozen[0] = not frozen[0]
        agent.record("frozen" if frozen[0] else "thawed")

    signal.signal(signal.SIGUSR2, on_freeze)
    return frozen


def _serve(agent: StandIn, fd: int, frozen: list[bool]) -> None:
    """Read the terminal and answer it until the agent is done or the terminal goes away."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    while not agent.done:
        if frozen[0]:
            time.sleep(_ESC_WAIT)
            continue
        next_echo = _next_wake(agent)
        wait = _ESC_WAIT if agent.pending else 1.0
        ready, _, _ = select.select([fd], [], [], wait if next_echo is None else min(wait, next_echo))
        if frozen[0] or (not ready and not agent.pending):
            continue
        if not ready:
            agent.flush_escape()
            continue
        try:
            data = os.read(fd, 4096)
        except OSError:  # the terminal went away
            break
        if not data:
            break
        agent.feed(decoder.decode(data))
        if not agent.done:
            agent.draw()


def _next_wake(agent: StandIn) -> float | None:
    """Draw what is due; how long until something else is (None: nothing is)."""
    next_echo = agent.draw_due_echoes()
    if agent.box_at or agent.start_gate is not None:  # redraw when the input box is due
        if not agent.no_box_yet():
            agent.draw()
        elif agent.start_gate is not None:
            next_echo = min(next_echo or 1.0, 0.05)  # look for the gate file again soon
        else:
            next_echo = min(next_echo or 1.0, max(0.0, agent.box_at - time.monotonic()))
    return next_echo


def _quit(_signum: int, _frame: object) -> None:
    raise SystemExit(0)


if __name__ == "__main__":
    raise SystemExit(main())
