"""`cafleet server`: serve the admin WebUI, on loopback unless told otherwise.

Starlette and uvicorn are imported inside :func:`server`, so no other command pays for
them. The order is chosen so that every foreseeable failure is a one-line error before
anything listens: settings, then the database diagnosis, then the bind (done here, not by
uvicorn, so a busy port is a clear message); the URL is printed only once the socket
listens.
"""

from __future__ import annotations

import socket

from cafleet.errors import CafleetError, ConfigError, UsageError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    import uvicorn

    from cafleet.cli.context import Context
    from cafleet.web.app import WebConfig

DEFAULT_HOST = "127.0.0.1"


def server(ctx: Context, host, port, allow_remote, public):
    bind_host, where, error = _host(ctx.environ, host)
    bind_port = _port(ctx.settings, port)
    address = _public(ctx.settings, public)
    target = _resolve(bind_host, bind_port, where, error, allow_remote)
    limits = _limits(ctx.settings)
    ctx.store()  # the format diagnosis: a refused file is an error before binding
    from cafleet.delivery import authority

    authority.require_no_member(ctx.store(), ctx.environ, "server")  # its API answers any local process
    ctx.close()
    sock = _listen(bind_host, bind_port, target)
    with sock:
        _serve(ctx, sock, bind_host, bind_port, target.loopback, limits, address)


def _public(settings, flag: str | None):
    """--public, else CAFLEET_PUBLIC_URL (the address notices link to), else None."""
    from cafleet.web.login import PublicAddress

    raw = flag if flag is not None else settings.public_url
    if raw is None:
        return None
    try:
        return PublicAddress(raw)
    except ValueError as exc:  # said without the URL's own text: it may hold a secret
        where, error = ("--public", UsageError) if flag is not None else ("CAFLEET_PUBLIC_URL", ConfigError)
        raise error(f"{where}: {exc}, e.g. https://fleet.example.com.") from None


def _host(environ, flag: str | None) -> tuple[str, str, type]:
    """The host as given (brackets removed), where it came from, and the error type for it."""
    error: type[CafleetError]
    if flag is not None:
        raw, where, error = flag, "--host", UsageError
    else:
        raw, where, error = environ.get("CAFLEET_BROKER_HOST", "") or DEFAULT_HOST, "CAFLEET_BROKER_HOST", ConfigError
    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() or c in "/[]@?#" for c in host):
        raise error(f"{where} must be a host name or IP address, got {raw!r}.")
    return host, where, error


class _Target:
    """The address the server binds: getaddrinfo's first answer for the host."""

    def __init__(self, family, kind, proto, address, loopback: bool) -> None:
        self.family, self.kind, self.proto, self.address, self.loopback = family, kind, proto, address, loopback


