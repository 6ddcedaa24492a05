"""A test-only fault-injection hook: stop a command at a named step so that a test can
SIGKILL it exactly there, with no mocks and no timing guesses.

``CAFLEET_TEST_PAUSE_AT=<point>`` makes the process that reaches :func:`pause_point` with
that name write ``paused <point>`` (one line) to the file named by
``CAFLEET_TEST_PAUSE_FILE`` (appended; stderr when unset) and then sleep until it is
killed. It never returns, so nothing after the point runs. Without the variable a call
is one dictionary lookup: the hook stays in production code at no cost.

The points, in the order a command reaches them (tests/test_crash.py kills at each):

=====================  =========================================================
``send.before_commit``  inside the send's write transaction, row inserted, not committed
``send.after_commit``   the row is committed, its id not printed yet
``drain.locked``        pane-input lock taken and eligibility re-checked, nothing typed
``submit.typed``        the line is typed into the pane, Enter not pressed yet (this one
                        also fires for ``member prompt``, which types through the same code)
``drain.submitted``     the submission is confirmed, ``notified_at`` not stamped yet
``drain.stamped``       ``notified_at`` stamped, the lock not yet released
``ack.before_commit``   inside the ACK's write transaction, row updated, not committed
``ack.after_commit``    the ACK is committed, nothing printed yet
``create.registered``   member and pending placement committed, no pane split yet
``create.worktree_recorded``  (``--worktree``) the worktree's record committed, git not run yet
``create.worktree_added``     (``--worktree``) git made the worktree and branch, no pane yet
``create.split``        the new pane runs the agent, its id not recorded yet
``create.patched``      the pane id is recorded, the lock released, nothing printed yet
``delete.killed``       under the pane lock, the pane is closed, the member not yet
                        deregistered
``wait.empty``          ``message wait`` read its inbox and found nothing, its wait for
                        a change not begun
``watch.round``         ``fleet watch`` found its fleet live and is about to read its
                        members (tests/test_watch.py deletes the fleet right there)
=====================  =========================================================

``CAFLEET_TEST_TRACE=<path>`` is the counting half: each :func:`trace_point` reached appends
its name (one line) to that file, so a test can count how often a loop ran instead of
guessing from CPU time (tests/test_wait_listen.py bounds a quiet wait's checks and reads),
or a name with a message id: the drain appends ``drain.typing <id>`` before each attempt to
type a preview and ``drain.submitted <id>`` once its submission is confirmed, so
tests/test_remote_hosts.py can bound each preview's copies by the attempts that typed it;
the typing itself appends ``submit.typed`` once the line is typed, ``submit.shown`` (or
``submit.not_shown``) when the echo wait in the box ends and ``submit.enter`` before each
Enter, which bench/keeper_real.py time-stamps to say where a delivery's time goes.
Tests also see that a process has reached a wait: ``lock.busy`` is written each time a
try for a pane-input lock finds it held, on either store (tests/test_member_lifecycle.py
starts a member only once ``fleet delete`` is waiting for a lock), and ``store.reconnect``
before each try to reconnect a PostgreSQL store whose sessions the server ended
(tests/test_wait_listen.py and tests/test_watch.py end them only once the command waits,
and count its tries).

``CAFLEET_TEST_TRACE_SQL=<path>`` traces the PostgreSQL store's statements, one line each
(``sql <statement>``), into a file of their own so the counts above stay as they are:
tests/test_postgres.py counts what an open sends to prove a healthy schema is accepted
after one round trip. Read once per connection, so it costs nothing per statement without it.

With ``CAFLEET_TEST_PAUSE_UNTIL=<path>`` as well, the paused process carries on once that
file exists instead of sleeping for good: a test can act exactly while the command stands
at the point (tests/test_wake.py commits a message in the window of ``wait.empty``).

Two of them sit inside the broker's write transactions (``send.before_commit``,
``ack.before_commit``). The broker does no I/O but the database's, and this hook keeps
that true in production: it only acts under the test variable, and then it announces
itself once and sleeps, holding the transaction open the way a process descheduled at
that instant would.
"""

from __future__ import annotations

import os

PAUSE_AT = "CAFLEET_TEST_PAUSE_AT"
PAUSE_FILE = "CAFLEET_TEST_PAUSE_FILE"
PAUSE_UNTIL = "CAFLEET_TEST_PAUSE_UNTIL"
TRACE = "CAFLEET_TEST_TRACE"
TRACE_SQL = "CAFLEET_TEST_TRACE_SQL"


def trace_point(name: str, variable: str = TRACE) -> None:
    """Append ``name`` to the file named by ``CAFLEET_TEST_TRACE`` (or ``variable``);
    without it, one lookup."""
    path = os.environ.get(variable)
    if path:
        with open(path, "a", encoding="utf-8") as trace:
            trace.write(f"{name}\n")


def pause_point(name: str) -> None:
    """Stop here when ``CAFLEET_TEST_PAUSE_AT`` names this point (for good, or until the
    file named by ``CAFLEET_TEST_PAUSE_UNTIL`` exists); else return."""
    if os.environ.get(PAUSE_AT) != name:
        return
    import sys
    import time

    line = f"paused {name}\n"
    path = os.environ.get(PAUSE_FILE)
    if path:
        with open(path, "a", encoding="utf-8") as marker:
            marker.write(line)
    else:
        sys.stderr.write(line)
        sys.stderr.flush()
    release = os.environ.get(PAUSE_UNTIL)
    while True:  # until SIGKILL (or any signal that ends the process), or the release file
        if release and os.path.exists(release):
            return
        time.sleep(0.01 if release else 3600)
