"""The JSON API under ``/api/``: fleets, roster, timeline, inbox, and sending as the Director.

Every view is scoped by the id in its path: a fleet's timeline holds only messages between
that fleet's members, an inbox only the messages addressed to that member. Reads and the
send run in worker threads (plain ``def`` handlers); the send is the same path as
``cafleet message send`` (persist, then the notification drain).
"""

from __future__ import annotations

from contextlib import contextmanager

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse

from cafleet import validation
from cafleet.broker import fleets, members, messages, timeline
from cafleet.errors import CafleetError, Conflict, UsageError, shown

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import TypeVar

    from cafleet.broker.records import FleetRecord, MemberBrief, MemberDetail
    from cafleet.store.protocol import Store

    R = TypeVar("R")  # a roster's record: brief or detail

DEFAULT_PAGE = 50
MAX_PAGE = 200
MAX_BODY_BYTES = 1024 * 1024
SEND_FIELDS = ("from_member_id", "to_member_id", "text")


class ApiError(Exception):
    """A request the API refuses before it reaches the broker (bad id, bad body)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


def _refused(status: int, error: CafleetError) -> ApiError:
    """A validation error as the API says it: the message without its full stop, no hint."""
    return ApiError(status, error.message.removesuffix("."))


def parse_id(raw: str | None, what: str) -> int:
    """A positive integer id from a path or query string (400 otherwise)."""
    if raw is None or raw == "":
        raise ApiError(400, f"{what} is required")
    try:
        return validation.parse_id(raw, what)
    except UsageError as error:
        raise _refused(400, error) from None


def _page_size(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_PAGE
    value = validation.bounded_int(raw, 1, MAX_PAGE)
    if value is None:
        raise ApiError(400, f"limit must be an integer from 1 to {MAX_PAGE}, got {shown(raw)}")
    return value


@contextmanager
def read_snapshot(store: Store):
    """One read transaction, so the fleet, roster and activity agree with each other.

    A read transaction under WAL never blocks writers; it is always closed before the
    handler returns.
    """
    with store.read():
        yield store


def _fleet_and_roster(
    store: Store, fleet_id: int, read: Callable[[Store, int], list[R]]
) -> tuple[FleetRecord, list[R]]:
    """The fleet (deleted ones too) and ``read(store, fleet_id)`` of its members: none for a
    deleted fleet, also one deleted between the two reads."""
    fleet = fleets.get_fleet(store, fleet_id)
    if fleet["deleted_at"] is not None:
        return fleet, []
    try:
        return fleet, read(store, fleet_id)
    except Conflict:  # deleted between the two reads
        return fleet, []


def fleet_view(store: Store, fleet_id: int, states: dict | None = None, settings=None) -> dict:
    """The fleet (deleted ones too) and its roster; a deleted fleet has no active members.

    ``states``: supervision states by member id (``delivery.supervision.fleet_states``,
    the same as `fleet watch` and `member list --state`), added as ``state`` and
    ``state_detail``; the root Director's state is ``director``. With states the view also
    has ``attention``: what needs a person (``web.attention``), so every roster event
    carries it; ``settings`` (the server's) give its notices their link.
    """
    fleet, detailed = _fleet_and_roster(store, fleet_id, members.roster_detail)
    roster = [_placed(member) for member in detailed]
    if states is None or fleet["deleted_at"] is not None:
        return {"fleet": fleet, "members": roster}
    from cafleet.delivery.supervision import liveness
    from cafleet.web import attention

    liveness.merge_states(roster, states)
    return {"fleet": fleet, "members": roster, "attention": attention.items(store, fleet_id, states, settings=settings)}


def fleet_view_with_states(store: Store, fleet_id: int, settings=None) -> dict:
    """``fleet_view`` with every member pane inspected, from one read of the roster."""
    from cafleet.delivery.supervision import liveness

    fleet, detailed = _fleet_and_roster(store, fleet_id, members.roster_detail)
    if not detailed:  # deleted (a live fleet has its Director)
        return {"fleet": fleet, "members": []}
    states = liveness.fleet_states(store, fleet_id, liveness.MuxPool(), roster=detailed)
    roster = liveness.merge_states([_placed(member) for member in detailed], states)
    from cafleet.web import attention

    return {"fleet": fleet, "members": roster, "attention": attention.items(store, fleet_id, states, settings=settings)}


def _placed(member: MemberDetail) -> MemberBrief:
    """The roster record with where the member's pane is: its session and window (the
    WebUI shows ``window · pane``)."""
    placement = member["placement"]
    record = members.brief(member)
    record["session"] = placement["session"] if placement else None  # type: ignore[typeddict-unknown-key]
    record["window_id"] = placement["window_id"] if placement else None  # type: ignore[typeddict-unknown-key]
    return record


def member_states(store: Store, fleet_id: int) -> dict:
    """Inspect every member pane now (one multiplexer call each); {} for a deleted fleet."""
    from cafleet.delivery.supervision import liveness

    try:
        return liveness.fleet_states(store, fleet_id, liveness.MuxPool())
    except Conflict:
        return {}


def list_fleets(request: Request) -> JSONResponse:
    with request.app.state.pool.borrow() as store:
        return JSONResponse(fleets.list_fleets(store))


def fleet_detail(request: Request) -> JSONResponse:
    """The fleet, its roster with states, and its keeper (docs/delivery.md): ``keeper`` is
    ``fleet show --json``'s (running, pid, since, host, log, enabled)."""
    fleet_id = parse_id(request.path_params["fleet_id"], "fleet id")
    config = request.app.state.config
    with request.app.state.pool.borrow() as store, read_snapshot(store):
        view = fleet_view_with_states(store, fleet_id, config.settings)
        from cafleet.delivery.supervision import keeper_control

        found = keeper_control.status(store, config.settings, fleet_id)
        view["keeper"] = dict(found.as_dict(), enabled=bool(config.settings.keeper))
        return JSONResponse(view)


