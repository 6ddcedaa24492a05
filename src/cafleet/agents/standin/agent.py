"""The stand-in agent's state and screen (:class:`StandIn`): what each key does to its input
line, what a submitted line does (an echo, a permission answer, a shell command, an
auto-reply through the real command line), what it records, and how it draws itself."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime

from cafleet.agents.standin.terminal import control_name, key_name, sequence_end, visible, wrap

TYPE_CHECKING = False  # true for the type checker only
if TYPE_CHECKING:
    import argparse

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
_COMMAND_TIMEOUT = 30.0


class StandIn:
    """The stand-in's state and screen; ``feed`` takes decoded input, ``draw`` paints."""

    def __init__(self, options: argparse.Namespace, command: list[str]) -> None:
        """``options``: the command line's (:func:`cafleet.agents.standin.program.options`);
        ``command``: how a reply runs cafleet (CAFLEET_BIN; empty: this interpreter's)."""
        self.command = command or [sys.executable, "-m", "cafleet"]
        self.reply_lines = max(0, options.reply_lines)
        self.inline = options.inline
        self.flushed = 0  # --inline: scrollback entries already printed above the box
        self.live_rows = 0  # --inline: rows the box and what is under the transcript took
        start_delay = options.start_delay
        self.box_at = time.monotonic() + start_delay if start_delay > 0 else 0.0  # when the input box appears
        self.start_gate = options.start_gate  # the input box appears once this file exists (then box_at applies)
        self.late_startup = options.late_startup
        self.late_echo = options.late_echo
        self.echoes_due: list[tuple[float, str]] = []  # (when, line): echoes drawn late
        self.member_id = options.member_id
        self.placeholder = options.placeholder
        self.startup_clear = options.startup_clear
        self.waiting = options.waiting_for_startup
        self.completion = options.completion
        self.prompt = options.prompt
        self.record_path = options.record
        self.auto_reply = options.auto_reply
        self.asking = options.permission_prompt
        self.enter_guard = options.enter_guard
        self.last_typed = 0.0
        self.buffer = options.prefill
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
                end = sequence_end(text, i)
                if end is None:  # incomplete: keep it for the next read
                    self.pending = text[i:]
                    return
                self.record("key", key=key_name(text[i:end]))
                i = end
                continue
            self.key(ch)
            i += 1

    def flush_escape(self) -> None:
        """Nothing followed an ESC in time: it was the Escape key itself."""
        if self.pending:
            self.record("key", key=key_name(self.pending))
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
            self.record("key", key=control_name(ch))
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
                box = wrap(SHELL_PROMPT, visible(self.buffer), width)
            elif self.buffer or not self.placeholder:
                box = wrap(self.prompt, visible(self.buffer), width)
            else:
                box = [f"{self.prompt}\x1b[2m{self.placeholder}\x1b[22m"]
            bottom = [RULE, *box]
            if self.waiting:
                bottom.insert(0, STARTING)
            word = self.mention()
            if word is not None:
                bottom += [f"  ┊ @ {visible(word)}.txt", "  ┊ enter accepts the completion"]
        if self.working:
            bottom.insert(0, WORKING)
        bottom = bottom[-room:]  # a box taller than the screen shows its end
        if self.inline:
            self.draw_inline(bottom, width)
            return
        rows_left = room - len(bottom)
        shown: list[str] = []
        for entry in reversed(self.scrollback):
            rows = wrap("• ", visible(entry), width)
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
            out.extend(row + "\x1b[K\r\n" for row in wrap("• ", visible(entry), width))
        self.flushed = len(self.scrollback)
        out.append("\x1b[K\r\n".join(bottom) + "\x1b[K")
        self.live_rows = len(bottom)
        sys.stdout.write("".join(out))
        sys.stdout.flush()
