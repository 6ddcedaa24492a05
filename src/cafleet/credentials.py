"""The secrets a database location can carry: hidden in every message, kept out of every argv.

libpq takes a password in three spellings cafleet may meet: the userinfo of a URL
(``postgresql://alice:s3cret@db/fleet``), a ``password=`` (or ``sslpassword=``) query
parameter (``postgresql://alice@db/fleet?password=s3cret``) and a ``password=`` keyword of a
keyword/value string (``host=db password='s3 cret'``). :func:`redact` replaces each with
``***`` wherever it appears in a text, and :func:`scrub` also replaces the secret values
themselves (as written and percent-decoded), because libpq quotes pieces of a location in
its own errors (``invalid percent-encoded token: "…"``); a :class:`Scrubber` hides their
percent-encoded and base64 spellings too (what a notice's text may quote). Values shorter than
:data:`MIN_SCRUBBED` characters are hidden only where :func:`redact` finds them: replacing a
two-letter password everywhere would garble every message.

A member's pane gets the URL without its password and a ``passfile=`` parameter naming a
pgpass file (mode 0600, in a folder only this user can enter; libpq reads it for that
connection alone), so no password is ever in an argv (``tmux split-window -e``, ``ssh``,
the remote shell, the agent) where every local user could read it in ``/proc/*/cmdline``.
"""

from __future__ import annotations

import os
import re

from cafleet.errors import ConfigError

MIN_SCRUBBED = 4
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)([^:@/\s]*):([^@/\s]*)@")
_KEYWORD = re.compile(r"(?<![A-Za-z0-9_])((?:ssl)?password)(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^&\s]*)", re.IGNORECASE)
# A URL query parameter whose key is percent-encoded (``pass%77ord=``): libpq decodes the
# key, so it is a password too.
_ENCODED_KEY = re.compile(r"(?<=[?&])([A-Za-z0-9_]*%[0-9A-Fa-f]{2}[A-Za-z0-9_%]*)(=)([^&\s]*)")
PASSFILE_PREFIX = "pgpass-"


def _secret_key(key: str) -> bool:
    """Whether a URL query key, percent-decoded as libpq decodes it, names a password."""
    from urllib.parse import unquote

    return unquote(key).lower() in ("password", "sslpassword")


def redact(text: str) -> str:
    """``text`` with every password it spells (userinfo, query parameter, keyword) as ``***``."""
    if "://" not in text and "password" not in text.lower():
        return text
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{m.group(2)}:***@", text)
    text = _KEYWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)
    if "%" in text:
        text = _ENCODED_KEY.sub(lambda m: f"{m.group(1)}={'***' if _secret_key(m.group(1)) else m.group(3)}", text)
    return text


def secrets(location: str) -> list[str]:
    """The secret values ``location`` carries, as written and percent-decoded, longest first."""
    from urllib.parse import unquote

    found: list[str] = []
    match = _USERINFO.match(location)
    if match:
        found.append(match.group(3))
    for match in _KEYWORD.finditer(location):
        value = match.group(3)
        found.append(value)
        if value.startswith("'"):
            found.append(value.strip("'").replace("\\'", "'").replace("\\\\", "\\"))
    found += [match.group(3) for match in _ENCODED_KEY.finditer(location) if _secret_key(match.group(1))]
    found += [unquote(value) for value in found]
    return sorted({value for value in found if value}, key=len, reverse=True)


def scrub(text: str, location: str | None) -> str:
    """``text`` with ``location``'s secrets hidden, and any password it spells itself."""
    return Scrubber(location)(text)


class Scrubber:
    """:func:`scrub` for one location, its secrets found once (every error and warning
    line of a command passes through one)."""

    __slots__ = ("_secrets",)

    def __init__(self, location: str | None) -> None:
        found = [secret for secret in secrets(location or "") if len(secret) >= MIN_SCRUBBED]
        if found:
            found = _other_spellings(found, location or "")
        self._secrets = found

    def __call__(self, text: str) -> str:
        text = redact(text)
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text