def _ip(text: str):
    """The address ``getaddrinfo`` gave, as an ``ipaddress`` object (IPv4-mapped IPv6 as IPv4)."""
    import ipaddress

    ip = ipaddress.ip_address(text.split("%", 1)[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def _resolve(host: str, port: int, where: str, error: type, allow_remote: bool) -> _Target:
    """Judge the host by what it resolves to, never by its spelling.

    ``0``, ``0x0``, ``0.0``, ``::0`` and ``0:0:0:0:0:0:0:0`` all mean "every interface", like
    ``0.0.0.0`` and ``::``: refused, since the server only answers requests that name it. An
    address that is not loopback is refused unless ``--allow-remote`` says so: over plain
    http the login token and cookie would cross the network in clear. Numeric spellings are
    read without any lookup (AI_NUMERICHOST); anything else is a name, resolved once, and
    the address it gives is the one bound.
    """
    try:
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        except socket.gaierror:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise CafleetError(f"cannot resolve host {host!r} ({exc}); check --host or CAFLEET_BROKER_HOST.") from None
    addresses = [_ip(str(info[4][0])) for info in infos]
    for ip in addresses:
        if ip.is_unspecified:
            means = "" if host == str(ip) else f" (it means {ip}, every interface)"
            raise error(
                f"{where} {host} is a wildcard address{means}; give the address or name that browsers will use "
                "(the server only answers requests addressed to it)."
            )
    family, kind, proto, _name, address = infos[0]
    loopback = addresses[0].is_loopback
    if not loopback and not allow_remote:
        raise error(
            f"{where} {host} is not a loopback address ({addresses[0]}); served there over plain http, the login "
            "token and cookie cross the network in clear: serve on loopback behind a TLS proxy with --public URL "
            "(docs/webui.md), or add --allow-remote to serve it there anyway."
        )
    return _Target(family, kind, proto, address, loopback)


def _port(settings, flag: int | None) -> int:
    """--port, else CAFLEET_BROKER_PORT (both bounded by their declarations in cafleet.config)."""
    return settings.broker_port if flag is None else flag


def _listen(host: str, port: int, target: _Target) -> socket.socket:
    """A listening socket on the address ``host`` resolved to."""
    sock = socket.socket(target.family, target.kind, target.proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(target.address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CafleetError(
            f"cannot listen on {_authority(host, port)}: {exc.strerror or exc}; "
            "choose another --port or stop the program using it."
        ) from None
    return sock


def _limits(settings):
    """The request timeout and connection limit (CAFLEET_SERVER_REQUEST_TIMEOUT,
    CAFLEET_SERVER_MAX_CONNECTIONS; the limit is lowered to fit the open-file limit)."""
    from cafleet.web.connections import Limits

    return Limits(request_timeout=settings.server_request_timeout, max_connections=settings.server_max_connections)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _serve(ctx: Context, sock: socket.socket, host: str, port: int, loopback: bool, limits, public) -> None:
    """Run uvicorn on ``sock`` until Ctrl-C or SIGTERM, then return normally (exit 0)."""
    import signal

    from cafleet.web.app import create_app

    config = _web_config(ctx, host, port, loopback, public)
    uv_server = _uvicorn(create_app(config), limits)
    config.stopping = lambda: uv_server.should_exit  # event streams end so shutdown is prompt
    gone: list[Exception] = []

    def database_gone(error: Exception) -> None:  # the file was deleted or replaced: stop serving
        if not gone:
            gone.append(error)
        uv_server.should_exit = True

    config.gone = database_gone
    _announce(ctx, host, port, loopback, public, config.login.token)
    # uvicorn re-raises the signal that stopped it once it has shut down; these handlers
    # absorb that so Ctrl-C and SIGTERM end the command quietly with exit 0.
    previous = {sig: signal.signal(sig, lambda _signum, _frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uv_server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if gone:
        raise gone[0]  # one line, exit 1: the WebUI stopped rather than serve another file


def _web_config(ctx: Context, host: str, port: int, loopback: bool, public) -> WebConfig:
    """What the application needs: the command's settings, the hosts it answers to, and
    a login with a new token."""
    from cafleet.web.app import WebConfig
    from cafleet.web.login import Login, new_token
    from cafleet.web.security import allowed_hosts

    login = Login(new_token(), port, secure=public is not None and public.secure)
    return WebConfig(
        database=ctx.database,
        allowed_hosts=allowed_hosts(host, port, loopback),
        environ=ctx.environ,
        busy_timeout=ctx.busy_timeout,
        max_streams=ctx.settings.server_max_streams,
        settings=ctx.settings,
        login=login,
        public=public,
    )


def _uvicorn(app, limits) -> uvicorn.Server:
    """The uvicorn server for ``app``, with cafleet's connection limits and protocol."""
    import uvicorn

    from cafleet.web.connections import protocol_class

    return uvicorn.Server(
        uvicorn.Config(
            app,
            log_level="warning",
            access_log=False,
            server_header=False,
            proxy_headers=False,
            ws="none",
            http=protocol_class(limits),
            timeout_keep_alive=limits.keepalive_timeout,
            backlog=limits.backlog,
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
    )


def _announce(ctx: Context, host: str, port: int, loopback: bool, public, token: str) -> None:
    """Where the WebUI is served and its login link, after a warning when that is not loopback."""
    if not loopback:
        ctx.err(
            f"Warning: {_authority(host, port)} is not a loopback address; over plain http the login token and "
            "cookie cross the network in clear (docs/webui.md: serve it behind a TLS proxy)."
        )
    local = f"http://{_authority(host, port)}"
    ctx.out(f"serving the cafleet WebUI at {local}/")
    ctx.out(f"log in: {public.origin if public is not None else local}/login?token={token}")
