"""Notices posted out (docs/delivery.md, "Notices posted out").

Real parts: a fleet in real panes on a private tmux server, the real keeper (`fleet create`
starts it; ended by its pid at teardown), the stand-in agent, and a real HTTP receiver on
127.0.0.1 (``http.server`` in a thread, recording every request and what it answered;
shut down at teardown, any request it holds released first), on SQLite and on a real
PostgreSQL server. Every wait is bounded (``wait_for``); none is a timed assertion.
"""

from __future__ import annotations

import json
import time

import pytest

from cafleet.broker import notices
from tests.support.http_receiver import Receiver, free_port
from tests.support.keeper import assert_none_left, log_lines
from tests.support.pane_fleet import tmux_fleet
from tests.support.tmux_fixtures import wait_for

STORES = ("sqlite", "postgres")  # every test on a fleet runs on both stores (tests/conftest.py)
PASSWORD = "Sup3rSecretPw"
TOKEN = "tok3nSECRETvalue"
SPELLINGS = (
    f"postgresql://alice:{PASSWORD}@db.example/fleet",
    f"postgresql://alice@db.example/fleet?password={PASSWORD}",
    f"host=db.example password='{PASSWORD}'",
    f"postgresql://alice@db.example/fleet?sslmode=require&pass%77ord={PASSWORD}",
    f"PASSWORD = {PASSWORD}",
)


@pytest.fixture
def receivers():
    started: list[Receiver] = []

    def start(**kwargs) -> Receiver:
        receiver = Receiver(**kwargs)
        started.append(receiver)
        return receiver

    try:
        yield start
    finally:
        for receiver in started:
            receiver.close()


class Kept:
    """A fleet with the keeper on and CAFLEET_NOTIFY_URL (and any other setting) given."""

    def __init__(self, env, tmp_path, monkeypatch) -> None:
        self.env, self.tmp_path, self.monkeypatch = env, tmp_path, monkeypatch

    def __call__(self, **settings: str):
        from contextlib import contextmanager

        @contextmanager
        def running():
            values = {
                "CAFLEET_KEEPER": "on",
                "CAFLEET_NOTICE_AWAITING_AFTER": "0",
                "CAFLEET_NOTICE_INTERVAL": "0.2",
                "CAFLEET_NOTIFY_BACKOFF": "0.2",
                **settings,
            }
            for name, value in values.items():
                self.env[name] = value
                self.monkeypatch.setenv(name, value)
            with tmux_fleet(self.env, self.tmp_path, self.monkeypatch) as fleet:
                try:
                    wait_for(lambda: "notices are posted to" in "\n".join(keeper_log(fleet)), what="the outbox started")
                    yield fleet
                finally:

                    def recorded() -> list[int]:
                        shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["keeper"]
                        return [shown["pid"]] if shown["running"] and shown["pid"] else []

                    assert_none_left(fleet.db, recorded)

        return running()


@pytest.fixture
def kept(env, tmp_path, monkeypatch):
    return Kept(env, tmp_path, monkeypatch)


def keeper_log(fleet) -> list[str]:
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["keeper"]
    return log_lines(shown.get("log"))


def post_notice(fleet, text: str, kind: str = "unreachable", subject: str = "host:box", member_id=None, digest=None):
    """A notice put in the Director's inbox as the keeper puts one (a real row), from here."""
    from cafleet.store.engines import open_store

    store = open_store(str(fleet.db))
    try:
        header = notices.HEADER.format(kind=kind, subject=subject)
        notice = notices.Notice(kind, subject, member_id, digest, f"{header}\n{text}")
        message_id = notices.post(store, fleet.fleet_id, fleet.director, notice)
    finally:
        store.close()
    assert message_id is not None
    return message_id


def documents(receiver: Receiver, path: str = "/hook") -> list[dict]:
    return [json.loads(r["body"]) for r in receiver.ok(path)]


def show_lines(fleet) -> list[str]:
    shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id))
    assert shown.code == 0, shown
    return shown.out.splitlines()


# --- (a) a member blocked on a dialog ----------------------------------------------------------


