"""Notices posted out: the keeper's outbox (docs/delivery.md, "Notices posted out").

Every round of the keeper, :class:`Outbox` reads the fleet's notices newer than what it has
already handed on (``cafleet_aux_notices``; one query), records a ``pending`` post per notice
and URL (``cafleet_aux_notice_posts``: :mod:`cafleet.broker.notify`) and hands each post that
is due to the URL's own :class:`Poster`, a thread that POSTs it (``urllib.request``,
:data:`TIMEOUT` s). The thread never touches the store: its outcome comes back through a
queue and is recorded by the keeper's own loop on its next round. So a slow or dead receiver
never holds up a preview, a notice or the keeper's loop; at most it holds up the posts to
that one URL.

A 2xx ends the post (``posted``); a connection error, a timeout, a 5xx or a 429 is tried
again after ``CAFLEET_NOTIFY_BACKOFF`` s (5), doubling to 60 times that (5 min); another 4xx
gives the post up (``gave_up``). One log line per new failure reason of a URL, not one per
try. Only notices newer than the URL are posted (the ``start`` row of
:func:`cafleet.broker.notify.cursors`). A keeper that ends between a 2xx and its record posts
that notice once more when it starts again (at least once, as the previews).

No secret leaves: every text of a post passes :class:`cafleet.credentials.Scrubber` for the
database location (and :func:`~cafleet.credentials.redact` for any password it spells), and
a URL is only ever logged as :func:`cafleet.broker.notify.shown_url` says it.
"""

from __future__ import annotations

import time

from cafleet.broker import notify

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from cafleet import config
    from cafleet.store.protocol import Store

TIMEOUT = 10.0  # seconds one POST may take
COLLECT = 0.25  # seconds between two looks for the outcome of a post in flight
CEILING = 60  # the back-off doubles up to this many times its first step
HIGH = ("awaiting_user", "dead", "over_budget", "unreachable", "not_revived", "exec_vanished")


class Outbox:
    """The fleet's posts (see the module's text); ``say`` gets one line per event worth logging."""

    def __init__(self, store: Store, settings: config.Settings, fleet_id: int, say) -> None:
        import queue

        self.store, self.fleet_id, self.say = store, fleet_id, say
        self.fallback = notify.split_urls(settings.notify_url or "")
        self.backoff = float(settings.notify_backoff)
        self.public_url = (settings.public_url or "").rstrip("/")
        self.location = settings.database_url
        self.urls: dict[str, str] | None = None  # url key -> URL, read on the first round (in the loop)
        self.cursor: dict[str, int] = {}
        self.due: dict[tuple[int, str], tuple[float, int]] = {}  # (notice, key) -> (when, tries so far)
        self.in_flight: set[tuple[int, str]] = set()
        self.problem: dict[str, str] = {}  # key -> the failure last said
        self.posters: dict[str, Poster] = {}
        self.bodies: dict[int, dict] = {}  # notice id -> its row, while a post of it is owed
        self.results: queue.SimpleQueue = queue.SimpleQueue()

    def start(self) -> None:
        """The URLs, where each one's posts start, and the posts owed before a restart."""
        urls = notify.urls_for(self.store, self.fleet_id, self.fallback)
        keys = {notify.url_key(url): url for url in urls}
        if keys:
            from cafleet.credentials import Scrubber

            self.scrub = Scrubber(self.location)
            self.cursor = notify.cursors(self.store, self.fleet_id, list(keys))
            for message_id, key, attempts in notify.pending(self.store, self.fleet_id, list(keys)):
                self.due[(message_id, key)] = (time.monotonic(), attempts)  # owed before a restart: now
            self.say(f"notices are posted to {', '.join(notify.shown_url(url) for url in urls)}")
        self.urls = keys

    def close(self) -> None:
        for poster in self.posters.values():
            poster.stop()

    def round(self) -> float | None:
        """Record what came back, hand on what is new or due; return when something is due
        next (``time.monotonic()``), or None."""
        if self.urls is None:
            self.start()
        if not self.urls:
            return None
        self.collect()
        self.take_new()
        now = time.monotonic()
        for pair, (when, _tries) in sorted(self.due.items()):
            if when <= now and pair not in self.in_flight:
                self.hand_on(pair)
        waiting = [when for pair, (when, _t) in self.due.items() if pair not in self.in_flight]
        if self.in_flight:
            waiting.append(now + COLLECT)
        return min(waiting, default=None)

    def take_new(self) -> None:
        after = min(self.cursor.values())
        fresh = notify.notices_after(self.store, self.fleet_id, after)
        if not fresh:
            return
        pairs = []
        for row in fresh:
            self.bodies[row["message_id"]] = row
            for key, seen in self.cursor.items():
                if row["message_id"] > seen:
                    pairs.append((row["message_id"], key))
        notify.add_pending(self.store, self.fleet_id, pairs)
        for pair in pairs:
            self.due[pair] = (time.monotonic(), 0)
        for key in self.cursor:
            self.cursor[key] = max(self.cursor[key], fresh[-1]["message_id"])

    def hand_on(self, pair: tuple[int, str]) -> None:
        message_id, key = pair
        row = self.bodies.get(message_id) or notify.notice(self.store, message_id)
        if row is None:  # its message is gone: nothing to post
            self.due.pop(pair, None)
            return
        self.bodies[message_id] = row
        kind, target = notify.split_format((self.urls or {})[key])
        body, headers = encode(kind, self.document(row))
        poster = self.posters.get(key)
        if poster is None:
            poster = self.posters[key] = Poster(target, self.results)
        self.in_flight.add(pair)
        poster.put(pair, body, headers)

    def collect(self) -> None:
        while not self.results.empty():
            pair, outcome, retry = self.results.get()
            self.in_flight.discard(pair)
            message_id, key = pair
            shown = notify.shown_url((self.urls or {})[key])
            tries = self.due.get(pair, (0.0, 0))[1] + 1
            if outcome is None:
                self.due.pop(pair, None)
                notify.record_posted(self.store, self.fleet_id, message_id, key)
                if self.problem.pop(key, None) is not None:
                    self.say(f"posts to {shown} work again (notice {message_id} posted)")
                else:
                    self.say(f"posted notice {message_id} to {shown}")
            elif retry:
                pause = min(self.backoff * CEILING, self.backoff * 2 ** (tries - 1))
                self.due[pair] = (time.monotonic() + pause, tries)
                from cafleet import clock

                next_try = clock.from_epoch(time.time() + pause)
                notify.record_failed(self.store, self.fleet_id, message_id, key, outcome, next_try)
                if self.problem.get(key) != outcome:
                    self.problem[key] = outcome
                    self.say(f"notice {message_id} not posted to {shown}: {outcome}; trying again with back-off")
            else:
                self.due.pop(pair, None)
                notify.record_failed(self.store, self.fleet_id, message_id, key, outcome, None)
                self.problem[key] = outcome
                self.say(f"notice {message_id} not posted to {shown}: {outcome}; given up")
            if not any(p[0] == message_id for p in self.due):
                self.bodies.pop(message_id, None)

    def document(self, row: dict) -> dict:
        """The notice as one JSON object (:func:`document`), scrubbed."""
        return document(self.store, self.fleet_id, row, self.public_url, self.scrub)


