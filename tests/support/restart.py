"""A tmux server that dies under a fleet, and a new one in its place (a reboot's case):
shared by the restore and placement tests."""

from __future__ import annotations

import os
import signal

from tests.support.pane_fleet import PaneFleet
from tests.support.recorder import READY
from tests.support.tmux_fixtures import RECORDER, running_tmux_server, wait_for


def new_server(fleet: PaneFleet, tmp_path, stack, same_socket: bool = True) -> dict:
    """A new private tmux server (the old one is dead) whose first pane runs the byte
    recorder: the environment a command typed there sees. ``same_socket``: on the dead
    server's socket, as after a reboot (its session and pane ids start again at $0 and %0,
    the ids the dead placements hold); else on a socket of its own."""
    import sys

    recorder = (sys.executable, str(RECORDER), str(tmp_path / "new.bytes"))
    name = fleet.server.name if same_socket else None
    server = stack.enter_context(running_tmux_server(fleet.server.env, command=recorder, name=name))
    pane = server.main_pane()
    wait_for(lambda: READY in server.run("capture-pane", "-p", "-t", pane), what="the recorder")
    fleet.new_server = server
    return dict(fleet.environ, **server.environ_for(pane))


def kill_server(fleet: PaneFleet) -> None:
    """The tmux server dies under the fleet (as at a reboot or an OOM kill)."""
    os.kill(fleet.server.pid, signal.SIGKILL)
    wait_for(
        lambda: not os.path.exists(f"/proc/{fleet.server.pid}/stat") or _zombie(fleet.server.pid), what="tmux to die"
    )


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