def test_the_notice_of_a_member_blocked_on_a_dialog_is_posted_with_its_text_and_digest(kept, receivers):
    receiver = receivers()
    with kept(CAFLEET_NOTIFY_URL=receiver.url(), CAFLEET_PUBLIC_URL="http://webui.example:8000/") as fleet:
        member = fleet.attach("asking", "--permission-prompt")
        [doc] = wait_for(lambda: documents(receiver), timeout=30, what="the notice posted")
        member_id = member["member_id"]
        [notice] = [r for r in fleet.cafleet("message", "poll", str(fleet.director), "--json").json() if "kind" in r]
        assert doc["kind"] == "awaiting_user"
        assert doc["message_id"] == notice["message_id"]
        assert doc["text"] == notice["text"]
        assert doc["dialog"] == notice["notice"]["dialog"]
        assert f"cafleet member answer {member_id} CHOICE --dialog {doc['dialog']}" in doc["text"]
        assert doc["fleet"] == {"id": fleet.fleet_id, "name": "e2e"}
        assert doc["member"]["id"] == member_id and doc["member"]["name"] == "asking" and doc["member"]["host"]
        assert doc["created_at"] == notice["created_at"]
        assert doc["link"] == "http://webui.example:8000/attention"  # the page that answers a dialog
        lines = show_lines(fleet)
        assert lines[-2].startswith("notify: 1 URL(s), last post ok at "), lines
        assert lines[-1].startswith("keeper: running"), lines


# --- the same document for a script: fleet watch --json and the WebUI's attention list --------


def test_fleet_watch_json_and_the_webui_attention_list_carry_the_posted_document(kept, receivers):
    """A script reading `fleet watch --json` or ``GET /api/fleets/{id}`` gets each notice as
    the very object the plain-JSON webhook got: scrubbed the same, linked the same."""
    from tests.support.watch_stream import Stream
    from tests.support.web_server import SSEReader, make_app, threaded_server, web_client

    receiver = receivers()
    with (
        kept(CAFLEET_NOTIFY_URL=receiver.url(), CAFLEET_PUBLIC_URL="http://webui.example:8000/") as fleet,
        threaded_server(fleet.db, fleet.environ, poll_interval=0.05) as (url, _, _),
    ):
        events = SSEReader(f"{url}/api/events?fleet_id={fleet.fleet_id}")
        watch = Stream(fleet.environ, fleet.fleet_id, "--interval", "0.5")
        try:
            member = fleet.attach("asking", "--permission-prompt")
            [blocked] = wait_for(lambda: documents(receiver), timeout=30, what="the awaiting_user notice posted")
            assert blocked["kind"] == "awaiting_user" and blocked["member"]["id"] == member["member_id"]
            text = "the host said:\n" + "\n".join(SPELLINGS)
            other = post_notice(fleet, text)  # an event the keeper clears at its next look
            posted = wait_for(lambda: [d for d in documents(receiver) if d["message_id"] == other], what="its post")
            for doc in (blocked, posted[0]):
                seen = watch.wait_event(
                    lambda e, doc=doc: e["event"] == "message" and e["message_id"] == doc["message_id"]
                )
                assert seen["notice"] == doc  # the whole object, equal key for key
            assert "postgresql://alice:***@db.example/fleet" in posted[0]["text"]
            assert PASSWORD not in json.dumps(posted[0])
            # the open episode (the dialog still on screen) is listed; the event notice is not,
            # once the keeper's next look has cleared it (0.2 s; waited for, never assumed)
            with web_client(make_app(fleet.db, fleet.environ)) as client:

                def only_the_open_one():
                    found = client.get(f"/api/fleets/{fleet.fleet_id}").json()["attention"]
                    listed = [doc["message_id"] for doc in found["notices"]]
                    return found if listed == [blocked["message_id"]] else None

                attention = wait_for(only_the_open_one, what="the event notice cleared from the attention list")
            assert attention["notices"] == [blocked]  # the whole object, key for key
            assert [(i["kind"], i["member_id"]) for i in attention["items"]] == [("blocked", member["member_id"])]
            deadline = time.monotonic() + 60
            while True:  # the page's event stream: a roster event carries the same list
                name, data = events.next(timeout=max(1.0, deadline - time.monotonic()))
                if name == "roster" and [d["message_id"] for d in data["attention"]["notices"]] == [
                    blocked["message_id"]
                ]:
                    assert data["attention"]["notices"] == [blocked]
                    break
                assert time.monotonic() < deadline, "no roster event listing the open notice"
        finally:
            watch.stop()


# --- (b), (c) retries: exactly once after a 503, and once the receiver is back ----------------


