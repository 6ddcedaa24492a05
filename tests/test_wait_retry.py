"""`message wait`'s first step, the fleet-wide retry of owed previews, never queues behind
another member's pane: a pane whose lock another process holds is skipped without a word
(its holder is delivering), the caller gets its own messages at once, and the preview
stays owed for the next send, wait or `fleet watch`.

The lock holder is a separate process that never lets go; the wait is run with a lock
timeout far longer than the test allows, so queueing behind the lock would fail the test
by its own bound, not by a measured time.
"""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import subprocess
import sys
import textwrap

import pytest

from cafleet.broker import messages

SESSION = "$0@/nonexistent/socket"  # the placement FleetBuilder records
HOLDER = textwrap.dedent(
    """
    import sys, time
    from cafleet.delivery.keystrokes.lock import pane_lock
    from cafleet.store.engines import lock_space
    with pane_lock(lock_space(sys.argv[1]), "tmux", sys.argv[2], sys.argv[3], timeout=5):
        print("held", flush=True)
        time.sleep(600)
    """
)


@pytest.fixture
def busy_pane(env, db_path):
    """Hold the pane-input lock of pane %5 in another process until the test ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, db_path, SESSION, "%5"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert child.stdout.readline() == "held\n"
        yield child
    finally:
        child.kill()
        child.wait(timeout=10)


def test_wait_skips_a_busy_pane_and_returns_its_own_messages(env, cli, build, store, busy_pane):
    fleet_id, director, _ = build.fleet(members_count=0)
    typed_into = build.member(fleet_id, "busy", pane_id="%5")
    waiter = build.member(fleet_id, "waiter")
    owed = messages.send(store, director, typed_into, "owed while its pane is busy")["message_id"]
    mine = messages.send(store, director, waiter, "for the waiter")["message_id"]
    patient = dict(env, CAFLEET_LOCK_TIMEOUT="3600")  # queueing on the lock would hang, not time out

    waited = subprocess.run(
        [sys.executable, "-m", "cafleet", "message", "wait", str(waiter), "--json"],
        capture_output=True,
        env=patient,
        timeout=60,
    )
    assert (waited.returncode, waited.stderr) == (0, b"")
    assert [r["message_id"] for r in __import__("json").loads(waited.stdout)] == [mine]
    assert busy_pane.poll() is None  # the holder still holds: nothing waited for it
    assert store.execute("SELECT notified_at FROM messages WHERE message_id = ?", (owed,)).fetchone() == (None,)

    # The busy pane's preview stays owed and the next wait retries it once the lock is free.
    busy_pane.kill()
    busy_pane.wait(timeout=10)
    again = cli("message", "wait", str(waiter), "--timeout", "0", environ=patient)
    assert again.code == 0
    assert again.err.startswith(
        f"Warning: message {owed} is stored but member {typed_into} was not notified: tmux pane %5 is gone"
    )
    assert again.err.endswith(  # its pane is gone: no retry can deliver (tests/test_keeper.py, test_l_)
        f"Member {typed_into}'s pane is gone: it waits until `cafleet member revive {typed_into}` starts it again, "
        f"its conversation resumed (when the Director's pane is gone too, `cafleet fleet restore {fleet_id}` from a "
        "new pane), and the fleet keeper then delivers it. Do not resend.\n"
    )


def test_wait_names_every_message_it_could_not_notify(env, cli, build, store):
    """Each not-notified line of wait's retry names the message ids still owed and what
    retries them, like a send's (the fleet keeper when one runs: tests/test_keeper.py)."""
    fleet_id, director, _ = build.fleet(members_count=0)
    gone = build.member(fleet_id, "gone", pane_id="%5")  # on a tmux socket that does not exist
    waiter = build.member(fleet_id, "waiter")
    owed = [messages.send(store, director, gone, f"task {n}")["message_id"] for n in (1, 2)]
    waited = cli("message", "wait", str(waiter), "--timeout", "0")
    assert (waited.code, waited.out) == (3, "")
    [line] = waited.err.splitlines()
    assert line.startswith(
        f"Warning: messages {owed[0]}, {owed[1]} are stored but member {gone} was not notified: tmux pane %5 is gone"
    )
    assert line.endswith(
        f"Member {gone}'s pane is gone: they wait until `cafleet member revive {gone}` starts it again, its "
        f"conversation resumed (when the Director's pane is gone too, `cafleet fleet restore {fleet_id}` from a new "
        "pane), and the fleet keeper then delivers them. Do not resend."
    )
