"""The one environment-isolation helper: a copy of ``os.environ`` without anything that
would reach the user's multiplexer, database, agents or XDG folders, rooted in a test's
own home."""

from __future__ import annotations

import os
from pathlib import Path

# Variables a test never inherits: cafleet's settings, the multiplexers' (a test must not
# find the user's tmux or herdr), the XDG folders and the coding agents' own.
ISOLATED_PREFIXES = ("CAFLEET_", "TMUX", "HERDR", "XDG_", "CLAUDE_", "CODEX_", "OPENCODE_")


def isolated_environ(home: Path, **extra: str) -> dict[str, str]:
    """``os.environ`` without the isolated variables, with HOME and every XDG folder under
    ``home`` (created), a UTF-8 locale, the fleet keeper off, and ``extra`` on top.

    The keeper is off because a resident process delivering beside a test's own commands
    would change what the test observes and could outlive it; the keeper's own tests turn
    it on (``CAFLEET_KEEPER=on``) and end every keeper they start (docs/testing.md)."""
    home.mkdir(parents=True, exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(ISOLATED_PREFIXES)}
    environ["CAFLEET_KEEPER"] = "off"
    environ.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local" / "share"),
        XDG_STATE_HOME=str(home / ".local" / "state"),
        XDG_CACHE_HOME=str(home / ".cache"),
        LANG="C.UTF-8",
        LC_ALL="C.UTF-8",
        **extra,
    )
    return environ
