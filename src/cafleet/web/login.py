"""The WebUI's secret: a random token made when `cafleet server` starts, and the session
cookie a browser gets for it.

Every API request must carry one or the other, on loopback too: a member is a process of the
same user, and without a secret any local process could read every fleet, answer another
member's dialog or send as the Director through the API. A browser opens the login link
``/login?token=T`` that the server printed; the answer sets the cookie and sends the page to
``/`` (so the token leaves the address bar). A script sends ``Authorization: Bearer T``.

The cookie's value is derived from the token (HMAC-SHA256), so the server keeps no session
table and a restart, which makes a new token, logs every browser out. Its name carries the
port, so two servers on one host name do not overwrite each other's cookie. It is HttpOnly
and SameSite=Strict, and Secure when the public address is https.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from urllib.parse import urlsplit

from starlette.requests import cookie_parser

from cafleet.web.security import host_header

COOKIE = "cafleet_session"
DEFAULT_PORTS = {"http": 80, "https": 443}


def new_token() -> str:
    """256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


class Login:
    """Who may use the API: a holder of the token or of the cookie derived from it."""

    def __init__(self, token: str, port: int | None = None, secure: bool = False) -> None:
        self.token = token
        self.cookie_name = COOKIE if port is None else f"{COOKIE}_{port}"
        self.secure = secure
        self.session = hmac.new(token.encode(), b"cafleet WebUI session", hashlib.sha256).hexdigest()

    def token_matches(self, given: str) -> bool:
        return hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.token.encode())

    def admits(self, cookie_header: str, authorization: str) -> bool:
        """True when the request carries this server's cookie or its token as a bearer."""
        scheme, _, credential = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and credential:
            return self.token_matches(credential.strip())
        value = cookie_parser(cookie_header).get(self.cookie_name)  # Starlette's, as its requests read cookies
        return value is not None and hmac.compare_digest(
            value.encode("utf-8", "surrogateescape"), self.session.encode()
        )


class PublicAddress:
    """``--public URL``: the address people open (a TLS reverse proxy in front of the server).

    Requests forwarded with that Host are answered, a state-changing request from that
    origin is accepted, the login link names it, and https makes the cookie Secure.
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise ValueError("give an http:// or https:// URL with a host name")
        if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("give the site's address alone (no path, query, fragment or user name)")
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError:
            raise ValueError("its port is not a number from 1 to 65535") from None
        self.scheme = parts.scheme
        self.host = host_header(parts.hostname, port)
        default = port == DEFAULT_PORTS[parts.scheme]
        shown = self.host.rsplit(":", 1)[0] if default else self.host
        self.origin = f"{self.scheme}://{shown}"
        self.hosts = frozenset({self.host, shown})

    @property
    def secure(self) -> bool:
        return self.scheme == "https"
