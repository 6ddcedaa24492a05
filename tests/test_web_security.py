"""WebUI request screening against a real database: DNS rebinding (Host), cross-site and
non-JSON writes, fleet scoping, and the security headers. Every refused write is checked
to have stored nothing."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py), except, for
# the suite's time, the matrices answered before any store is read (on PostgreSQL each case costs a
# fresh database): they run on SQLite, and a case of each of their checks runs on both.


import pytest

from cafleet.broker import messages
from cafleet.web.app import WebConfig, create_app
from cafleet.web.login import Login
from cafleet.web.security import allowed_hosts
from tests.support.web_server import TOKEN, web_client

BASE = "http://127.0.0.1:8000"


def make_client(db_path, env, host="127.0.0.1", port=8000, loopback=True):
    config = WebConfig(
        database=db_path, allowed_hosts=allowed_hosts(host, port, loopback), environ=env, login=Login(TOKEN)
    )
    return web_client(create_app(config), base_url=f"http://{host}:{port}", raise_server_exceptions=False)


@pytest.fixture
def client(db_path, store, env):
    with make_client(db_path, env) as test_client:
        yield test_client


@pytest.fixture
def trio(build):
    return build.fleet()


def stored(store) -> int:
    return store.execute("SELECT count(*) FROM messages").fetchone()[0]


def payload(trio, text="hello"):
    _, director, (m1, _) = trio
    return {"from_member_id": director, "to_member_id": m1, "text": text}


# --- Host header (DNS rebinding) ------------------------------------------------------------


def test_allowed_host_values():
    assert allowed_hosts("127.0.0.1", 8000, True) == {"127.0.0.1:8000", "localhost:8000", "[::1]:8000"}
    assert allowed_hosts("localhost", 9000, True) == {"localhost:9000", "127.0.0.1:9000", "[::1]:9000"}
    assert allowed_hosts("::1", 8000, True) == {"[::1]:8000", "127.0.0.1:8000", "localhost:8000"}
    assert allowed_hosts("192.0.2.7", 8000, False) == {"192.0.2.7:8000"}
    assert allowed_hosts("box.lan", 80, False) == {"box.lan:80", "box.lan"}


# The Host screen decides, whatever the store: test_a_non_loopback_bind_answers_only_its_own_name is on both.
@pytest.mark.stores("sqlite")
@pytest.mark.parametrize("host", ["127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST:8000"])
def test_loopback_spellings_are_answered(client, trio, host):
    response = client.get("/api/fleets", headers={"host": host})
    assert response.status_code == 200
    assert [f["name"] for f in response.json()] == ["alpha"]


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example:8000",
        "attacker.example",
        "127.0.0.1:8001",
        "127.0.0.1",
        "localhost.attacker.example:8000",
        "127.0.0.1:8000.attacker.example",
        "",
        "0.0.0.0:8000",
        "0:8000",
        "[::]:8000",
    ],
)
@pytest.mark.parametrize("path", ["/", "/static/app.js", "/api/fleets", "/api/fleets/1", "/api/events?fleet_id=1"])
@pytest.mark.stores("sqlite")  # the Host screen answers before any store is read; the next two tests are on both
def test_a_foreign_host_is_refused_400_everywhere(client, trio, host, path):
    response = client.get(path, headers={"host": host})
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {
        "error": f"refused: Host header {(host.lower() or '(none)')!r} is not this server's address"
    }
    assert response.headers["x-content-type-options"] == "nosniff"


def test_a_foreign_host_cannot_send(client, trio, store):
    response = client.post("/api/messages", json=payload(trio), headers={"host": "attacker.example:8000"})
    assert response.status_code == 400
    assert stored(store) == 0


def test_two_host_headers_are_refused(client, trio):
    response = client.get("/api/fleets", headers=[("host", "127.0.0.1:8000"), ("host", "attacker.example:8000")])
    assert response.status_code == 400


def test_a_non_loopback_bind_answers_only_its_own_name(db_path, store, env, trio):
    with make_client(db_path, env, host="192.0.2.7", loopback=False) as test_client:
        assert test_client.get("/api/fleets").status_code == 200
        for host in ("localhost:8000", "127.0.0.1:8000", "[::1]:8000"):
            assert test_client.get("/api/fleets", headers={"host": host}).status_code == 400


# --- state-changing requests: same-origin JSON only -----------------------------------------


def test_a_same_origin_json_post_is_accepted(client, trio, store):
    response = client.post(
        "/api/messages",
        json=payload(trio),
        headers={"origin": BASE, "sec-fetch-site": "same-origin", "content-type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201
    assert stored(store) == 1


@pytest.mark.parametrize(
    ("headers", "status", "error"),
    [
        ({"origin": "http://attacker.example"}, 403, "refused: cross-origin requests may not change state"),
        ({"origin": "null"}, 403, "refused: cross-origin requests may not change state"),
        ({"origin": "http://localhost:8000"}, 403, "refused: cross-origin requests may not change state"),
        ({"origin": "https://127.0.0.1:8000"}, 403, "refused: cross-origin requests may not change state"),
        ({"sec-fetch-site": "cross-site"}, 403, "refused: cross-site requests are not accepted"),
        ({"sec-fetch-site": "same-site"}, 403, "refused: same-site requests are not accepted"),
        ({"origin": BASE, "sec-fetch-site": "cross-site"}, 403, "refused: cross-site requests are not accepted"),
    ],
)
def test_cross_origin_posts_are_refused_and_write_nothing(client, trio, store, headers, status, error):
    response = client.post("/api/messages", json=payload(trio), headers=headers)
    assert (response.status_code, response.json()) == (status, {"error": error})
    assert stored(store) == 0


@pytest.mark.parametrize(
    "content_type",
    [
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "text/plain",
        "text/plain; charset=utf-8",
        "application/jsonp",
        "application/json-seq",
        None,
    ],
)
def test_non_json_posts_are_refused_415_and_write_nothing(client, trio, store, content_type):
    _, director, (m1, _) = trio
    if content_type == "application/x-www-form-urlencoded":
        body = f"from_member_id={director}&to_member_id={m1}&text=hello".encode()
    else:
        body = f'{{"from_member_id": {director}, "to_member_id": {m1}, "text": "hello"}}'.encode()
    headers = {} if content_type is None else {"content-type": content_type}
    response = client.post("/api/messages", content=body, headers=headers)
    assert response.status_code == 415
    assert response.json() == {"error": "refused: send the request body as Content-Type application/json"}
    assert stored(store) == 0


def test_a_form_post_with_a_foreign_origin_is_refused_on_origin_first(client, trio, store):
    response = client.post("/api/messages", data={"text": "x"}, headers={"origin": "http://attacker.example"})
    assert response.status_code == 403
    assert stored(store) == 0


def test_cross_site_reads_of_the_api_are_refused_but_navigation_is_not(client, trio):
    assert client.get("/api/fleets", headers={"sec-fetch-site": "cross-site"}).status_code == 403
    assert client.get("/api/fleets", headers={"sec-fetch-site": "same-origin"}).status_code == 200
    assert client.get("/", headers={"sec-fetch-site": "cross-site"}).status_code == 200  # a link to the dashboard
    assert client.get("/", headers={"sec-fetch-site": "none"}).status_code == 200  # typed into the address bar


# --- fleet scoping --------------------------------------------------------------------------


def test_fleet_scoped_views_never_show_another_fleets_data(client, build, store):
    alpha, alpha_director, (a1, a2) = build.fleet("alpha")
    _beta, _beta_director, (b1, b2) = build.fleet("beta")
    secret = messages.send(store, b1, b2, "beta secret")["message_id"]
    messages.send(store, a1, a2, "alpha note")

    alpha_timeline = client.get(f"/api/fleets/{alpha}/messages").json()["messages"]
    assert [m["text"] for m in alpha_timeline] == ["alpha note"]
    assert secret not in {m["message_id"] for m in alpha_timeline}
    assert [m["member_id"] for m in client.get(f"/api/fleets/{alpha}").json()["members"]] == [alpha_director, a1, a2]

    refused = client.get(f"/api/members/{b2}/inbox?fleet_id={alpha}")
    assert (refused.status_code, refused.json()) == (404, {"error": f"member {b2} is not in fleet {alpha}"})
    assert "beta secret" not in refused.text

    response = client.post("/api/messages", json={"from_member_id": alpha_director, "to_member_id": b1, "text": "x"})
    assert response.status_code == 409  # a Director cannot reach into another fleet
    response = client.post("/api/messages", json={"from_member_id": b1, "to_member_id": b2, "text": "x"})
    assert response.status_code == 422  # nor can the dashboard speak for a member
    assert stored(store) == 2


# --- response headers -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["/", "/static/app.js", "/static/app.css", "/api/fleets", "/api/fleets/999", "/api/nothing"]
)
def test_security_headers_on_every_response(client, trio, path):
    response = client.get(path)
    assert response.headers["content-security-policy"] == (
        "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'"
    )
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "no-referrer"
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize(
    "path,scripts", [("/", ["common", "fleetview", "app"]), ("/attention", ["common", "attention"])]
)
def test_the_pages_load_only_their_own_static_files(client, path, scripts):
    page = client.get(path).text
    assert [f'<script src="/static/{name}.js" defer></script>' in page for name in scripts] == [True] * len(scripts)
    assert '<link rel="stylesheet" href="/static/app.css">' in page
    assert "http://" not in page and "https://" not in page and "<script>" not in page and "style=" not in page
    for name in scripts:
        script = client.get(f"/static/{name}.js").text
        for sink in (".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", "Function("):
            assert sink not in script, (name, sink)


# --- the address the server binds -----------------------------------------------------------

WILDCARD_SPELLINGS = [
    "0",
    "0x0",
    "0.0",
    "000.000.000.000",
    "::0",
    "[::0]",
    "0:0:0:0:0:0:0:0",
    "0.0.0.0",
    "::",
    "::ffff:0.0.0.0",
]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def nothing_listens(port: int) -> bool:
    import socket

    for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        with socket.socket(family) as sock:
            try:
                sock.bind((address, port))
            except OSError:
                return False
    return True


@pytest.mark.parametrize("host", WILDCARD_SPELLINGS)
# Refused before `cafleet server` opens its store: test_a_non_loopback_address_needs_the_explicit_opt_in is on both.
@pytest.mark.stores("sqlite")
def test_every_spelling_of_every_interface_is_refused(run_cli, store, host):
    """Judged by what the address resolves to: all of these mean 0.0.0.0 or ::. (In a
    subprocess with a bound: before, the server started and answered `Host: 0:PORT`.)"""
    port = free_port()
    result = run_cli("server", "--host", host, "--port", str(port), timeout=30)
    bare = host.strip("[]")
    assert (result.code, result.out) == (2, "")
    assert result.err.startswith(f"Error: --host {bare} is a wildcard address"), result.err
    assert result.err.endswith(
        "give the address or name that browsers will use (the server only answers requests addressed to it).\n"
    )
    assert result.err.count("\n") == 1
    assert nothing_listens(port)


@pytest.mark.parametrize("host", ["0", "::0"])
# Refused before `cafleet server` opens its store: test_a_non_loopback_address_needs_the_explicit_opt_in is on both.
@pytest.mark.stores("sqlite")
def test_a_wildcard_from_the_environment_is_refused_too(run_cli, env, store, host):
    result = run_cli(
        "server", environ=dict(env, CAFLEET_BROKER_HOST=host, CAFLEET_BROKER_PORT=str(free_port())), timeout=30
    )
    assert (result.code, result.out) == (1, "")
    assert result.err.startswith(f"Error: CAFLEET_BROKER_HOST {host} is a wildcard address"), result.err


def test_a_non_loopback_address_needs_the_explicit_opt_in(cli, store):
    port = free_port()
    refused = cli("server", "--host", "192.0.2.7", "--port", str(port))
    assert (refused.code, refused.out) == (2, "")
    assert refused.err == (
        "Error: --host 192.0.2.7 is not a loopback address (192.0.2.7); served there over plain http, the "
        "login token and cookie cross the network in clear: serve on loopback behind a TLS proxy with "
        "--public URL (docs/webui.md), or add --allow-remote to serve it there anyway.\n"
    )
    # With the opt-in the address is tried (this machine does not own it, so the bind fails).
    tried = cli("server", "--host", "192.0.2.7", "--port", str(port), "--allow-remote")
    assert tried.code == 1 and tried.err.startswith(f"Error: cannot listen on 192.0.2.7:{port}: "), tried.err


@pytest.mark.parametrize(
    "host,address",
    [
        ("localhost", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.0.0.2", "127.0.0.2"),
        ("::1", "::1"),
        ("::ffff:127.0.0.1", "::ffff:127.0.0.1"),
    ],
)
def test_names_and_spellings_of_loopback_are_accepted(host, address):
    from cafleet.cli.server import _resolve
    from cafleet.errors import UsageError

    target = _resolve(host, 8000, "--host", UsageError, allow_remote=False)
    assert target.loopback and target.address[0] == address


def test_a_server_bound_by_another_spelling_of_loopback_answers_that_name(env, store):
    """`--host 127.1` binds 127.0.0.1 and answers `Host: 127.1:PORT` and the loopback names."""
    import signal

    import httpx

    from tests.support.web_server import ServerProcess

    port = free_port()
    server = ServerProcess(env, "--host", "127.1", "--port", str(port))
    try:
        assert server.first_line == f"serving the cafleet WebUI at http://127.1:{port}/"
        for name in ("127.1", "127.0.0.1", "localhost"):
            response = httpx.get(
                f"http://127.0.0.1:{port}/api/fleets", headers={"host": f"{name}:{port}", **server.headers}, timeout=10
            )
            assert response.status_code == 200, (name, response.text)
        response = httpx.get(
            f"http://127.0.0.1:{port}/api/fleets", headers={"host": f"0:{port}", **server.headers}, timeout=10
        )
        assert response.status_code == 400
    finally:
        code, out, err = server.stop(signal.SIGTERM)
    assert (code, out, err) == (0, "", "")
