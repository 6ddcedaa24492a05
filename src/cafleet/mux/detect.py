"""Which multiplexer a process runs in (docs/agents.md), and how to reach a stored placement's.

Cheap to import: the backends (and their subprocess use) load only when asked for.
"""

from __future__ import annotations

from cafleet.errors import MuxError

TYPE_CHECKING = False  # importing typing costs milliseconds on every command
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cafleet.mux.base import Multiplexer

BACKENDS = ("tmux", "herdr")


def detect_backend(environ: Mapping[str, str]) -> str:
    """``CAFLEET_MULTIPLEXER`` wins; else ``HERDR_ENV`` means herdr and ``TMUX`` means tmux.

    An empty ``CAFLEET_MULTIPLEXER`` counts as unset, like the other variables; another
    value than tmux or herdr is refused by its declaration (:mod:`cafleet.config`).
    """
    from cafleet.config import declared

    chosen = declared("CAFLEET_MULTIPLEXER").read(environ)
    if chosen:
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


def multiplexer_for_placement(
    backend: str, session: str, timeout: float = 5.0, environ: Mapping[str, str] | None = None
) -> Multiplexer:
    """The backend that reaches a stored placement, from any process.

    A session ``ssh://[user@]host[:port]/...`` lives on another host and is reached over
    SSH (:mod:`cafleet.mux.ssh`), unless this process runs on that host: member panes
    there have ``CAFLEET_HOST`` set to it. Such a process cannot reach the panes of the
    fleet's home machine (stored without a host), so it is told so instead of typing
    into a same-named socket of its own machine.
    """
    if session.startswith("ssh://"):
        return _remote(backend, session, timeout, environ)
    if _here(environ) and backend in BACKENDS:
        raise MuxError(
            f"this process runs on host {_here(environ)}, and the pane is on the fleet's home "
            "machine; a process there (`cafleet message wait`, `fleet watch`) delivers to it."
        )
    if backend == "tmux":
        from cafleet.mux.tmux import Tmux

        return Tmux.from_session(session, timeout)
    if backend == "herdr":
        from cafleet.mux.herdr import Herdr

        return Herdr.from_session(session, timeout, binary=_environ(environ).get("CAFLEET_HERDR_BIN"))
    from cafleet.mux import damaged

    raise damaged("multiplexer backend", backend, "tmux or herdr")


def check_placement(placement: Mapping) -> None:
    """Every stored value of a concrete placement (backend, session with its host, window,
    pane, identity) against its backend's encoding: DamagedPlacement, in one line, for the
    first that does not match. :func:`multiplexer_for_placement` and the backends'
    ``expect`` check the same values again where they use them."""
    from cafleet.mux import damaged

    backend, session = placement["backend"], placement["session"]
    if backend not in BACKENDS:
        raise damaged("multiplexer backend", backend, "tmux or herdr")
    if backend == "tmux":
        from cafleet.mux import tmux_syntax

        host, rest = None, session
        if session.startswith("ssh://"):  # cafleet.mux.ssh loads only for a placement on another host
            from cafleet.mux.ssh import split_session

            host, rest = split_session(session)
        tmux_syntax.check_session(rest)
        if host is None or placement["window_id"]:  # a member on another host may predate its window id
            tmux_syntax.check_window(placement["window_id"])
        tmux_syntax.check_pane(placement["pane_id"])
        tmux_syntax.check_identity(placement.get("identity"))
    else:
        from cafleet.mux import herdr

        herdr.Herdr.from_session(session)
        herdr.check_id("tab", placement["window_id"])
        herdr.check_id("pane", placement["pane_id"])
        herdr.check_identity(placement.get("identity"))


def _environ(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    """``environ``, else the process's own (a caller with no command context: the WebUI's screens)."""
    if environ is not None:
        return environ
    from cafleet.config import process_environ

    return process_environ()


def _here(environ: Mapping[str, str] | None) -> str:
    from cafleet.config import pane_host

    return pane_host(_environ(environ))


def _remote(backend: str, session: str, timeout: float, environ: Mapping[str, str] | None) -> Multiplexer:
    from cafleet.mux import damaged
    from cafleet.mux.ssh import Ssh, split_session
    from cafleet.mux.tmux import Tmux

    host, rest = split_session(session)
    if host is None:
        raise damaged("session", session, "ssh://[user@]host[:port]/<session>")
    if backend != "tmux":
        raise damaged("multiplexer backend of a placement on another host", backend, "tmux")
    if host == _here(environ):
        return Tmux.from_session(rest, timeout)
    return Tmux.from_session(rest, timeout, remote=Ssh(host, environ))
