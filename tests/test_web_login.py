"""The WebUI's login (docs/webui.md, "Login"): every API request carries the token `cafleet
server` printed or the session cookie its login link set, on loopback too; a member's own
curl from its pane gets nothing; ``--public`` answers the proxy's address and makes the
cookie Secure."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import json
import signal

import httpx
import pytest

from cafleet.broker import messages
from cafleet.web.login import Login, PublicAddress
from tests.support.tmux_fixtures import wait_for
from tests.support.web_server import TOKEN, ServerProcess, free_port, make_app, web_client

API_READS = ["/api/fleets", "/api/fleets/{fleet}", "/api/fleets/{fleet}/messages", "/api/attention",
             "/api/events?fleet_id={fleet}", "/api/members/{member}/inbox"]  # fmt: skip


@pytest.fixture
def trio(build):
    return build.fleet()


@pytest.fixture
def anonymous(db_path, store, env):
    """A client of the app that carries neither the token nor the cookie."""
    with web_client(make_app(db_path, env), raise_server_exceptions=False) as client:
        client.headers.pop("authorization")
        yield client


def stored(store) -> int:
    return store.execute("SELECT count(*) FROM messages").fetchone()[0]


@pytest.mark.parametrize("path", API_READS)
def test_every_api_read_without_the_login_is_refused_401(anonymous, trio, path):
    fleet_id, _director, (m1, _m2) = trio
    answer = anonymous.get(path.format(fleet=fleet_id, member=m1))
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"].startswith("refused: log in first: open the login link `cafleet server` printed")


def test_writes_without_the_login_are_refused_and_store_nothing(anonymous, trio, store):
    _fleet_id, director, (m1, _m2) = trio
    before = stored(store)
    sent = anonymous.post("/api/messages", json={"from_member_id": director, "to_member_id": m1, "text": "hi"})
    answered = anonymous.post(f"/api/members/{m1}/answer", json={"choice": 1, "dialog": "ab" * 6})
    assert (sent.status_code, answered.status_code) == (401, 401)
    assert stored(store) == before


def test_the_page_itself_needs_no_login_but_tells_how(anonymous):
    for path in ("/", "/attention", "/static/common.js", "/static/attention.js"):
        assert anonymous.get(path).status_code == 200, path
    assert "open the login link that `cafleet server` printed" in anonymous.get("/static/common.js").text


def test_the_login_link_sets_a_strict_http_only_cookie_that_alone_admits(anonymous, trio):
    fleet_id = trio[0]
    wrong = anonymous.get("/login?token=not-the-token", follow_redirects=False)
    assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
    assert anonymous.get("/login", follow_redirects=False).status_code == 403
    assert anonymous.get(f"/api/fleets/{fleet_id}").status_code == 401
    answer = anonymous.get(f"/login?token={TOKEN}", follow_redirects=False)
    assert (answer.status_code, answer.headers["location"]) == (303, "/")
    cookie = answer.headers["set-cookie"]
    parts = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "samesite", "path"} <= parts and "secure" not in parts, cookie
    assert "samesite=strict" in cookie.lower() and TOKEN not in cookie
    assert anonymous.get(f"/api/fleets/{fleet_id}").status_code == 200  # the client kept the cookie


def test_a_forged_or_foreign_cookie_and_a_wrong_bearer_are_refused(anonymous, trio):
    login = Login(TOKEN)
    fleet_id = trio[0]
    for headers in (
        {"cookie": f"{login.cookie_name}=0{login.session[1:]}"},  # one character off
        {"cookie": f"{Login(TOKEN, 9999).cookie_name}={Login(TOKEN, 9999).session}; x=1"},  # another port's name
        {"cookie": f"{login.cookie_name}={Login('another token').session}"},
        {"authorization": "Bearer not-the-token"},
        {"authorization": f"Basic {TOKEN}"},
        {"cookie": f"{login.cookie_name}={TOKEN}"},  # the token is not a session value
    ):
        assert anonymous.get(f"/api/fleets/{fleet_id}", headers=headers).status_code == 401, headers
    assert (
        anonymous.get(f"/api/fleets/{fleet_id}", headers={"cookie": f"{login.cookie_name}={login.session}"}).status_code
        == 200
    )


def test_a_members_own_curl_from_its_pane_is_refused(env, trio, store, tmux_server, tmp_path):
    """A member's pane runs curl against the server on loopback, as a misled agent would:
    401 for a read and for a send as the Director, and nothing stored."""
    fleet_id, director, (m1, _m2) = trio
    server = ServerProcess(env, "--port", str(free_port()))
    try:
        assert server.url, server.first_line
        out = tmp_path / "curl.out"
        body = json.dumps({"from_member_id": director, "to_member_id": m1, "text": "as the Director"})
        script = (
            f"curl -s -o /dev/null -w '%{{http_code}} ' {server.url}api/fleets/{fleet_id} >> {out}; "
            f"curl -s -o /dev/null -w '%{{http_code}} ' -H 'Content-Type: application/json' "
            f"-H 'Origin: {server.url.rstrip('/')}' --data '{body}' {server.url}api/messages >> {out}; "
            f"echo done >> {out}; exec sleep 600"
        )
        member_env = dict(env, CAFLEET_MEMBER_ID=str(m1))
        tmux_server.new_pane(["sh", "-c", script], env=member_env)
        said = wait_for(lambda: out.exists() and "done" in out.read_text() and out.read_text(), timeout=60)
        assert said.split() == ["401", "401", "done"], said
        before = stored(store)
        asked = httpx.get(f"{server.url}api/fleets/{fleet_id}", headers=server.headers, timeout=10)
        assert asked.status_code == 200  # the token itself works
        assert stored(store) == before
    finally:
        code, out_text, err = server.stop(signal.SIGTERM)
    assert (code, out_text, err) == (0, "", "")


def test_public_serves_the_proxys_address_with_a_secure_cookie(env, trio, store):
    fleet_id, director, (m1, _m2) = trio
    server = ServerProcess(env, "--port", str(free_port()), "--public", "https://fleet.example.com")
    try:
        assert server.url, server.first_line
        assert server.login.startswith("https://fleet.example.com/login?token="), server.login
        base = server.url.rstrip("/")
        proxied = {"host": "fleet.example.com"}  # what a proxy keeping the Host header forwards
        assert httpx.get(f"{base}/api/fleets/{fleet_id}", headers=proxied, timeout=10).status_code == 401
        login = httpx.get(f"{base}/login?token={server.token}", headers=proxied, timeout=10)
        assert login.status_code == 303 and "secure" in login.headers["set-cookie"].lower()
        cookie = login.headers["set-cookie"].split(";")[0]
        admitted = dict(proxied, cookie=cookie)
        assert httpx.get(f"{base}/api/fleets/{fleet_id}", headers=admitted, timeout=10).status_code == 200
        send = {"from_member_id": director, "to_member_id": m1, "text": "from the phone"}
        plain = httpx.post(f"{base}/api/messages", json=send, headers=dict(admitted, origin="http://fleet.example.com"))
        assert plain.status_code == 403 and stored(store) == 0
        sent = httpx.post(f"{base}/api/messages", json=send, headers=dict(admitted, origin="https://fleet.example.com"))
        assert sent.status_code == 201, sent.text
        assert [m["text"] for m in messages.poll(store, m1)] == ["from the phone"]
    finally:
        code, out, err = server.stop(signal.SIGTERM)
    assert (code, out, err) == (0, "", "")


@pytest.mark.stores("sqlite")  # refused before any store is read
@pytest.mark.parametrize(
    "url,said",
    [
        ("fleet.example.com", "give an http:// or https:// URL with a host name"),
        ("ftp://fleet.example.com", "give an http:// or https:// URL with a host name"),
        ("https://fleet.example.com/cafleet", "give the site's address alone"),
        ("https://user:secret@fleet.example.com", "give the site's address alone"),
        ("https://fleet.example.com:99999", "its port is not a number from 1 to 65535"),
    ],
)
def test_a_bad_public_address_is_one_line_that_does_not_repeat_it(cli, store, url, said):
    refused = cli("server", "--port", str(free_port()), "--public", url)
    assert (refused.code, refused.out) == (2, ""), refused
    assert refused.err.startswith(f"Error: --public: {said}") and refused.err.count("\n") == 1, refused.err
    assert "secret" not in refused.err


def test_public_address_parts():
    assert PublicAddress("https://Fleet.Example.com/").hosts == {"fleet.example.com", "fleet.example.com:443"}
    assert PublicAddress("https://fleet.example.com").origin == "https://fleet.example.com"
    assert PublicAddress("http://10.0.0.5:8080").origin == "http://10.0.0.5:8080"
    assert PublicAddress("http://10.0.0.5:8080").hosts == {"10.0.0.5:8080"}
    assert PublicAddress("https://[::1]:8443").origin == "https://[::1]:8443"
    assert PublicAddress("https://fleet.example.com").secure and not PublicAddress("http://a.example").secure


def test_a_member_cannot_start_the_server_to_get_a_token(cli, trio, env):
    _fleet_id, _director, (m1, _m2) = trio
    refused = cli("server", "--port", str(free_port()), environ=dict(env, CAFLEET_MEMBER_ID=str(m1)))
    assert refused.code != 0 and refused.out == "", refused
    assert refused.err.startswith("Error: only a fleet's Director") and "nothing was done" in refused.err, refused
