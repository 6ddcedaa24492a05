"""The tests' launcher: run cafleet's command line with test hooks (:mod:`cafleet.faults`).

``python -m tests.support.hooked ARGS...`` (spelled :data:`LAUNCHER`, which also works from
any folder) runs ``cafleet ARGS...`` exactly as ``python -m cafleet`` does, with hooks built
from its own variables; the product's entry point reads none of them, so only a command
started here can pause or trace:

``CAFLEET_TEST_PAUSE_AT=<point>``
    the command writes ``paused <point>`` (one line) to ``CAFLEET_TEST_PAUSE_FILE``
    (appended; stderr when unset) on reaching the point and sleeps until it is killed, or,
    with ``CAFLEET_TEST_PAUSE_UNTIL=<path>``, until that file exists.
``CAFLEET_TEST_TRACE=<path>``
    each trace point reached appends its name (one line) to that file.
``CAFLEET_TEST_TRACE_SQL=<path>``
    each statement a PostgreSQL store sends appends ``sql <statement>`` (one line) there.

The launcher takes these out of its environment before the command runs, so nothing the
command starts (a member's pane, ssh to another host, git) inherits them; the fleet keeper
it starts runs through this launcher again (the hooks' ``program``) with the two traces as
options (``--trace=PATH``, ``--trace-sql=PATH``, before the command's arguments) and no
pause: a test's pause is its own command's.

:func:`context` gives an in-process command (tests/support/load_workers.py) the same hooks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from cafleet.faults import Hooks

ROOT = str(Path(__file__).resolve().parents[2])
PAUSE_AT = "CAFLEET_TEST_PAUSE_AT"
PAUSE_FILE = "CAFLEET_TEST_PAUSE_FILE"
PAUSE_UNTIL = "CAFLEET_TEST_PAUSE_UNTIL"
TRACE = "CAFLEET_TEST_TRACE"
TRACE_SQL = "CAFLEET_TEST_TRACE_SQL"
VARIABLES = (PAUSE_AT, PAUSE_FILE, PAUSE_UNTIL, TRACE, TRACE_SQL)
_BOOT = f"import sys; sys.path.insert(0, {ROOT!r}); from tests.support.hooked import main; raise SystemExit(main())"
LAUNCHER = (sys.executable, "-c", _BOOT)  # argv prefix: the launcher, from any folder


class FileHooks(Hooks):
    """Pause and trace points that act, configured by paths (see the module's text)."""

    def __init__(
        self,
        pause_at: str | None = None,
        pause_file: str | None = None,
        pause_until: str | None = None,
        trace: str | None = None,
        trace_sql: str | None = None,
    ) -> None:
        self.pause_at = pause_at
        self.pause_file = pause_file
        self.pause_until = pause_until
        self.trace_file = trace
        self.sql_file = trace_sql
        self.trace_sql = self._sql if trace_sql else None  # type: ignore[assignment]
        options = [f"--trace={trace}"] if trace else []
        options += [f"--trace-sql={trace_sql}"] if trace_sql else []
        self.program = (*LAUNCHER, *options)

    def pause(self, name: str) -> None:
        if name != self.pause_at:
            return
        import time

        line = f"paused {name}\n"
        if self.pause_file:
            with open(self.pause_file, "a", encoding="utf-8") as marker:
                marker.write(line)
        else:
            sys.stderr.write(line)
            sys.stderr.flush()
        release = self.pause_until
        while True:  # until SIGKILL (or any signal that ends the process), or the release file
            if release and os.path.exists(release):
                return
            time.sleep(0.01 if release else 3600)

    def trace(self, name: str) -> None:
        if self.trace_file:
            with open(self.trace_file, "a", encoding="utf-8") as trace:
                trace.write(f"{name}\n")

    def _sql(self, query: str) -> None:
        assert self.sql_file is not None
        with open(self.sql_file, "a", encoding="utf-8") as trace:
            trace.write("sql " + " ".join(query.split()) + "\n")


def cafleet_argv(environ) -> list[str]:
    """How a test runs cafleet with ``environ``: through the launcher when it sets a hook
    variable, else as a user does (``python -m cafleet``)."""
    if any(environ.get(name) for name in VARIABLES):
        return list(LAUNCHER)
    return [sys.executable, "-m", "cafleet"]


def take_hooks(environ=None, trace: str | None = None, trace_sql: str | None = None) -> FileHooks:
    """Hooks from the launcher's variables in ``environ`` (the process's own by default),
    which are removed from it so that no child the command starts inherits them."""
    environ = os.environ if environ is None else environ
    found = {name: environ.pop(name, "") or None for name in VARIABLES}
    return FileHooks(
        found[PAUSE_AT], found[PAUSE_FILE], found[PAUSE_UNTIL], trace or found[TRACE], trace_sql or found[TRACE_SQL]
    )


_PROCESS_HOOKS: list[FileHooks] = []  # this process's, taken once (the variables leave on the first take)


def context(**kwargs):
    """A :class:`cafleet.cli.context.Context` with the hooks of this process's variables
    (the same hooks for every context of the process)."""
    from cafleet.cli.context import Context

    if not _PROCESS_HOOKS:
        _PROCESS_HOOKS.append(take_hooks())
    return Context(hooks=_PROCESS_HOOKS[0], **kwargs)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    options = {}
    while args and args[0].startswith(("--trace=", "--trace-sql=")):
        key, _, value = args.pop(0).partition("=")
        options[key] = value
    hooks = take_hooks(trace=options.get("--trace"), trace_sql=options.get("--trace-sql"))
    from cafleet.cli.context import Context
    from cafleet.cli.main import main as cafleet_main

    return cafleet_main(args, Context(hooks=hooks))


if __name__ == "__main__":
    raise SystemExit(main())
