"""`cafleet fleet watch`: print one line per event, flushed at once."""

from __future__ import annotations

from cafleet import render

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def _line(item: dict, ctx: Context) -> str:
    if ctx.json:
        return render.to_json(item)
    where = f"fleet={item['fleet_id']}"
    if item["member_id"] is not None:
        where += f" member={item['member_id']}"
    if item["message_id"] is not None:
        where += f" message={item['message_id']}"
    text = f"{item['event']} {where}: {render.inline(item['detail'])}"  # it can quote a host's or a pane's text
    if "message" in item:
        text += " | " + render.message_line(item["message"], ctx.max_text_len)
    if item.get("worktree"):
        tree = item["worktree"]
        text += f" (worktree {render.inline(tree['path'])}, branch {render.inline(tree['branch'])})"
    if item["command"]:
        text += f"  ->  {item['command']}"
    return text


def watch(ctx: Context, fleet_id, interval, idle_after):
    from cafleet.delivery.supervision.watch import Watcher, event
    from cafleet.errors import DatabaseError

    def end(reason):
        ctx.out(_line(event("end", fleet_id, detail=f"watch ended: {reason}"), ctx))

    watcher = Watcher(
        ctx.store(),
        ctx.settings,
        fleet_id,
        interval,
        idle_after,
        lambda item: ctx.out(_line(item, ctx)),
        ctx.settings.pg_reconnect_timeout,
        ctx.hooks,
    )
    try:
        reason = watcher.run()
    except DatabaseError as error:  # gave up on the database mid-stream: the end event, then the error
        end(ctx.hide_secrets(str(error)).removesuffix("."))
        raise
    end(reason)
