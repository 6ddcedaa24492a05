"""Request screening for the WebUI: the login, DNS rebinding, cross-site writes, response
headers.

Every ``/api/`` request must carry the server's session cookie or its token
(:mod:`cafleet.web.login`). Beyond that, the server only answers requests that name it by the
address it is bound to (or its ``--public`` address)
(a rebinding attack reaches the loopback port under the attacker's host name, which
fails the ``Host`` check), and a state-changing request must be a same-origin JSON
request (a foreign page can send a "simple" form or text/plain POST without a CORS
preflight, but it can neither set ``Content-Type: application/json`` without one nor
forge ``Origin`` and ``Sec-Fetch-Site``).

Written as plain ASGI middleware so that server-sent event streams pass through untouched.
"""

from __future__ import annotations

import json

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")

SECURITY_HEADERS = (
    (
        b"content-security-policy",
        b"default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
)


def host_header(host: str, port: int) -> str:
    """How a browser writes ``host:port`` in a Host header (IPv6 literals in brackets)."""
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{name}:{port}".lower()


def allowed_hosts(host: str, port: int, loopback: bool) -> frozenset[str]:
    """Host header values this server answers to.

    Bound to loopback: the bound host and any of the loopback spellings a local browser may
    use. Otherwise exactly the bound host. A browser omits ``:80`` for port 80, so both
    forms count there.
    """
    names = (host, *LOOPBACK_NAMES) if loopback else (host,)
    values = {host_header(name, port) for name in names}
    if port == 80:
        values |= {value.rsplit(":", 1)[0] for value in values}
    return frozenset(values)


def json_error(status: int, message: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    body = json.dumps({"error": message}, ensure_ascii=False).encode("utf-8")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return status, headers, body


LOGIN_NEEDED = (
    "refused: log in first: open the login link `cafleet server` printed, or send its token as "
    "Authorization: Bearer TOKEN"
)


class SecurityMiddleware:
    """Refuses requests without the login, foreign hosts and cross-site writes; adds security
    headers to every answer. ``public``: the ``--public`` address (a :class:`PublicAddress`)."""

    def __init__(self, app, allowed: frozenset[str], login, public=None) -> None:
        self.app = app
        self.allowed = allowed | (public.hosts if public is not None else frozenset())
        self.login = login
        self.public = public

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
                return
            status, extra, body = json_error(*refusal)
            await send({"type": "http.response.start", "status": status, "headers": extra + list(SECURITY_HEADERS)})
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                message = dict(message)
                message["headers"] = [
                    *message.get("headers", []),
                    *(h for h in SECURITY_HEADERS if h[0] not in present),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def refusal(self, scope, headers: dict[str, str]) -> tuple[int, str] | None:
        """(status, reason) when the request must not reach the application."""
        host = headers.get("host", "").lower()
        if host not in self.allowed:
            shown = host[:100] or "(none)"
            return 400, f"refused: Host header {shown!r} is not this server's address"
        fetch_site = headers.get("sec-fetch-site")
        cross_site = fetch_site is not None and fetch_site not in ("same-origin", "none")
        if cross_site and (scope.get("path", "").startswith("/api/") or scope.get("method") in STATE_CHANGING):
            return 403, f"refused: {fetch_site} requests are not accepted"
        if scope.get("path", "").startswith("/api/") and not self.login.admits(
            headers.get("cookie", ""), headers.get("authorization", "")
        ):
            return 401, LOGIN_NEEDED
        if scope.get("method") in STATE_CHANGING:
            origin = headers.get("origin")
            if origin is not None and origin.lower() not in self.origins(host):
                return 403, "refused: cross-origin requests may not change state"
            media_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if media_type != "application/json":
                return 415, "refused: send the request body as Content-Type application/json"
        return None

    def origins(self, host: str) -> tuple[str, ...]:
        """The origins a page served under ``host`` has."""
        if self.public is not None and host in self.public.hosts:
            return (self.public.origin,)
        return (f"http://{host}",)


_SCREENED = frozenset({"host", "origin", "content-type", "sec-fetch-site", "cookie", "authorization"})


def _headers(scope) -> dict[str, str]:
    """Request headers by lower-case name.

    A screened header that appears twice becomes "" (which every check refuses), so a
    request cannot show one value to this check and another to the application.
    """
    result: dict[str, str] = {}
    for raw_name, raw_value in scope.get("headers", []):
        name = raw_name.decode("latin-1").lower()
        if name in result:
            if name in _SCREENED:
                result[name] = ""
            continue
        result[name] = raw_value.decode("latin-1")
    return result