def test_a_post_answered_503_is_tried_again_and_posted_exactly_once(kept, receivers):
    receiver = receivers(statuses=[503])
    with kept(CAFLEET_NOTIFY_URL=receiver.url()) as fleet:
        first = post_notice(fleet, "host box cannot be reached")
        wait_for(lambda: receiver.ok(), what="the post after its retry")
        assert [r["status"] for r in receiver.requests] == [503, 200]
        second = post_notice(fleet, "host box2 cannot be reached", subject="host:box2")
        wait_for(lambda: len(receiver.ok()) == 2, what="the next notice posted")
        assert [d["message_id"] for d in documents(receiver)] == [first, second]  # the first never again

        def rows():
            found = fleet.query(
                "SELECT message_id, state, attempts FROM cafleet_aux_notice_posts WHERE state != 'start' "
                "ORDER BY message_id"
            )
            return [tuple(r) for r in found]

        wait_for(lambda: all(r[1] == "posted" for r in rows()), what="both posts recorded")
        assert rows() == [(first, "posted", 2), (second, "posted", 1)]
        assert any("answered HTTP 503; trying again" in line for line in keeper_log(fleet))


def test_a_post_to_a_receiver_that_is_down_is_made_when_it_comes_back(kept, receivers):
    port = free_port()
    with kept(CAFLEET_NOTIFY_URL=f"http://127.0.0.1:{port}/hook") as fleet:
        message_id = post_notice(fleet, "host box cannot be reached")
        wait_for(lambda: any("cannot connect" in line for line in keeper_log(fleet)), what="the failure logged")
        lines = show_lines(fleet)
        assert lines[-2].startswith("notify: 1 URL(s), last post failing since "), lines
        assert "cannot connect" in lines[-2] and lines[-1].startswith("keeper: "), lines
        shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json").json()["notify"]
        assert shown["failing"] == 1 and shown["urls"] == [f"http://127.0.0.1:{port}/…"]
        doctor = fleet.cafleet("doctor")
        assert f"! fleet {fleet.fleet_id}: last post failing since " in doctor.out, doctor
        receiver = receivers(port=port)
        [doc] = wait_for(lambda: documents(receiver), timeout=30, what="the post once the receiver is up")
        assert doc["message_id"] == message_id
        wait_for(lambda: "last post ok at" in show_lines(fleet)[-2], what="fleet show says it works again")
        failures = [line for line in keeper_log(fleet) if "cannot connect" in line]
        assert len(failures) == 1, failures  # one line per reason, not one per try


# --- (d) a slow receiver holds up nothing else ---------------------------------------------------


def test_a_slow_receiver_does_not_hold_up_a_preview(kept, receivers):
    receiver = receivers(hold=True)
    with kept(CAFLEET_NOTIFY_URL=receiver.url()) as fleet:
        member = fleet.create("worker")
        post_notice(fleet, "host box cannot be reached")
        wait_for(lambda: receiver.open == 1, what="the post held open by the receiver")
        sent = fleet.send(fleet.director, member["member_id"], "go on", "--json")
        assert sent.code == 0, sent
        message_id = sent.json()["message_id"]
        wait_for(lambda: fleet.notified_at(message_id) is not None, what="the preview delivered")
        assert receiver.open == 1 and not receiver.requests  # the post is still held open
        receiver.release.set()
        wait_for(lambda: receiver.ok(), what="the held post answered")


