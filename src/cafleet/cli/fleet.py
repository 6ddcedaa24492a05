"""`cafleet fleet ...`: create, list, show, delete."""

from __future__ import annotations

from cafleet import render, validation
from cafleet.broker import fleets

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def create(ctx: Context, name, coding_agent, worktrees, revive, placement, notify):
    from cafleet.agents.backends import validate
    from cafleet.mux.detect import multiplexer_for_environment

    validation.name(name, "--name")
    validate(coding_agent, None, None)
    urls = [validation.check_url(url, "--notify") for value in notify for url in validation.split_urls(value)]
    if notify and not urls:
        validation.check_url("", "--notify")
    pane = multiplexer_for_environment(ctx.environ).current_pane()
    record = fleets.create_fleet(
        ctx.store(),
        name=name,
        coding_agent=coding_agent,
        backend=pane.backend,
        session=pane.session,
        window_id=pane.window_id,
        pane_id=pane.pane_id,
        identity=pane.identity,
    )
    if worktrees:
        from cafleet.broker import worktrees as worktree_records

        worktree_records.set_fleet_default(ctx.store(), record["fleet_id"], True)
    if placement:
        fleets.set_default_placement(ctx.store(), record["fleet_id"], placement)
    if revive:
        from cafleet.broker import revivals

        revivals.set_fleet(ctx.store(), record["fleet_id"], revivals.DEFAULT_PER_HOUR)
    if urls:  # before the keeper starts: it reads them once
        from cafleet.broker import notify as notify_records

        notify_records.set_fleet_urls(ctx.store(), record["fleet_id"], urls)
    shown = dict(record, worktrees=True) if worktrees else record
    shown = dict(shown, notify=[validation.shown_url(url) for url in urls]) if urls else shown
    shown = dict(shown, placement=placement) if placement else shown
    ctx.emit(
        dict(shown, revive_per_hour=revivals.DEFAULT_PER_HOUR) if revive else shown,
        lambda: (
            f"created fleet {record['fleet_id']} ({render.inline(name)}); "
            f"you are its Director, member {record['director_member_id']}"
        ),
    )
    from cafleet.delivery.keystrokes import drain

    # The fleet's keeper, started detached (docs/delivery.md); when none can run, or it is
    # stalled, a warning that says why and what fixes it: the fleet exists all the same.
    warning = drain.start_keeper(ctx.store(), ctx.settings, record["fleet_id"], ctx.hooks)
    if warning:
        ctx.err(warning)


def list_(ctx: Context):
    records = fleets.list_fleets(ctx.store())

    def text():
        if not records:
            return "no live fleets"
        return render.table(
            [
                [r["fleet_id"], r["name"] or "-", r["director_member_id"], r["active_members"], r["created_at"]]
                for r in records
            ],
            ["FLEET", "NAME", "DIRECTOR", "MEMBERS", "CREATED"],
        )

    ctx.emit(records, text)


def show(ctx: Context, fleet_id):
    from cafleet.broker import notify, revivals
    from cafleet.delivery.supervision import keeper_control

    record = fleets.get_fleet(ctx.store(), fleet_id)
    keeper = keeper_control.status(ctx.store(), ctx.settings, fleet_id)
    per_hour = revivals.per_hour(ctx.store(), fleet_id)
    urls = notify.urls_for(ctx.store(), fleet_id, notify.split_urls(ctx.settings.notify_url or ""))
    posts = dict(notify.status(ctx.store(), fleet_id), urls=[notify.shown_url(url) for url in urls])

    def text():
        lines = [
            f"fleet {record['fleet_id']}: {render.inline(record['name'] or '-')}",
            f"director: member {render.dash(record['director_member_id'])}",
            f"active members: {record['active_members']}",
            f"created: {render.inline(record['created_at'])}",
        ]
        if record["deleted_at"]:
            lines.append(f"deleted: {render.inline(record['deleted_at'])}")
        lines.append(f"revive: {revive_text(per_hour)}")
        lines.append(f"notify: {notify_text(posts)}")
        lines.append(f"keeper: {keeper_text(keeper, ctx.settings)}")  # the last line
        return "\n".join(lines)

    keeper_record = dict(keeper.as_dict(), enabled=bool(ctx.settings.keeper))
    ctx.emit(dict(record, keeper=keeper_record, revive_per_hour=per_hour, notify=posts), text)


