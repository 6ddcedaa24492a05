"""Notices posted out (docs/delivery.md, "Notices posted out"): the URLs a fleet's notices
are posted to and what became of each post. Persistence and validation only: the posting is
:mod:`cafleet.delivery.supervision.outbox`.

A URL is ``http(s)://...``, optionally prefixed by its format (``json+``, ``slack+``,
``ntfy+``); without a prefix, ``hooks.slack.com`` gets Slack's shape, ``ntfy.sh`` ntfy's and
any other host the plain JSON document. A fleet's own URLs (``fleet create --notify``:
``cafleet_aux_fleet_notify``) win over the keeper's ``CAFLEET_NOTIFY_URL``.

``cafleet_aux_notice_posts`` holds one row per notice and URL, keyed by the URL's digest
(:func:`url_key`: a URL may hold a token, and this table is read by `fleet show` and
`doctor`), plus one ``start`` row per URL: the newest notice of the fleet when the URL was
first seen, so that notices older than the URL are never posted. Reads work on a database
without the tables.
"""

from __future__ import annotations

from cafleet import clock
from cafleet.broker import records
from cafleet.validation import check_url, shown_url, split_format, split_urls, url_fault  # noqa: F401 -- the URLs' rules

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

FLEET_TABLE = "cafleet_aux_fleet_notify"
POSTS_TABLE = "cafleet_aux_notice_posts"
START, PENDING, POSTED, GAVE_UP = "start", "pending", "posted", "gave_up"