def test_a_receiver_that_takes_30_s_holds_up_neither_another_url_nor_another_fleets_notice(kept, receivers):
    """The slow receiver answers each post after 30 s (beyond the post's 10 s timeout, so
    the keeper tries again meanwhile); the same fleet's other URL and a second fleet, whose
    keeper posts to the same slow URL too and to one of its own, get their posts while it
    still holds the first one open."""
    slow, fast, other = receivers(hold=True, hold_for=30), receivers(), receivers()
    with kept(CAFLEET_NOTIFY_URL=f"{slow.url('/slow')} {fast.url()}") as fleet:
        pane = fleet.server.new_pane(["sh"])  # the second fleet's Director, in a pane of its own
        environ = dict(fleet.environ, **fleet.server.environ_for(pane))
        created = fleet.cafleet(
            "fleet", "create", "--name", "other", "--coding-agent", "standin",
            "--notify", slow.url("/slow-too"), "--notify", other.url(), "--json", environ=environ,
        )  # fmt: skip
        assert created.code == 0, created
        second = created.json()
        try:
            shown = fleet.cafleet("fleet", "show", str(second["fleet_id"]), "--json", environ=environ).json()
            wait_for(
                lambda: "notices are posted to" in "\n".join(log_lines(shown["keeper"].get("log"))),
                what="the second fleet's outbox started",
            )
            first = post_notice(fleet, "host box cannot be reached")
            wait_for(lambda: slow.open == 1, what="the first fleet's post held open by the slow receiver")
            [doc] = wait_for(lambda: documents(fast), what="the same notice at the fleet's other URL")
            assert doc["message_id"] == first
            mine = (fleet.fleet_id, fleet.director)
            fleet.fleet_id, fleet.director = second["fleet_id"], second["director_member_id"]
            try:
                theirs = post_notice(fleet, "host box2 cannot be reached", subject="host:box2")
            finally:
                fleet.fleet_id, fleet.director = mine
            [doc] = wait_for(lambda: documents(other), what="the second fleet's notice at its own URL")
            assert doc["message_id"] == theirs and doc["fleet"]["id"] == second["fleet_id"]
            # both came while the slow receiver still held the first post: it had answered nothing
            answered = [r["answered"] for r in slow.requests]
            came = [r["at"] for r in fast.ok() + other.ok()]
            assert slow.open >= 1 and all(at < min(answered, default=float("inf")) for at in came), (came, answered)
        finally:
            slow.release.set()
            fleet.cafleet("fleet", "delete", str(second["fleet_id"]), environ=environ)


# --- (e) Slack's and ntfy's shapes; (f) no secret in any post -------------------------------------


def test_slack_and_ntfy_get_their_own_shapes_and_no_post_holds_a_password(kept, receivers):
    receiver = receivers()
    urls = [
        f"slack+{receiver.url('/slack')}",
        f"ntfy+http://alice:{TOKEN}@127.0.0.1:{receiver.port}/ntfy",
        f"http://127.0.0.1:{receiver.port}/json?token={TOKEN}",
    ]
    with kept(CAFLEET_NOTIFY_URL=", ".join(urls), CAFLEET_PUBLIC_URL="http://webui.example:8000") as fleet:
        member = fleet.create("worker")
        member_id = member["member_id"]
        text = "the member said <b>&</b>:\n" + "\n".join(SPELLINGS)
        message_id = post_notice(fleet, text, "awaiting_user", f"member:{member_id}", member_id, "d1g3st")
        wait_for(lambda: len(receiver.ok()) == 3, what="the three posts")
        by_path = {r["path"].split("?")[0]: r for r in receiver.ok()}
        # Slack's incoming webhook: a JSON object whose "text" is mrkdwn, sent as JSON
        assert by_path["/slack"]["headers"]["Content-Type"].startswith("application/json")
        slack = json.loads(by_path["/slack"]["body"])
        assert list(slack) == ["text"]
        head, _, rest = slack["text"].partition("\n")
        assert head == f"*cafleet: awaiting_user, member {member_id} (worker) in fleet {fleet.fleet_id} (e2e)*"
        assert rest.startswith("```[cafleet notice awaiting_user member:")
        assert "the member said &lt;b&gt;&amp;&lt;/b&gt;:" in rest
        assert rest.endswith("```\n<http://webui.example:8000/attention|Answer it in the WebUI>")
        ntfy = by_path["/ntfy"]  # ntfy's publish: the message as a plain body, the rest in headers
        assert ntfy["headers"]["Content-Type"].startswith("text/plain")
        assert ntfy["headers"]["Priority"] in ("min", "low", "default", "high", "urgent", "max")  # ntfy's names
        assert all(tag and tag.strip() == tag for tag in ntfy["headers"]["Tags"].split(","))  # a comma list
        assert (
            ntfy["headers"]["Title"]
            == f"cafleet: awaiting_user, member {member_id} (worker) in fleet {fleet.fleet_id} (e2e)"
        )
        assert ntfy["headers"]["Priority"] == "high"
        assert ntfy["headers"]["Tags"] == "cafleet,awaiting_user"
        assert ntfy["headers"]["Click"] == "http://webui.example:8000/attention"
        assert ntfy["headers"]["Authorization"].startswith("Basic ")  # the URL's userinfo, never in the path
        assert ntfy["body"].decode().startswith(f"[cafleet notice awaiting_user member:{member_id}]\nthe member said")
        doc = json.loads(by_path["/json"]["body"])
        assert doc["message_id"] == message_id and doc["dialog"] == "d1g3st"
        assert "postgresql://alice:***@db.example/fleet" in doc["text"]
        for request in receiver.ok():
            everything = request["body"] + json.dumps(request["headers"]).encode()
            assert PASSWORD.encode() not in everything, request
        log = "\n".join(keeper_log(fleet))
        assert TOKEN not in log and "/slack" not in log and "/ntfy" not in log
        shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json")
        assert TOKEN not in shown.out


