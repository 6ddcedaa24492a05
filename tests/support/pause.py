"""Hold a real command at a named step (a pause point, :mod:`cafleet.faults`) and let it go.

``held(environ, point, *args)`` (the fixture built on :func:`held_commands`) starts ``cafleet *args`` through
the tests' launcher (tests/support/hooked.py) with
``CAFLEET_TEST_PAUSE_AT=point`` and ``CAFLEET_TEST_PAUSE_UNTIL=<file>``, returns
``(proc, release)`` once the command announced that it stands at ``point``, and
``release()`` lets it carry on. A test can thus act exactly inside a window of the command
(for example between `message wait`'s read and its wait) with no timing guess. Any process
still running at teardown is killed by its pid.
"""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.support.hooked import LAUNCHER
from tests.support.tmux_fixtures import wait_for


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test interrupts: SIGINT back to its default. A suite
    started as a background job of a non-interactive shell inherits SIGINT ignored, and a
    command keeps an ignored SIGINT ignored, as background jobs should."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def held_commands(tmp_path):
    """The ``held`` fixture's body (each test module wraps it: ``yield from held_commands(tmp_path)``)."""
    started: list[subprocess.Popen] = []

    def start(environ: dict, point: str, *args: str):
        marker, go = tmp_path / f"paused-{len(started)}", tmp_path / f"release-{len(started)}"
        proc = subprocess.Popen(
            [*LAUNCHER, *args],
            env=dict(
                environ,
                CAFLEET_TEST_PAUSE_AT=point,
                CAFLEET_TEST_PAUSE_FILE=str(marker),
                CAFLEET_TEST_PAUSE_UNTIL=str(go),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=default_sigint,
        )
        started.append(proc)

        def reached():
            if proc.poll() is not None:
                out, err = proc.communicate()
                pytest.fail(f"cafleet {' '.join(args[:2])} exited {proc.returncode} before {point}: {out!r} {err!r}")
            return marker.exists() and marker.read_text(encoding="utf-8") == f"paused {point}\n"

        wait_for(reached, timeout=60, what=f"the command to pause at {point}")
        return proc, go.touch

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