def attention_everywhere(request: Request) -> JSONResponse:
    """``{"items": [...]}``: the blocked members of every live fleet, oldest first, each with
    its dialog (``web.attention.every_fleet``); the page ``/attention`` shows it."""
    from cafleet.web import attention

    with request.app.state.pool.borrow() as store, read_snapshot(store):
        return JSONResponse({"items": attention.every_fleet(store)})


def fleet_usage(request: Request) -> JSONResponse:
    """Tokens and dollars per member and for the fleet, with budgets (``cafleet fleet usage``),
    from the stored totals the fleet keeper keeps current: no agent's file is read (docs/usage.md)."""
    from cafleet.delivery import usage

    fleet_id = parse_id(request.path_params["fleet_id"], "fleet id")
    with request.app.state.pool.borrow() as store:
        return JSONResponse(usage.fleet_usage(store, request.app.state.config.environ, fleet_id, fresh=False))


def fleet_messages(request: Request) -> JSONResponse:
    """Newest first; ``?before=ID`` continues below the last id of the previous page."""
    fleet_id = parse_id(request.path_params["fleet_id"], "fleet id")
    limit = _page_size(request.query_params.get("limit"))
    before = request.query_params.get("before")
    before_id = None if before is None else parse_id(before, "before")
    with request.app.state.pool.borrow() as store:
        fleets.get_fleet(store, fleet_id)
        page = timeline.fleet_timeline(store, fleet_id, limit=limit, before_id=before_id)
    next_before = page[-1]["message_id"] if len(page) == limit else None
    return JSONResponse({"fleet_id": fleet_id, "messages": page, "next_before": next_before})


def _member_in_scope(request: Request, store: Store, member_id: int) -> MemberDetail:
    """The member, refused (404) when ``?fleet_id=`` names another fleet than its own."""
    scope = request.query_params.get("fleet_id")
    fleet_id = None if scope is None else parse_id(scope, "fleet_id")
    member = members.get_member(store, member_id)
    if fleet_id is not None and member["fleet_id"] != fleet_id:
        raise ApiError(404, f"member {member_id} is not in fleet {fleet_id}")
    return member


def member_inbox(request: Request) -> JSONResponse:
    """Pending incoming messages in poll order; ``?fleet_id=`` refuses a member of another fleet."""
    member_id = parse_id(request.path_params["member_id"], "member id")
    with request.app.state.pool.borrow() as store:
        member = _member_in_scope(request, store, member_id)
        pending = messages.poll(store, member_id)
    summary = {key: member[key] for key in ("member_id", "fleet_id", "name", "kind", "status")}
    return JSONResponse({"member": summary, "messages": pending})


MAX_DIFF_CHARS = 1_000_000  # a larger diff is cut there (``truncated``): `cafleet member diff` prints it whole


def member_diff(request: Request) -> JSONResponse:
    """A member's worktree and its changes against its base, read-only (``cafleet member
    diff``; docs/worktrees.md): ``{"member_id", "worktree", "diff", "truncated", "error"}``;
    ``worktree`` is None for a member without one, ``error`` says why there is no diff."""
    from cafleet.broker import worktrees as worktree_records
    from cafleet.delivery import worktrees

    member_id = parse_id(request.path_params["member_id"], "member id")
    with request.app.state.pool.borrow() as store:
        _member_in_scope(request, store, member_id)
        row = worktree_records.get(store, member_id)
        out: dict = {"member_id": member_id, "worktree": worktree_records.public(row), "diff": None}
        out.update(truncated=False, error=None)
        if row is not None:
            try:
                text = worktrees.diff(store, request.app.state.config.environ, member_id, stat=False)["diff"]
            except CafleetError as error:
                out["error"] = error.message.removesuffix(".")
            else:
                out["diff"], out["truncated"] = text[:MAX_DIFF_CHARS], len(text) > MAX_DIFF_CHARS
    return JSONResponse(out)


