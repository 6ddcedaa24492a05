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

DEFAULT_HOST = "127.0.0.1"
WILDCARDS = ("0.0.0.0", "::")


def server(ctx, host, port):
    bind_host = _host(ctx.environ, host)
    bind_port = _port(ctx.settings, port)
    ctx.store()  # §2.1 diagnosis: a refused file is an error before binding
    ctx.close()
    sock, loopback = _listen(bind_host, bind_port)
    with sock:
        _serve(ctx, sock, bind_host, bind_port, loopback)


def _host(environ, flag: str | None) -> str:
    if flag is not None:
        raw, where, error = flag, "--host", UsageError
    else:
        raw, where, error = environ.get("CAFLEET_BROKER_HOST", "") or DEFAULT_HOST, "CAFLEET_BROKER_HOST", ConfigError
    host = raw.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or any(c.isspace() or c in "/[]@?#" for c in host):
        raise error(f"{where} must be a host name or IP address, got {raw!r}.")
    if host in WILDCARDS:
        raise error(
            f"{where} {host} is a wildcard address; give the address or name that browsers will use "
            "(the server only answers requests addressed to it)."
        )
    return host


def _port(settings, flag: int | None) -> int:
    """--port, else CAFLEET_BROKER_PORT (both bounded by their declarations in cafleet.config)."""
    return settings.broker_port if flag is None else flag


def _listen(host: str, port: int) -> tuple[socket.socket, bool]:
    """A listening socket on the first address ``host`` resolves to, and whether it is loopback."""
    import ipaddress

    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as exc:
        raise CafleetError(f"cannot resolve host {host!r} ({exc}); check --host or CAFLEET_BROKER_HOST.") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CafleetError(
            f"cannot listen on {_authority(host, port)}: {exc.strerror or exc}; "
            "choose another --port or stop the program using it."
        ) from None
    return sock, ipaddress.ip_address(address[0].split("%", 1)[0]).is_loopback


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _serve(ctx, sock: socket.socket, host: str, port: int, loopback: bool) -> None:
    """Run uvicorn on ``sock`` until Ctrl-C or SIGTERM, then return normally (exit 0)."""
    import signal

    import uvicorn

    from cafleet.web.app import WebConfig, create_app
    from cafleet.web.security import allowed_hosts

    config = WebConfig(
        db_path=ctx.db_path,
        allowed_hosts=allowed_hosts(host, port, loopback),
        environ=ctx.environ,
        busy_timeout=ctx.busy_timeout,
    )
    uv_server = uvicorn.Server(
        uvicorn.Config(
            create_app(config),
            log_level="warning",
            access_log=False,
            server_header=False,
            proxy_headers=False,
            ws="none",
            lifespan="on",
            timeout_graceful_shutdown=5,
        )
    )
    config.stopping = lambda: uv_server.should_exit  # event streams end so shutdown is prompt
    if not loopback:
        ctx.err(
            f"Warning: {_authority(host, port)} is not a loopback address; the WebUI has no login, so anyone "
            "who can reach it can read every fleet and send as any Director."
        )
    ctx.out(f"serving the cafleet WebUI at http://{_authority(host, port)}/")
    # uvicorn re-raises the signal that stopped it once it has shut down; these handlers
    # absorb that so Ctrl-C and SIGTERM end the command quietly with exit 0.
    previous = {sig: signal.signal(sig, lambda signum, frame: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uv_server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
