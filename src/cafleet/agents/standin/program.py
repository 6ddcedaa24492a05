"""The stand-in agent's program: its command line (completed from the pane's environment),
its signals, and the loop that reads the terminal and feeds the agent (:mod:`.agent`)."""

from __future__ import annotations

import argparse
import codecs
import os
import select
import signal
import sys
import termios
import time
import tty

from cafleet.agents.standin.agent import PROMPT, StandIn

_ESC_WAIT = 0.05  # how long a lone ESC waits for the rest of a sequence


def main(argv: list[str] | None = None) -> int:
    args = options(argv)
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


def options(argv: list[str] | None) -> argparse.Namespace:
    """The command line, completed from the pane's environment."""
    parser = argparse.ArgumentParser(prog="python -m cafleet.agents.standin")
    _add_core_options(parser)
    _add_behaviours(parser)
    args = parser.parse_args(argv)
    # `cafleet member create` starts the stand-in with only --member-id; the demo and the
    # tests choose the rest through the pane's environment.
    from cafleet.config import process_environ

    _complete_from_environment(args, process_environ())
    return args


def _add_core_options(parser: argparse.ArgumentParser) -> None:
    """Who it is, where it records, and how it answers."""
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


def _add_behaviours(parser: argparse.ArgumentParser) -> None:
    """The behaviours of the real agents that delivery must survive, each off by default."""
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


def _complete_from_environment(args: argparse.Namespace, environ) -> None:
    """The options the pane's environment sets where the command line left them unset."""
    record_dir = environ.get("CAFLEET_STANDIN_RECORD_DIR")
    if args.record is None and record_dir:
        args.record = os.path.join(record_dir, f"member-{args.member_id}.jsonl")
    if environ.get("CAFLEET_STANDIN_AUTO_REPLY") == "1":
        args.auto_reply = True
    if environ.get("CAFLEET_STANDIN_START_DELAY") and not args.start_delay:
        args.start_delay = float(environ["CAFLEET_STANDIN_START_DELAY"])
    if environ.get("CAFLEET_STANDIN_START_GATE") and not args.start_gate:
        args.start_gate = environ["CAFLEET_STANDIN_START_GATE"]


def _agent(args: argparse.Namespace) -> StandIn:
    """The stand-in of ``args``, replying through CAFLEET_BIN (default: this interpreter's
    ``python -m cafleet``)."""
    import shlex

    from cafleet.config import process_environ

    return StandIn(args, shlex.split(process_environ().get("CAFLEET_BIN", "")))


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