DB_PASSWORD = "Pw-7f3kq:/x#y&z"  # a ':', '/', '#' and '&' that a URL must percent-encode


def spellings_of(password: str, user: str) -> dict[str, str]:
    """The ways a text may carry ``password``: as it is, percent-encoded (upper and lower
    case hex), base64 (standard, URL-safe) and HTTP Basic's ``user:password``."""
    import base64
    import re
    from urllib.parse import quote

    encoded = quote(password, safe="")
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {
        "raw": password,
        "percent-encoded": encoded,
        "lower-case hex": re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), encoded),
        "base64": base64.b64encode(password.encode()).decode(),
        "URL-safe base64": base64.urlsafe_b64encode(password.encode()).decode(),
        "HTTP Basic": basic.rstrip("="),
    }


@pytest.mark.stores("postgres")  # the database password is a PostgreSQL location's
@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_no_post_holds_the_database_password_in_any_spelling(kept, receivers, pg_cluster, form):
    """The fleet's database needs a password (SCRAM); the location carries it in the
    userinfo or as a ``password=`` parameter. A notice whose text quotes it in every
    spelling is posted in the three formats; no body, header or log line holds one."""
    from urllib.parse import quote, urlsplit

    base = pg_cluster.password_database(DB_PASSWORD)
    encoded = quote(DB_PASSWORD, safe="")
    url = base.replace("@/", f":{encoded}@/", 1) if form == "userinfo" else f"{base}&password={encoded}"
    user = urlsplit(base).username
    forms = spellings_of(DB_PASSWORD, user)
    receiver = receivers()
    urls = f"slack+{receiver.url('/slack')} ntfy+{receiver.url('/ntfy')} {receiver.url('/json')}"
    with kept(CAFLEET_DATABASE_URL=url, CAFLEET_NOTIFY_URL=urls) as fleet:
        text = "the member printed:\n" + "\n".join(f"{name}: {value}" for name, value in forms.items())
        text += f"\n{url}\nAuthorization: Basic {forms['HTTP Basic']}"
        post_notice(fleet, text)
        wait_for(lambda: len(receiver.ok()) == 3, what="the three posts")
        for request in receiver.ok():
            everything = request["body"].decode() + json.dumps(request["headers"])
            leaked = [name for name, value in forms.items() if value in everything]
            assert leaked == [], (request["path"], leaked)
            assert "the member printed:" in everything and "raw: ***" in everything  # the text is there, scrubbed
        log = "\n".join(keeper_log(fleet))
        assert not [name for name, value in forms.items() if value in log]


# --- (g) a bad URL is refused, nothing written -----------------------------------------------------


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("ftp://h.example/x", "Error: --notify: the URL ftp://h.example/… is not an http or https URL;"),
        ("https://h.example/a\x1bb", "Error: --notify: a URL is empty or holds a space or control character;"),
        ("https://h.example/a b", "Error: --notify: a URL has no http:// or https:// before it;"),
        ("https://h.example/" + "x" * 2000, "Error: --notify: a URL is longer than 2000 characters;"),
        ("gopher+https://h.example/x", "Error: --notify: a URL names an unknown format 'gopher';"),
    ],
)
def test_fleet_create_refuses_a_bad_notify_url_in_one_line_and_writes_nothing(cli, db_path, url, said):
    created = cli("fleet", "create", "--name", "x", "--coding-agent", "standin", "--notify", url)
    assert created.code == 2, created
    err = created.err
    assert err.startswith(said) and err.count("\n") == 1, err
    listed = cli("fleet", "list", "--json")
    assert listed.code == 0 and listed.json() == [], listed


def test_a_bad_notify_url_setting_is_refused_without_its_token(cli, env):
    refused = cli("fleet", "list", environ=dict(env, CAFLEET_NOTIFY_URL=f"https://{TOKEN}@h.example/x ftp://h/{TOKEN}"))
    assert refused.code == 2, refused
    err = refused.err
    assert err.startswith("Error: CAFLEET_NOTIFY_URL: the URL ftp://h/… is not an http or https URL;"), err
    assert TOKEN not in err and err.count("\n") == 1


