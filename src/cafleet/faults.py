"""The test seam: named pause and trace points, reached through one hooks object.

Every command's context (:class:`cafleet.cli.context.Context`) carries its hooks (a
:class:`Hooks`, never None) and passes them, as an argument, to the function it calls;
each point reaches them through the arguments of its callers (``hooks=``, whose default is
:data:`NO_HOOKS`). The store is no carrier: its interface is only about data (a PostgreSQL
store is opened with the hooks for its own points, ``store.wait`` and the SQL trace). The product's own entry point
(``python -m cafleet``, the ``cafleet`` script) has the null object :data:`NO_HOOKS`: a
point is then one call of a method that does nothing (no guard anywhere), and no variable
of the environment can make a command pause or write a trace. Tests start commands through their own launcher
(``python -m tests.support.hooked``, docs/testing.md), which builds hooks that act and
runs cafleet's main with them.

``pause(name)`` stops the command at the point so that a test can SIGKILL it exactly there
(or act while it stands there, then let it carry on), with no mocks and no timing guesses.

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
``keep.started``        ``fleet keep`` holds its fleet's lock and logged that it started,
                        its loop not begun (tests/test_keeper.py sends SIGTERM there)
``watch.round``         ``fleet watch`` found its fleet live and is about to read its
                        members (tests/test_watch.py deletes the fleet right there)
=====================  =========================================================

``trace(name)`` is the counting half: a test counts how often a loop ran instead of
guessing from CPU time (tests/test_wait_listen.py bounds a quiet wait's checks, ``changes.check``, and
reads, ``wait.read``), or a name with a message id: the drain traces ``drain.typing <id>`` before each
attempt to type a preview and ``drain.submitted <id>`` once its submission is confirmed, so
tests/test_remote_hosts.py can bound each preview's copies by the attempts that typed it;
the typing itself traces ``submit.typed`` once the line is typed, ``submit.shown`` (or
``submit.not_shown``) when the echo wait in the box ends and ``submit.enter`` before each
Enter, which bench/keeper_real.py time-stamps to say where a delivery's time goes.
Tests also see that a process has reached a wait: ``lock.busy`` each time a try for a
pane-input lock finds it held, on either store (tests/test_member_lifecycle.py starts a
member only once ``fleet delete`` is waiting for a lock), ``store.wait`` each time a
PostgreSQL change waiter waits, and ``store.reconnect`` before each try to reconnect a
PostgreSQL store whose sessions the server ended (tests/test_wait_listen.py and
tests/test_watch.py end them only once the command waits, and count its tries).

``trace_sql`` (None for :data:`NO_HOOKS`) is given each statement a PostgreSQL store sends
(tests/test_postgres.py counts what an open sends to prove a healthy schema is accepted
after one round trip); it is looked at once per connection, so it costs nothing per
statement without hooks.

``program`` is how this process runs cafleet again (the fleet keeper it starts): the
launcher's hooks name the launcher, so a hooked command's keeper is hooked too (it traces,
and never pauses: a test's pause is its own command's), and an unhooked one's never is.

Two points sit inside the broker's write transactions (``send.before_commit``,
``ack.before_commit``). The broker does no I/O but the database's, and these keep that true
in production: with :data:`NO_HOOKS` they do nothing; a test's pause holds the transaction open
the way a process descheduled at that instant would.
"""

from __future__ import annotations

import sys

PROGRAM = (sys.executable, "-m", "cafleet")  # how a process without hooks runs cafleet again


class Hooks:
    """The hooks' interface, doing nothing: :data:`NO_HOOKS` is the product's; tests subclass
    it (tests/support/hooked.py)."""

    trace_sql = None  # a callable taking each statement a PostgreSQL store sends, or None
    program: tuple[str, ...] = PROGRAM

    def pause(self, name: str) -> None:
        """Stop here while the hooks say so."""

    def trace(self, name: str) -> None:
        """Count ``name``."""


NO_HOOKS = Hooks()  # every command the product starts: each point is a call that does nothing