def delete(ctx: Context, fleet_id, discard_worktree):
    from cafleet.cli.member import worktree_line
    from cafleet.delivery import authority
    from cafleet.delivery.spawning import panes

    authority.require_director(ctx.store(), ctx.environ, fleet_id, "fleet delete")
    result, closed, trees = panes.delete_fleet(
        ctx.store(), ctx.settings, fleet_id, discard_worktrees=discard_worktree, hooks=ctx.hooks
    )

    def text():
        lines = [f"deleted fleet {fleet_id}; deregistered {result['deregistered_count']} member(s)"]
        lines += [f"member {member_id}: pane {status.text()}" for member_id, status in closed]
        lines += [worktree_line(member_id, tree) for member_id, tree in trees]
        return "\n".join(lines)

    record = dict(result, panes=[{"member_id": m, "pane_status": s.text()} for m, s in closed])
    if trees:  # only a fleet whose members had worktrees says what became of them
        record["worktrees"] = [dict(tree, member_id=m) for m, tree in trees]
    ctx.emit(record, text)


def restore(ctx: Context, fleet_id):
    """Make this pane the Director's when its own is gone, start every member whose pane is
    gone again (its conversation resumed), then the keeper (docs/delivery.md); exit status 1
    when a member is left lost (each outcome is printed all the same)."""
    from cafleet.cli.member import outcome_line
    from cafleet.delivery.keystrokes import drain
    from cafleet.delivery.spawning import restore

    result = restore.restore_fleet(ctx.store(), ctx.settings, fleet_id, ctx.hooks)
    ctx.emit(result, lambda: "\n".join(outcome_line(row) for row in result["members"]))
    warning = drain.start_keeper(ctx.store(), ctx.settings, fleet_id, ctx.hooks)  # owed previews need one
    if warning:
        ctx.err(warning)
    return 1 if any(row["outcome"] == restore.LOST for row in result["members"]) else None


def auto_revive(ctx: Context, fleet_id, per_hour, off):
    """Show, set (``--per-hour``) or turn off (``--off``) the keeper's reviving (Director only
    to change it)."""
    from cafleet.broker import revivals
    from cafleet.delivery import authority
    from cafleet.errors import UsageError

    if off and per_hour is not None:
        raise UsageError("--off takes no --per-hour; give one or the other")
    fleets.require_live(ctx.store(), fleet_id)
    if off or per_hour is not None:
        authority.require_director(ctx.store(), ctx.environ, fleet_id, "fleet auto-revive")
        revivals.set_fleet(ctx.store(), fleet_id, 0 if off else per_hour)
    now = revivals.per_hour(ctx.store(), fleet_id)
    ctx.emit({"fleet_id": fleet_id, "revive_per_hour": now}, lambda: f"fleet {fleet_id}: revive {revive_text(now)}")


def revive_text(per_hour: int | None) -> str:
    return f"on, at most {per_hour} a member an hour" if per_hour else "off (`cafleet member revive` by hand)"


def notify_text(posts: dict) -> str:
    """``off`` or ``N URL(s), last post ok at …`` / ``…, failing since … (reason)`` (docs/delivery.md,
    "Notices posted out")."""
    if not posts["urls"]:
        return "off (no --notify, no CAFLEET_NOTIFY_URL)"
    head = f"{len(posts['urls'])} URL(s)"
    if posts["failing"]:
        return f"{head}, {notify_failing(posts)}"
    if posts["last_ok_at"]:
        return f"{head}, last post ok at {render.inline(posts['last_ok_at'])}"
    return f"{head}, nothing posted yet"


def notify_failing(posts: dict) -> str:
    """``last post failing since … (reason); N post(s) failing`` (shared with doctor)."""
    return (
        f"last post failing since {render.inline(posts['failing_since'])} ({render.inline(posts['reason'] or '-')}); "
        f"{posts['failing']} post(s) failing"
    )


def keeper_text(keeper, settings) -> str:
    """``running, pid … since …``, ``stalled, pid …: no heartbeat for …`` or why it does not
    run (shared with doctor)."""
    if keeper.state != "not running" or settings.keeper:
        return render.inline(keeper.describe())
    return "not running (CAFLEET_KEEPER=off: `cafleet fleet watch` delivers owed previews while it runs)"


def keep(ctx: Context, fleet_id):
    """Run the fleet's keeper in the foreground: one log line per event, the last one
    saying why it ended; under --json one object per event (``at``, ``pid``, ``event``;
    the last also ``ended``: why)."""
    import os

    from cafleet import clock
    from cafleet.delivery.supervision import keeper

    pid = os.getpid()

    def say(text: str, **extra: str) -> None:
        at, event = clock.now(), ctx.hide_secrets(text)
        if ctx.json:
            ctx.out(render.to_json({"at": at, "pid": pid, "event": event, **extra}))
        else:
            ctx.out(f"{at} keeper[{pid}] {event}")

    reason = keeper.keep(ctx.store(), ctx.settings, fleet_id, say, ctx.settings.pg_reconnect_timeout, ctx.hooks)
    say(f"keeper for fleet {fleet_id} ended: {reason}", ended=ctx.hide_secrets(reason))