def _other_spellings(found: list[str], location: str) -> list[str]:
    """``found`` and the other ways a text may spell each secret: percent-encoded (upper and
    lower case hex), base64 (standard and URL-safe, unpadded), and HTTP Basic's base64 of
    ``user:secret`` when the location names its user; longest first."""
    import base64
    from urllib.parse import quote, unquote, urlsplit

    try:  # a file path has no user name
        user = unquote(urlsplit(location).username or "")
    except ValueError:
        user = ""
    forms = set(found)
    for secret in found:
        encoded = quote(secret, safe="")
        forms.update((encoded, re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded)))
        for raw in (secret, f"{user}:{secret}" if user else ""):
            if raw:
                data = raw.encode("utf-8", "surrogatepass")
                forms.update(
                    (base64.b64encode(data).decode().rstrip("="), base64.urlsafe_b64encode(data).decode().rstrip("="))
                )
    return sorted((form for form in forms if len(form) >= MIN_SCRUBBED), key=len, reverse=True)


# --- the URL a member's pane gets ---------------------------------------------------------


def split_password(url: str) -> tuple[str, str | None]:
    """(the URL without its password, the password or None) for a ``postgresql://`` URL.

    A password in the userinfo and a ``password`` query parameter are both taken out (the
    query one wins, as libpq's does); an ``sslpassword`` cannot go into a pgpass file, so
    such a URL is refused for members."""
    from urllib.parse import unquote

    password: str | None = None
    match = _USERINFO.match(url)
    if match:
        password = unquote(match.group(3))
        url = f"{match.group(1)}{match.group(2)}@" + url[match.end() :]
    base, sep, query = url.partition("?")
    if not sep:
        return url, password
    kept = []
    for item in query.split("&"):
        key, _, value = item.partition("=")
        key = unquote(key) if _secret_key(key) else key
        if key == "sslpassword":
            raise ConfigError(
                "the database URL carries sslpassword=, which a member's pane could only get through its "
                "process arguments, readable by every local user; use a client key without a passphrase."
            )
        if key == "password":
            password = unquote(value)
        elif item:
            kept.append(item)
    return base + ("?" + "&".join(kept) if kept else ""), password


def pgpass_line(password: str) -> str:
    """One pgpass line matching any connection that names the file (``passfile=``)."""
    return "*:*:*:*:" + password.replace("\\", "\\\\").replace(":", "\\:") + "\n"


def passfile_name(url: str) -> str:
    """The pgpass file's name for a URL: one per database location and password."""
    import hashlib

    return PASSFILE_PREFIX + hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def with_passfile(url: str, path: str) -> str:
    """``url`` naming ``path`` as its pgpass file."""
    from urllib.parse import quote

    return f"{url}{'&' if '?' in url else '?'}passfile={quote(path, safe='/')}"


def private_dir(environ) -> str:
    """``$XDG_RUNTIME_DIR/cafleet`` (else ``$HOME/.cache/cafleet``), created 0700; refused
    when another user owns it or can enter it."""
    import stat

    runtime = environ.get("XDG_RUNTIME_DIR", "")
    home = environ.get("HOME", "")
    if runtime and os.path.isabs(runtime):
        folder = os.path.join(runtime, "cafleet")
    elif home and os.path.isabs(home):
        folder = os.path.join(home, ".cache", "cafleet")
    else:
        raise ConfigError("neither XDG_RUNTIME_DIR nor HOME is an absolute path, so there is no private folder.")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        info = os.lstat(folder)
    except OSError as error:
        raise ConfigError(f"cannot use {folder} for a member's database password ({error.strerror}).") from None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise ConfigError(
            f"{folder} is not a private folder of this user, so it cannot hold a database password; remove it."
        )
    return folder


def write_private(folder: str, name: str, content: str) -> str:
    """Write ``content`` to ``folder/name`` (mode 0600, replaced atomically); its path."""
    path = os.path.join(folder, name)
    temporary = f"{path}.{os.getpid()}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(temporary, path)
    except OSError as error:
        raise ConfigError(f"cannot write {path} ({error.strerror}).") from None
    return path
