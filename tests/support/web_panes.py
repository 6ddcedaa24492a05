"""Member panes for the WebUI screen tests: a fleet registered straight through the broker
whose members run in a private tmux server (the stand-in agent by default), and a shell
line that draws a hostile screen."""

from __future__ import annotations

import sys

import pytest

from cafleet.broker import fleets, members
from tests.support.tmux_fixtures import wait_for

STANDIN = [sys.executable, "-m", "cafleet.agents.standin"]
HOSTILE = (
    "printf '\\033]52;c;cHduZWQ=\\007'; "  # OSC 52: write the clipboard
    "printf '\\033]0;pwned title\\007'; "  # OSC 0: window title
    "printf '\\033]8;;http://evil.example/\\033\\\\link\\033]8;;\\033\\\\\\n'; "  # OSC 8 hyperlink
    "printf '<script>window.__pwned=1</script>\\n'; "
    "printf '<img src=x onerror=\"window.__pwned=2\">\\n'; "
    "printf '\\033[31mred alert\\033[0m plain\\n'; "
    "printf '\\033Ptmux;evil\\033\\\\ after-dcs\\n'; "
    "exec sleep 600"
)


@pytest.fixture
def panes(env, tmux_server, store):
    """A fleet on the private tmux server; ``add(name, argv, identity=True)`` makes a member
    whose pane runs ``argv`` (the stand-in by default)."""
    director_pane = tmux_server.main_pane()
    session = (
        f"{tmux_server.run('display-message', '-p', '-t', director_pane, '#{session_id}').strip()}@{tmux_server.socket}"
    )
    record = fleets.create_fleet(
        store,
        name="screens",
        coding_agent="standin",
        backend="tmux",
        session=session,
        window_id="@0",
        pane_id=director_pane,
    )
    fleet_id = record["fleet_id"]

    def add(name, argv=None, identity=None, ready="cafleet stand-in agent", agent="standin"):
        member_id = members.register_member(
            store,
            fleet_id=fleet_id,
            name=name,
            description=name,
            backend="tmux",
            session=session,
            window_id="@0",
            coding_agent=agent,
        )
        pane = tmux_server.new_pane(argv or [*STANDIN, "--member-id", str(member_id)])
        real = tmux_server.run("display-message", "-p", "-t", pane, "#{pid}:#{start_time}:#{pane_pid}").strip()
        members.set_pane_id(store, member_id, pane, identity or real)
        if ready:
            wait_for(lambda: ready in tmux_server.run("capture-pane", "-p", "-t", pane), what=f"{name} ready")
        return member_id, pane

    return {"fleet_id": fleet_id, "director": record["director_member_id"], "add": add, "session": session}
