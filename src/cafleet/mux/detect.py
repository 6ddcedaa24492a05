"""Which multiplexer a process runs in (docs/agents.md), and how to reach a stored placement's.

Cheap to import: the backends (and their subprocess use) load only when asked for.
"""

from __future__ import annotations

from cafleet.errors import ConfigError, CorruptRow, MuxError

TYPE_CHECKING = False  # importing typing costs milliseconds on every command
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cafleet.mux.base import Multiplexer

BACKENDS = ("tmux", "herdr")


def detect_backend(environ: Mapping[str, str]) -> str:
    """``CAFLEET_MULTIPLEXER`` wins; else ``HERDR_ENV`` means herdr and ``TMUX`` means tmux.

    An empty ``CAFLEET_MULTIPLEXER`` counts as unset, like the other variables.
    """
    chosen = environ.get("CAFLEET_MULTIPLEXER", "")
    if chosen:
        if chosen not in BACKENDS:
            raise ConfigError(
                f"CAFLEET_MULTIPLEXER={chosen!r} is not a multiplexer; set it to tmux or herdr."
            )
        return chosen
    in_herdr = bool(environ.get("HERDR_ENV"))
    in_tmux = bool(environ.get("TMUX"))
    if in_herdr and in_tmux:
        raise MuxError(
            "both HERDR_ENV and TMUX are set, so the multiplexer is ambiguous; "
            "set CAFLEET_MULTIPLEXER to tmux or herdr."
        )
    if in_herdr:
        return "herdr"
    if in_tmux:
        return "tmux"
    raise MuxError("no multiplexer found; run inside a tmux or herdr session.")


def multiplexer_for_environment(environ: Mapping[str, str], timeout: float = 5.0) -> Multiplexer:
    """The backend of the calling pane, bound to that pane's server and pane id."""
    if detect_backend(environ) == "herdr":
        from cafleet.mux.herdr import Herdr

        return Herdr.from_env(environ, timeout)
    from cafleet.mux.tmux import Tmux

    return Tmux.from_env(environ, timeout)


def multiplexer_for_placement(backend: str, session: str, timeout: float = 5.0) -> Multiplexer:
    """The backend that reaches a stored placement, from any process."""
    if backend == "tmux":
        from cafleet.mux.tmux import Tmux

        return Tmux.from_session(session, timeout)
    if backend == "herdr":
        from cafleet.mux.herdr import Herdr

        return Herdr.from_session(session, timeout)
    raise CorruptRow(f"a placement names the unknown multiplexer backend {backend!r}.")
