"""Everything that acts on a member's pane, combining the broker with the multiplexers, in
rooms by job: ``keystrokes`` (the preview, the pane-input lock, reading a screen, the
submission, the send path's drain, a dialog and its answer), ``supervision`` (members'
states, the fleet keeper, notices, ``fleet watch``, revivals), ``spawning`` (member
creation and deletion, layout and room, restore); beside them ``execs`` (commands run in a
member's pane), ``worktrees``, ``inbox`` (wait and listen), ``usage`` and ``authority``
(who runs a command). The layer reads and writes the database only through the broker,
never with its own SQL (docs/architecture.md)."""
