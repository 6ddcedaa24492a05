"""Every setting cafleet reads: declared once, read and bounded in one place.

The declarations (:mod:`cafleet.config.declarations`) name each environment variable
(``CAFLEET_*``) and numeric option (``--interval``), its kind, default, bounds and meaning
(:mod:`cafleet.config.setting`); the README's configuration table is generated from them
(``python -m cafleet.config --markdown``, :mod:`cafleet.config.readme_table`).

This module reads the environment: a command builds one :class:`Settings` from it before
its handler runs, so a bad value is refused before anything is stored: a one-line usage
error (exit 2) naming the variable, the value and the allowed range. An empty variable
counts as unset. The readers beside it (the database's location, the pane's variables,
the worktree folder) serve code handed only an environment.

Plain classes and no imports beyond ``os`` and the error types: this package is on every
command's path, and hot commands are measured against a bare interpreter start.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from typing import Any

from cafleet.config.declarations import (  # noqa: F401 -- the declarations' face
    DATABASE_FILENAME,
    DEFAULT_SUBMIT_SETTLE,
    ENVIRONMENT,
    declared,
    declared_names,
    option,
)
from cafleet.errors import ConfigError, SettingError, shown


class Settings:
    """Every checked environment setting of one command, read and bounded at once, and the
    environment they came from.

    Built once per command before its handler runs (:attr:`cafleet.cli.context.Context.settings`;
    once per process for the WebUI's server and the fleet keeper) and passed down, so a bad
    value refuses the command before anything is stored or typed, and nothing below reads
    the environment again. ``environ`` stays for what is not a setting: the agents' own
    folders (``HOME``, ``CLAUDE_CONFIG_DIR``...) and the environment of child processes
    (:func:`child_environ`).
    """

    __slots__ = (*(s.attr for s in ENVIRONMENT if s.checked), "environ", "_database")

    def __init__(self, environ, database: str | None = None) -> None:
        self.environ = environ
        self._database = database  # given when the caller already chose the database (the WebUI's server)
        for setting in ENVIRONMENT:
            if setting.checked:
                setattr(self, setting.attr, setting.read(environ))

    @property
    def database(self) -> str:
        """The database location (:func:`database_location`: a SQLite file's resolved path
        or a PostgreSQL URL), read on first use: a command that needs no database works
        without one. Only the store package (:mod:`cafleet.store`) tells which it is."""
        if self._database is None:
            self._database = database_location(self.environ)
        return self._database

    @property
    def database_url(self) -> str:
        """``CAFLEET_DATABASE_URL`` as given, before :attr:`database` resolves it ("" when
        unset): the text whose password a scrubber hides."""
        return database_url(self.environ)

    @property
    def host(self) -> str:
        """``CAFLEET_HOST``: the host this member's pane runs on ("" unless on another host)."""
        return pane_host(self.environ)

    @property
    def member_id(self) -> str:
        """``CAFLEET_MEMBER_ID`` as set, stripped ("" when unset): the member this pane was
        started for, a claim that :mod:`cafleet.delivery.authority` checks."""
        return pane_member_id(self.environ)

    if TYPE_CHECKING:  # the attributes are the declarations' names, set above

        def __getattr__(self, name: str) -> Any: ...


# The variables cafleet sets in a member's pane (audience "pane") and the database's location
# as given, read by their declarations: :class:`Settings` offers them as properties, and code
# handed only an environment (a multiplexer's, the caller's identity) reads them here.


def _text(environ, name: str) -> str:
    return declared(name).read(environ) or ""


def database_url(environ) -> str:
    """``CAFLEET_DATABASE_URL`` as given ("" when unset) (:attr:`Settings.database_url`)."""
    return _text(environ, "CAFLEET_DATABASE_URL")


def pane_host(environ) -> str:
    """``CAFLEET_HOST`` ("" when unset) (:attr:`Settings.host`)."""
    return _text(environ, "CAFLEET_HOST")


def pane_member_id(environ) -> str:
    """``CAFLEET_MEMBER_ID``, stripped ("" when unset) (:attr:`Settings.member_id`)."""
    return _text(environ, "CAFLEET_MEMBER_ID").strip()


def process_environ():
    """The process's own environment: the one place cafleet reads ``os.environ``. A command
    reads it once, into its context (:class:`cafleet.cli.context.Context`); code below the
    command takes the mapping (or :class:`Settings`) it is given."""
    return os.environ


def child_environ(environ=None, drop=(), **overrides: str) -> dict[str, str]:
    """The environment of a child process cafleet starts (a pane's command, ssh, git, the
    multiplexer's client, the fleet keeper): ``environ`` (the process's own when None)
    copied, without the names in ``drop``, with ``overrides``."""
    base = os.environ if environ is None else environ
    env = {key: value for key, value in base.items() if key not in drop}
    env.update(overrides)
    return env


# --- readers used by the library (each goes through the declarations) ---------------------


def database_location(environ) -> str:
    """The database chosen by ``CAFLEET_DATABASE_URL`` or the XDG default: a file's resolved
    path, or a ``postgresql://`` URL passed through as it is.

    Accepted: ``sqlite:///ABS/PATH`` (``sqlite:////abs/path`` too), a plain absolute path or
    a PostgreSQL URL.
    """
    url = environ.get("CAFLEET_DATABASE_URL", "")
    if url:
        if is_postgres(url):
            return url  # given to libpq as it is (PG* variables and ~/.pgpass fill in the rest)
        if url.startswith("sqlite:///"):
            rest = url[len("sqlite://") :]
            if rest == "/" or "?" in rest:
                raise ConfigError(
                    f"CAFLEET_DATABASE_URL {_shown_location(url)} must be sqlite:///ABS/PATH with a file path and no query string."
                )
            if not rest.startswith("//"):  # sqlite:///relative.db, sqlite:///~/x.db
                raise ConfigError(
                    f"CAFLEET_DATABASE_URL {_shown_location(url)} names a relative path; use sqlite:///ABS/PATH "
                    "(for example sqlite:////home/me/cafleet.db) or an absolute file path."
                )
            return resolved("/" + rest.lstrip("/"))
        if os.path.isabs(url):
            return resolved(url)
        raise ConfigError(
            f"CAFLEET_DATABASE_URL {_shown_location(url)} is not supported; use sqlite:///ABS/PATH, an absolute file path "
            "or postgresql://..."
        )
    return resolved(os.path.join(_data_home(environ, "CAFLEET_DATABASE_URL"), "cafleet", DATABASE_FILENAME))


def _data_home(environ, instead: str) -> str:
    """``$XDG_DATA_HOME``, else ``$HOME/.local/share``; a ConfigError naming ``instead``, the
    setting that avoids needing either, when neither is an absolute path."""
    data_home = environ.get("XDG_DATA_HOME", "")
    if data_home and not os.path.isabs(data_home):
        raise ConfigError(f"XDG_DATA_HOME {shown(data_home)} must be an absolute path.")
    if not data_home:
        home = environ.get("HOME", "")
        if not home or not os.path.isabs(home):
            raise ConfigError(f"HOME is not set to an absolute path; set {instead} to an absolute path.")
        data_home = os.path.join(home, ".local", "share")
    return data_home


def worktree_dir(environ) -> str:
    """The folder that holds members' worktrees (CAFLEET_WORKTREE_DIR), resolved."""
    given = environ.get("CAFLEET_WORKTREE_DIR", "")
    if given:
        if not os.path.isabs(given):
            raise ConfigError(f"CAFLEET_WORKTREE_DIR {shown(given)} must be an absolute path.")
        return resolved(given)
    return resolved(os.path.join(_data_home(environ, "CAFLEET_WORKTREE_DIR"), "cafleet", "worktrees"))


def resolved(path: str) -> str:
    """``path`` with every symbolic link and ``..`` resolved as the kernel resolves them:
    ``link/..`` is the parent of the link's target, not the folder holding the link (a
    textual ``normpath`` would open another file). The database's side files are then
    named beside the file SQLite really opens (it resolves a link to the file itself),
    which is where the diagnosis and the damaged-log check look for them. A folder that
    does not exist yet (cafleet creates it) is taken as written."""
    return os.path.realpath(path)


def _shown_location(url: str) -> str:
    """A database location as an error quotes it: cut short, its password hidden."""
    from cafleet.credentials import redact

    return shown(redact(url))


def is_postgres(url: str) -> bool:
    return url.startswith(("postgresql://", "postgres://"))


def debug(environ) -> bool:
    """``CAFLEET_DEBUG``; on an error path a bad value counts as off."""
    try:
        return declared("CAFLEET_DEBUG").read(environ)
    except SettingError:
        return False
