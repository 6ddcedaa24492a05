"""`cafleet message ...`: send, broadcast, poll, wait, listen, show, ack."""

from __future__ import annotations

from cafleet import render
from cafleet.broker import messages
from cafleet.cli.body import read_body
from cafleet.errors import DatabaseError, ExitCode

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def send(ctx: Context, from_id, to_id, force, text, file):
    from cafleet.delivery import authority
    from cafleet.delivery.keystrokes import drain

    body = read_body(ctx, text, file)
    authority.require_speaker(ctx.store(), ctx.environ, from_id)  # a member's pane sends only as that member

    def print_id(record):  # text form: the id is out before any pane input
        if not ctx.json:
            ctx.out(f"sent message {record['message_id']} to member {to_id}")

    settings = ctx.settings
    record, outcome = drain.send(
        ctx.store(), settings, from_id, to_id, body, on_stored=print_id, force=force, hooks=ctx.hooks
    )
    if ctx.json:  # one document, so it waits for "notified"
        ctx.emit(dict(record, notified=outcome.notified), None)
    _diagnose(ctx, outcome)


def broadcast(ctx: Context, from_id, text, file):
    from cafleet.delivery import authority
    from cafleet.delivery.keystrokes import drain

    body = read_body(ctx, text, file)
    authority.require_speaker(ctx.store(), ctx.environ, from_id)

    def print_each(entry):  # text form: each id is out as soon as it is committed, in recipient order
        if ctx.json:
            return
        if "message_id" in entry:
            ctx.out(f"sent message {entry['message_id']} to member {entry['to_member_id']}")
        else:
            ctx.out(f"failed to send to member {entry['to_member_id']}: {render.inline(entry['error'])}")

    def print_none(result):
        if not ctx.json and not result["sent"] and not result["failed"]:
            ctx.out("no other active members to send to")

    settings = ctx.settings
    result, outcomes = drain.broadcast(
        ctx.store(),
        settings,
        from_id,
        body,
        on_stored=print_none,
        each=print_each,
        opener=ctx.open_store,
        hooks=ctx.hooks,
    )
    if ctx.json:
        ctx.emit(result, None)
    for outcome in outcomes:
        _diagnose(ctx, outcome)
    return ExitCode.FAILURE if result["failed"] else ExitCode.OK


def poll(ctx: Context, member_id):
    records = messages.poll(ctx.store(), member_id)
    ctx.emit(records, lambda: render.messages_text(records, ctx.max_text_len) if records else "no pending messages")


def show(ctx: Context, message_id):
    record = messages.show(ctx.store(), message_id)
    ctx.emit(record, lambda: render.message_text(record, ctx.max_text_len))


def ack(ctx: Context, message_id):
    record = messages.ack(ctx.store(), message_id, ctx.hooks)
    ctx.emit(record, lambda: f"acknowledged message {message_id}")


def wait(ctx: Context, member_id, timeout):
    from cafleet.delivery import inbox
    from cafleet.delivery.keystrokes import drain

    settings = ctx.settings
    store = ctx.store()
    inbox.require_receiving(store, member_id)  # a member that can no longer receive: exit 1 at once
    tend = _keeper_tender(ctx, store, member_id)
    keeper = tend() if tend is not None else None  # the fleet's keeper runs, started now if none did, or why not
    for outcome in drain.retry_fleet(store, settings, member_id, keeper, ctx.hooks):
        _diagnose(ctx, outcome)
    records = inbox.wait_for_messages(
        store, member_id, timeout, settings.wait_interval, settings.pg_reconnect_timeout, tend, ctx.hooks
    )
    if not records:
        return ExitCode.WAIT_TIMEOUT
    ctx.emit(records, lambda: render.messages_text(records, ctx.max_text_len))


def listen(ctx: Context, member_id):
    from cafleet.delivery import inbox

    def line(record):
        return render.to_json(record) if ctx.json else render.message_line(record, ctx.max_text_len)

    def end(reason):
        ctx.out(render.to_json({"event": "end", "reason": reason}) if ctx.json else f"listen ended: {reason}")

    store = ctx.store()
    tend = _keeper_tender(ctx, store, member_id)
    if tend is not None:
        tend()
    try:
        reason = inbox.listen(
            store,
            member_id,
            lambda record: ctx.out(line(record)),
            ctx.settings.wait_interval,
            ctx.settings.pg_reconnect_timeout,
            tend,
            ctx.hooks,
        )
    except DatabaseError as error:  # gave up on the database mid-stream: the end line, then the error
        end(ctx.hide_secrets(str(error)).removesuffix("."))
        raise
    end(reason)


def _keeper_tender(ctx: Context, store, member_id):
    """With the keeper on, what ``wait`` and ``listen`` call at their start and every few
    seconds while they wait: the member's fleet keeper, started when none runs (so that a
    member blocked on a dialog gets its notice to the Director even when the keeper died
    while the Director waits); a warning on stderr each time why none runs changes. It
    returns that why ("" while one runs). None with the keeper off: nothing is started."""
    if not ctx.settings.keeper:
        return None
    from cafleet.delivery.keystrokes import drain

    fleet_id = messages.member_standing(store, member_id)[1]
    said = [""]

    def tend() -> str:
        why = drain.fleet_keeper(store, ctx.settings, fleet_id, ctx.hooks)
        if why and why != said[0]:
            ctx.err(drain.keeper_warning(why))
        said[0] = why
        return why

    return tend


def _diagnose(ctx: Context, outcome):
    if outcome.failure:
        ctx.err(outcome.failure)