async def send_message(request: Request) -> JSONResponse:
    """``{"from_member_id", "to_member_id", "text"}`` → 201 with the record and ``notified``.

    The sender must be its fleet's root Director: the dashboard speaks for the Director,
    never for a member. A recipient over its budget (or its fleet's) is refused with 409
    by the send path's gate, as ``message send`` refuses it; a NUL in the text with 400.
    """
    payload = _json_object(await _read_body(request))
    from_id, to_id, text = _send_fields(payload)
    return await run_in_threadpool(_send, request.app.state, from_id, to_id, text)


def _send(state, from_id: int, to_id: int, text: str) -> JSONResponse:
    from cafleet.delivery.keystrokes import drain

    config = state.config
    with state.pool.borrow() as store:
        sender = members.get_member(store, from_id)
        if sender["kind"] != "director":
            raise ApiError(
                422,
                f"member {from_id} is not the Director of fleet {sender['fleet_id']}; "
                "the WebUI sends only as a fleet's Director",
            )
        record, outcome = drain.send(store, config.settings, from_id, to_id, text)
    body = dict(record, notified=outcome.notified)
    if outcome.failure:
        body["warning"] = outcome.failure
    return JSONResponse(body, status_code=201)


async def _read_body(request: Request) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise ApiError(413, f"request body is larger than {MAX_BODY_BYTES} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(413, f"request body is larger than {MAX_BODY_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _json_object(raw: bytes) -> dict:
    import json

    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ApiError(400, "request body is not valid UTF-8 JSON") from None
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise ApiError(400, "request body is nested too deeply") from None
    if not isinstance(value, dict):
        raise ApiError(422, "request body must be a JSON object")
    return value


def _exact_fields(payload: dict, fields: tuple[str, ...]) -> None:
    """422 unless ``payload`` has exactly ``fields``, naming the first one wrong."""
    unexpected = sorted(set(payload) - set(fields))
    if unexpected:
        raise ApiError(422, f"unexpected field {unexpected[0]!r}; expected {', '.join(fields)}")
    missing = [name for name in fields if name not in payload]
    if missing:
        raise ApiError(422, f"missing field {missing[0]!r}")


def _send_fields(payload: dict) -> tuple[int, int, str]:
    _exact_fields(payload, SEND_FIELDS)
    try:
        ids = [validation.id_number(payload[name], name) for name in SEND_FIELDS[:2]]
        text = validation.body(payload["text"], "text")
    except UsageError as error:
        raise _refused(422, error) from None
    if "\x00" in text:  # PostgreSQL text cannot hold it: refused alike on both stores, before the broker
        raise ApiError(400, "text contains the character U+0000 (NUL), which a message cannot hold; remove it")
    return ids[0], ids[1], text


ANSWER_FIELDS = ("choice", "dialog")
ANSWER_LABEL = "label"  # optional: the label the button showed


async def answer_member(request: Request) -> JSONResponse:
    """``{"choice": N, "dialog": DIGEST, "label": LABEL}`` (``label`` optional) → 200
    ``{"member_id", "pane_id", "choice", "label", "digest"}``: pick option N of the dialog
    on the member's screen, only while its digest is DIGEST and, when given, option N reads
    LABEL (``cafleet member answer``'s path, :mod:`cafleet.delivery.keystrokes.answer`); 409 with
    nothing sent when the dialog changed, was answered, has no option N or N reads otherwise.
    Screened like the composer's send (web/security.py: same-origin JSON only)."""
    member_id = parse_id(request.path_params.get("member_id"), "member id")
    payload = _json_object(await _read_body(request))
    label = payload.pop(ANSWER_LABEL, None)
    _exact_fields(payload, ANSWER_FIELDS)
    choice, digest = payload["choice"], payload["dialog"]
    if label is not None and (not isinstance(label, str) or not label.strip() or "\n" in label or "\r" in label):
        raise ApiError(422, "label must be the option's label as the dialog shows it (one non-blank line)")
    if isinstance(choice, bool) or not isinstance(choice, int) or not 1 <= choice <= 99:
        raise ApiError(422, "choice must be the number of one of the dialog's options (1 to 99)")
    if not isinstance(digest, str):
        raise ApiError(422, "dialog must be the dialog's digest (a string of hex digits)")
    return await run_in_threadpool(_answer, request.app.state, member_id, choice, digest, label)


def _answer(state, member_id: int, choice: int, digest: str, label: str | None) -> JSONResponse:
    from cafleet.delivery.keystrokes.answer import answer_member as answer

    config = state.config
    with state.pool.borrow() as store:
        record = answer(store, config.settings, member_id, choice, digest, label)
    return JSONResponse(record)