def document(store: Store, fleet_id: int, row: dict, public_url: str, scrub, fleet: Mapping | None = None) -> dict:
    """A notice (a row as :func:`cafleet.broker.notify.notices_after` gives it) as the one
    JSON object a plain-JSON post carries (docs/delivery.md, "Notices posted out"), every
    text passed through ``scrub``. The only builder of it: `fleet watch --json` and the
    WebUI's attention list carry the same object. ``fleet``: the fleet's record, when the
    caller has read it already."""
    from cafleet.broker import fleets

    name = (fleet or fleets.get_fleet(store, fleet_id))["name"]
    doc: dict = {
        "kind": row["kind"],
        "fleet": {"id": fleet_id, "name": name},
        "subject": row["subject"],
    }
    if row["member_id"] is not None:
        doc["member"] = member(store, row["member_id"])
    doc["text"] = row["text"]
    if row["digest"]:
        doc["dialog"] = row["digest"]
    doc["created_at"] = row["created_at"]
    doc["message_id"] = row["message_id"]
    if public_url:  # a dialog: the page that answers it; anything else: the fleet's dashboard
        where = "attention" if row["kind"] == "awaiting_user" else f"#fleet={fleet_id}"
        doc["link"] = f"{public_url.rstrip('/')}/{where}"
    return scrubbed(doc, scrub)


def reader(settings: config.Settings):
    """``(public URL, scrubber)`` for :func:`document`, from a command's or a server's
    settings: the same link and the same scrubbing as the keeper's posts."""
    from cafleet.credentials import Scrubber

    return (settings.public_url or "").rstrip("/"), Scrubber(settings.database_url)


def member(store: Store, member_id: int) -> dict:
    """``{"id", "name", "host"}`` of a member (its pane's host, this machine's name when local)."""
    import os

    from cafleet.broker import members
    from cafleet.errors import CafleetError, NotFound
    from cafleet.mux.ssh import split_session

    try:
        record = members.get_member(store, member_id)
    except NotFound:
        return {"id": member_id, "name": None, "host": None}
    placement = record["placement"]
    try:
        host = split_session(placement["session"])[0] if placement else None
    except CafleetError:  # a damaged stored session: the notice itself says so; no host is named
        return {"id": member_id, "name": record["name"], "host": None}
    return {"id": member_id, "name": record["name"], "host": host or os.uname().nodename}