def url_key(url: str) -> str:
    """The URL's digest, what the posts table stores instead of it."""
    import hashlib

    return hashlib.sha256(url.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def set_fleet_urls(store: Store, fleet_id: int, urls: list[str]) -> None:
    """Post ``fleet_id``'s notices to ``urls`` (each checked by the caller)."""
    store.create_auxiliary([FLEET_TABLE])
    with store.write():
        store.execute(f"DELETE FROM {FLEET_TABLE} WHERE fleet_id = ?", (fleet_id,))
        for url in dict.fromkeys(urls):
            store.execute(f"INSERT INTO {FLEET_TABLE} (fleet_id, url) VALUES (?, ?)", (fleet_id, url))


def fleet_urls(store: Store, fleet_id: int) -> list[str]:
    """The fleet's own URLs (``fleet create --notify``), in a stable order."""
    if not records.has_table(store, FLEET_TABLE):
        return []
    rows = store.execute(f"SELECT url FROM {FLEET_TABLE} WHERE fleet_id = ? ORDER BY url", (fleet_id,)).fetchall()
    return [str(row[0]) for row in rows]


def urls_for(store: Store, fleet_id: int, fallback: tuple[str, ...] | list[str] | None) -> list[str]:
    """The URLs the fleet's notices go to: its own, else ``fallback`` (CAFLEET_NOTIFY_URL)."""
    return fleet_urls(store, fleet_id) or list(fallback or ())


# --- the posts ------------------------------------------------------------------------------


def newest_notice(store: Store, fleet_id: int) -> int:
    """The id of the fleet's newest notice, 0 when none."""
    if not records.has_table(store, "cafleet_aux_notices"):
        return 0
    row = store.execute("SELECT MAX(message_id) FROM cafleet_aux_notices WHERE fleet_id = ?", (fleet_id,)).fetchone()
    return int(row[0] or 0)


def cursors(store: Store, fleet_id: int, keys: list[str]) -> dict[str, int]:
    """``{url key: the newest notice id it has a row for}``, a ``start`` row included;
    a key that has none yet is given a ``start`` row at the fleet's newest notice now."""
    store.create_auxiliary([POSTS_TABLE])
    found = {
        str(row[0]): int(row[1])
        for row in store.execute(
            f"SELECT url_key, MAX(message_id) FROM {POSTS_TABLE} WHERE fleet_id = ? GROUP BY url_key", (fleet_id,)
        ).fetchall()
    }
    missing = [key for key in keys if key not in found]
    if missing:
        newest = newest_notice(store, fleet_id)
        with store.write():
            for key in missing:
                store.execute(
                    f"INSERT INTO {POSTS_TABLE} (fleet_id, message_id, url_key, state, attempts) VALUES (?, ?, ?, ?, 0) "
                    "ON CONFLICT DO NOTHING",
                    (fleet_id, newest, key, START),
                )
                found[key] = newest
    return {key: found[key] for key in keys}


# A notice as the posts read it: its row and its message's text and time.
_NOTICE_KEYS = ("message_id", "kind", "subject", "member_id", "digest", "text", "created_at")
_NOTICES = (
    "SELECT n.message_id, n.kind, n.subject, n.member_id, n.digest, m.text, m.created_at "
    "FROM cafleet_aux_notices n JOIN messages m ON m.message_id = n.message_id "
)


def _notices(store: Store, condition: str, params: tuple) -> list[dict]:
    """The notices ``condition`` (what follows WHERE) selects, as dicts of _NOTICE_KEYS."""
    rows = store.execute(_NOTICES + "WHERE " + condition, params).fetchall()
    return [dict(zip(_NOTICE_KEYS, row, strict=True)) for row in rows]


def notices_after(store: Store, fleet_id: int, after: int) -> list[dict]:
    """The fleet's notices with an id above ``after``, oldest first, each with its message's
    text and time."""
    if not records.has_table(store, "cafleet_aux_notices", recheck=True):
        return []
    return _notices(store, "n.fleet_id = ? AND n.message_id > ? ORDER BY n.message_id", (fleet_id, after))


def notice(store: Store, message_id: int) -> dict | None:
    """One notice as :func:`notices_after` gives it, or None."""
    if not records.has_table(store, "cafleet_aux_notices"):
        return None
    found = _notices(store, "n.message_id = ?", (message_id,))
    return found[0] if found else None


def open_notices(store: Store, fleet_id: int, limit: int) -> list[dict]:
    """The fleet's notices whose condition still holds (their episode not cleared), oldest
    first, at most ``limit``, as :func:`notices_after` gives them."""
    if not records.has_table(store, "cafleet_aux_notices"):
        return []
    return _notices(store, "n.fleet_id = ? AND n.cleared_at IS NULL ORDER BY n.message_id LIMIT ?", (fleet_id, limit))


def add_pending(store: Store, fleet_id: int, pairs: list[tuple[int, str]]) -> None:
    """A ``pending`` row for each (notice, url key), due now."""
    if not pairs:
        return
    now = clock.now()
    with store.write():
        for message_id, key in pairs:
            store.execute(
                f"INSERT INTO {POSTS_TABLE} (fleet_id, message_id, url_key, state, attempts, next_try_at) "
                "VALUES (?, ?, ?, ?, 0, ?) ON CONFLICT DO NOTHING",
                (fleet_id, message_id, key, PENDING, now),
            )


def pending(store: Store, fleet_id: int, keys: list[str]) -> list[tuple[int, str, int]]:
    """``(message id, url key, attempts)`` of the fleet's posts still to make, oldest first."""
    if not keys or not records.has_table(store, POSTS_TABLE):
        return []
    rows = store.execute(
        f"SELECT message_id, url_key, attempts FROM {POSTS_TABLE} WHERE fleet_id = ? AND state = ? "
        f"AND url_key IN ({','.join('?' * len(keys))}) ORDER BY message_id",
        (fleet_id, PENDING, *keys),
    ).fetchall()
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def record_posted(store: Store, fleet_id: int, message_id: int, key: str) -> None:
    with store.write():
        store.execute(
            f"UPDATE {POSTS_TABLE} SET state = ?, attempts = attempts + 1, posted_at = ?, next_try_at = NULL "
            "WHERE fleet_id = ? AND message_id = ? AND url_key = ?",
            (POSTED, clock.now(), fleet_id, message_id, key),
        )


def record_failed(store: Store, fleet_id: int, message_id: int, key: str, error: str, next_try_at: str | None) -> None:
    """One failed try: ``next_try_at`` None gives the post up."""
    now = clock.now()
    with store.write():
        store.execute(
            f"UPDATE {POSTS_TABLE} SET state = ?, attempts = attempts + 1, next_try_at = ?, last_error = ?, "
            "failed_at = COALESCE(failed_at, ?) WHERE fleet_id = ? AND message_id = ? AND url_key = ?",
            (PENDING if next_try_at else GAVE_UP, next_try_at, error, now, fleet_id, message_id, key),
        )


def status(store: Store, fleet_id: int) -> dict:
    """What `fleet show` and `doctor` say of the fleet's posts: ``last_ok_at`` (the newest
    2xx), and, when some are failing (still tried after a failure, or given up since the
    last success), ``failing_since``, ``reason`` and ``failing`` (how many)."""
    result: dict = {"last_ok_at": None, "failing": 0, "failing_since": None, "reason": None}
    if not records.has_table(store, POSTS_TABLE):
        return result
    row = store.execute(
        f"SELECT MAX(posted_at) FROM {POSTS_TABLE} WHERE fleet_id = ? AND state = ?", (fleet_id, POSTED)
    ).fetchone()
    result["last_ok_at"] = row[0]
    rows = store.execute(
        f"SELECT failed_at, last_error FROM {POSTS_TABLE} WHERE fleet_id = ? AND failed_at IS NOT NULL "
        "AND (state = ? OR (state = ? AND failed_at > COALESCE(?, ''))) ORDER BY failed_at",
        (fleet_id, PENDING, GAVE_UP, result["last_ok_at"]),
    ).fetchall()
    if rows:
        result.update(failing=len(rows), failing_since=rows[0][0], reason=rows[-1][1])
    return result


def failing_fleets(store: Store) -> list[int]:
    """The fleets with a post failing (:func:`status`), for `doctor`."""
    if not records.has_table(store, POSTS_TABLE):
        return []
    rows = store.execute(
        f"SELECT DISTINCT fleet_id FROM {POSTS_TABLE} WHERE failed_at IS NOT NULL AND state IN (?, ?) ORDER BY fleet_id",
        (PENDING, GAVE_UP),
    ).fetchall()
    return [int(row[0]) for row in rows if status(store, int(row[0]))["failing"]]