# --- a fleet's own URLs -------------------------------------------------------------------------


def test_a_fleets_own_notify_url_is_where_its_notices_go_instead_of_the_setting(kept, receivers):
    setting, own = receivers(), receivers()
    with kept(CAFLEET_NOTIFY_URL=setting.url()) as fleet:
        pane = fleet.server.new_pane(["sh"])  # the second fleet's Director, in a pane of its own
        environ = dict(fleet.environ, **fleet.server.environ_for(pane))
        created = fleet.cafleet(
            "fleet", "create", "--name", "own", "--coding-agent", "standin", "--notify", own.url(), "--json",
            environ=environ,
        )  # fmt: skip
        assert created.code == 0, created
        second = created.json()
        try:
            shown = fleet.cafleet("fleet", "show", str(second["fleet_id"]), "--json", environ=environ).json()
            wait_for(
                lambda: "notices are posted to" in "\n".join(log_lines(shown["keeper"].get("log"))),
                what="the second fleet's outbox started",
            )
            first = (fleet.fleet_id, fleet.director)
            fleet.fleet_id, fleet.director = second["fleet_id"], second["director_member_id"]
            try:
                message_id = post_notice(fleet, "host box cannot be reached")
            finally:
                fleet.fleet_id, fleet.director = first
            [doc] = wait_for(lambda: documents(own), timeout=30, what="the notice posted to the fleet's own URL")
            assert doc["message_id"] == message_id and doc["fleet"]["id"] == second["fleet_id"]
            assert not [d for d in documents(setting) if d["fleet"]["id"] == second["fleet_id"]]
        finally:
            fleet.cafleet("fleet", "delete", str(second["fleet_id"]), environ=environ)


# --- who may say where notices go ---------------------------------------------------------------


def test_a_keeper_a_member_starts_never_takes_the_members_notify_url(kept, receivers):
    """A member (by its pane) that starts the keeper with CAFLEET_NOTIFY_URL of its own gets
    no notice posted there; the same URL given by the Director's command is posted to."""
    from tests.support.keeper import keeper, kill, running_keeper

    evil, own = receivers(), receivers()
    with kept(CAFLEET_NOTIFY_URL=own.url()) as fleet:
        member = fleet.create("m")
        kill(keeper(fleet)["pid"])
        wait_for(lambda: keeper(fleet)["state"] == "not running", what="the keeper to end")
        as_member = dict(fleet.environ, TMUX_PANE=member["pane_id"], CAFLEET_NOTIFY_URL=evil.url())
        waited = fleet.cafleet("message", "wait", str(member["member_id"]), "--timeout", "0", environ=as_member)
        assert waited.code in (0, 3), waited  # it started a keeper all the same
        started = running_keeper(fleet)
        first = post_notice(fleet, "a notice while the member's keeper runs")  # owed a post, were it told one
        del first
        # given its URL, the keeper posts within a round (0.25 s); a post within 5 s is a failure
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not evil.requests:
            time.sleep(0.05)
        kill(started["pid"])
        wait_for(lambda: keeper(fleet)["state"] == "not running", what="the member's keeper to end")
        assert evil.requests == [], evil.requests
        evil_at = evil.url().split("/")[2]  # host:port, as a log line names a URL
        assert not any(evil_at in line for line in log_lines(started.get("log")))
        # the Director's command, with the same URL: that keeper posts there
        as_director = dict(fleet.environ, CAFLEET_NOTIFY_URL=evil.url())
        fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "0", environ=as_director)
        running_keeper(fleet)
        wait_for(lambda: "notices are posted to" in "\n".join(keeper_log(fleet)), what="the outbox started")
        second = post_notice(fleet, "a notice while the Director's keeper runs", subject="host:other")
        [doc] = wait_for(lambda: documents(evil), timeout=30, what="the Director's keeper's post")
        assert doc["message_id"] == second


def test_an_ntfy_title_that_is_not_ascii_is_one_encoded_line_that_decodes_to_it():
    from email.header import decode_header

    from cafleet.delivery.supervision.outbox import _header

    assert _header("member  2\tblocked") == "member 2 blocked"  # ASCII: as it is, on one line
    title = "réunion " * 40 + "— 会議"
    encoded = _header(title)
    assert encoded.isascii() and "\n" not in encoded and "\r" not in encoded
    assert "".join(
        part.decode(charset or "ascii") if isinstance(part, bytes) else part for part, charset in decode_header(encoded)
    ) == " ".join(title.split())