def scrubbed(value, scrub):
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {key: scrubbed(item, scrub) for key, item in value.items()}
    return value


def encode(kind: str, doc: dict) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a post of ``doc`` in ``kind`` (json, slack or ntfy)."""
    import json

    if kind == "slack":
        text = f"*{_slack(title(doc))}*\n```{_slack(doc['text'])}```"
        if "link" in doc:
            opens = "Answer it in the WebUI" if doc["kind"] == "awaiting_user" else "Open the fleet in the WebUI"
            text += f"\n<{_slack(doc['link'])}|{opens}>"
        body = json.dumps({"text": text}, ensure_ascii=False)
        return body.encode(), {"Content-Type": "application/json; charset=utf-8"}
    if kind == "ntfy":
        headers = {
            "Content-Type": "text/plain; charset=utf-8",
            "Title": _header(title(doc)),
            "Priority": "high" if doc["kind"] in HIGH else "default",
            "Tags": "cafleet," + doc["kind"],
        }
        if "link" in doc:
            headers["Click"] = doc["link"]
        return doc["text"].encode(), headers
    return json.dumps(doc, ensure_ascii=False).encode(), {"Content-Type": "application/json; charset=utf-8"}


def title(doc: dict) -> str:
    """``cafleet: awaiting_user, member 5 (coder) in fleet 2 (demo)``."""
    about = doc["subject"]
    if "member" in doc:
        about = f"member {doc['member']['id']} ({doc['member']['name'] or '-'})"
    fleet = doc["fleet"]
    return f"cafleet: {doc['kind']}, {about} in fleet {fleet['id']} ({fleet['name'] or '-'})"


def _slack(text: str) -> str:
    """Slack's escaping: only ``&``, ``<`` and ``>`` (its formatting reference)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _header(text: str) -> str:
    """A header value: ASCII as it is, else RFC 2047's encoded word (which ntfy reads), on
    one line (the standard library's encoder)."""
    flat = " ".join(text.split())
    if flat.isascii():
        return flat
    from email.header import Header

    return Header(flat, "utf-8").encode(maxlinelen=1 << 20)


class Poster:
    """One URL's thread: POSTs what it is handed, in order, and puts ``(pair, None, False)``
    (a 2xx), ``(pair, reason, True)`` (try again later) or ``(pair, reason, False)`` (given
    up) on ``results``. A daemon thread: it never holds up the keeper's end."""

    def __init__(self, target: str, results) -> None:
        import queue
        import threading

        self.target, self.results = target, results
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self.run, name="cafleet-notify", daemon=True)
        self.thread.start()

    def put(self, pair, body: bytes, headers: dict[str, str]) -> None:
        self.jobs.put((pair, body, headers))

    def stop(self) -> None:
        self.jobs.put(None)

    def run(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            pair, body, headers = job
            outcome, retry = post(self.target, body, headers)
            self.results.put((pair, outcome, retry))


def post(target: str, body: bytes, headers: dict[str, str], timeout: float = TIMEOUT) -> tuple[str | None, bool]:
    """POST ``body``: (None, False) on a 2xx, else (the reason, whether to try again). The
    reason never holds the URL (it may hold a token) or a password."""
    import base64
    import urllib.error
    import urllib.request
    from urllib.parse import unquote, urlsplit, urlunsplit

    from cafleet.credentials import redact

    parts = urlsplit(target)
    headers = dict(headers, **{"User-Agent": "cafleet"})
    if parts.username is not None or parts.password is not None:  # userinfo: Basic authentication
        pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
        headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        netloc = parts.hostname or ""
        netloc = f"[{netloc}]" if ":" in netloc else netloc
        if parts.port:
            netloc += f":{parts.port}"
        target = urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))
    request = urllib.request.Request(target, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # http(s) only, checked
            response.read(65536)
            code = response.status
    except urllib.error.HTTPError as error:
        code = error.code
        error.close()
    except TimeoutError:
        return f"no answer within {timeout:g} s", True
    except (urllib.error.URLError, OSError, ValueError) as error:
        reason = getattr(error, "reason", None) or error
        if isinstance(reason, TimeoutError):
            return f"no answer within {timeout:g} s", True
        text = str(reason).replace(target, notify.shown_url(target))
        return redact(f"cannot connect ({text})"), True
    except Exception as error:  # noqa: BLE001 -- http.client's own faults (a bad status line...)
        return redact(f"the exchange failed ({type(error).__name__})"), True
    if 200 <= code < 300:
        return None, False
    return f"answered HTTP {code}", code == 429 or code >= 500
