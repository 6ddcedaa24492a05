"""The errors of cafleet's libpq binding, classed by SQLSTATE as psycopg classes them."""

from __future__ import annotations


class Error(Exception):
    sqlstate: str | None = None

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        # A server's words, and libpq's quoting of what a server sent, may hold terminal
        # controls (an escape that retitles the window): shown as escapes, as output is.
        if not message.replace("\n", "").replace("\t", "").isprintable():
            from cafleet.render import display_safe

            message = display_safe(message)
        super().__init__(message)
        self.sqlstate = sqlstate


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class OperationalError(DatabaseError):
    pass


class DataError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


class Missing(OperationalError):
    """libpq itself cannot be loaded."""


# The class of a server error by its SQLSTATE's first two characters, as psycopg maps them.
BY_CLASS: dict[str, type[Error]] = {
    "08": OperationalError,
    "0A": NotSupportedError,
    "20": ProgrammingError,
    "21": ProgrammingError,
    "22": DataError,
    "23": IntegrityError,
    "24": InternalError,
    "25": InternalError,
    "26": InternalError,
    "27": InternalError,
    "28": OperationalError,
    "2B": InternalError,
    "2D": InternalError,
    "2F": InternalError,
    "34": OperationalError,
    "3D": ProgrammingError,
    "3F": ProgrammingError,
    "40": OperationalError,
    "42": ProgrammingError,
    "44": ProgrammingError,
    "53": OperationalError,
    "54": OperationalError,
    "55": OperationalError,
    "57": OperationalError,
    "58": OperationalError,
    "F0": InternalError,
    "P0": InternalError,
    "XX": InternalError,
}


def for_sqlstate(sqlstate: str) -> type[Error]:
    """The class of a server error with ``sqlstate``: by its class (its first two characters)."""
    return BY_CLASS.get(sqlstate[:2], DatabaseError)
