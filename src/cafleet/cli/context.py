"""The environment a command runs in: variables, streams, the validated store, the hooks.

Injectable so tests run commands in-process against temporary paths and never touch the
real home, terminal or tmux server. ``hooks`` are the test seam (:mod:`cafleet.faults`):
the null object ``NO_HOOKS``, whose points do nothing, for every command the product
starts; a test's launcher passes its own, and each handler passes them on to the function
it calls (the store this context opens gets them only for its engine's own points).
"""

from __future__ import annotations

import sys

from cafleet import config
from cafleet.faults import NO_HOOKS

TYPE_CHECKING = False  # typing costs milliseconds on every command
if TYPE_CHECKING:
    from collections.abc import Callable

    from cafleet.faults import Hooks
    from cafleet.store.protocol import Store


class Context:
    def __init__(
        self, environ=None, stdin=None, stdout=None, stderr=None, json_output: bool = False, hooks: Hooks = NO_HOOKS
    ) -> None:
        self.environ = config.process_environ() if environ is None else environ
        self.stdin = stdin if stdin is not None else sys.stdin.buffer
        self.stdout = stdout if stdout is not None else sys.stdout.buffer
        self.stderr = stderr if stderr is not None else sys.stderr.buffer
        self.json = json_output
        self.hooks = hooks
        self._store: Store | None = None
        self._database: str | None = None
        self._settings: config.Settings | None = None
        self._scrub: Callable[[str], str] | None = None

    @property
    def settings(self) -> config.Settings:
        """Every checked environment setting, read and bounded once (:mod:`cafleet.config`)."""
        if self._settings is None:
            self._settings = config.Settings(self.environ)
        return self._settings

    @property
    def database(self) -> str:
        """The database location (:func:`cafleet.config.database_location`)."""
        if self._database is None:
            self._database = config.database_location(self.environ)
        return self._database

    def store(self) -> Store:
        """The database connection, diagnosed on first use (docs/storage.md) and reused after."""
        if self._store is None:
            self._store = self.open_store()
        return self._store

    def open_store(self) -> Store:
        """A connection of its own to the same database, opened as :meth:`store` opens its
        one (for a thread of this command: a connection is never shared between threads)."""
        from cafleet.store.engines import open_store

        return open_store(
            self.database,
            self.busy_timeout,
            self.settings.pg_schema,
            self.settings.pg_trusted_owner or "",
            self.hooks,
        )

    @property
    def busy_timeout(self) -> float:
        return self.settings.busy_timeout

    @property
    def max_text_len(self) -> int:
        return self.settings.max_text_len

    def hide_secrets(self, text: str) -> str:
        """``text`` without the database location's password (:mod:`cafleet.credentials`):
        every error and warning line passes here (stdout does not: a message body is
        printed byte for byte). A location that cannot carry one costs a string test, once."""
        if self._scrub is None:
            location = self.environ.get("CAFLEET_DATABASE_URL", "")
            if "@" in location or "password" in location.lower():
                from cafleet.credentials import Scrubber

                self._scrub = Scrubber(location)
            else:
                self._scrub = str
        return self._scrub(text)

    def out(self, text: str) -> None:
        self.stdout.write(text.encode("utf-8", "surrogateescape") + b"\n")
        self.stdout.flush()

    def err(self, text: str) -> None:
        self.stderr.write(self.hide_secrets(text).encode("utf-8", "surrogateescape") + b"\n")
        self.stderr.flush()

    def emit(self, value, text) -> None:
        """Print ``value`` as JSON under --json, else ``text`` (a string or a callable)."""
        if self.json:
            from cafleet.render import to_json

            self.out(to_json(value))
        else:
            rendered = text() if callable(text) else text
            if rendered:
                self.out(rendered)

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
