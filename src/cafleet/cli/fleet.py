"""`cafleet fleet ...`: create, list, show, delete."""

from __future__ import annotations

from cafleet import render, validation
from cafleet.broker import fleets


def create(ctx, name, coding_agent):
    from cafleet.agents.backends import validate
    from cafleet.mux.detect import multiplexer_for_environment

    validation.name(name, "--name")
    validate(coding_agent, None, None)
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
    ctx.emit(
        record,
        lambda: (
            f"created fleet {record['fleet_id']} ({render.inline(name)}); "
            f"you are its Director, member {record['director_member_id']}"
        ),
    )


def list_(ctx):
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


def show(ctx, fleet_id):
    record = fleets.get_fleet(ctx.store(), fleet_id)

    def text():
        lines = [
            f"fleet {record['fleet_id']}: {render.inline(record['name'] or '-')}",
            f"director: member {render.dash(record['director_member_id'])}",
            f"active members: {record['active_members']}",
            f"created: {render.inline(record['created_at'])}",
        ]
        if record["deleted_at"]:
            lines.append(f"deleted: {render.inline(record['deleted_at'])}")
        return "\n".join(lines)

    ctx.emit(record, text)


def delete(ctx, fleet_id):
    from cafleet.delivery import panes

    result, closed = panes.delete_fleet(ctx.store(), ctx.environ, ctx.db_path, fleet_id)

    def text():
        lines = [f"deleted fleet {fleet_id}; deregistered {result['deregistered_count']} member(s)"]
        lines += [f"member {member_id}: pane {status}" for member_id, status in closed]
        return "\n".join(lines)

    ctx.emit(dict(result, panes=[{"member_id": m, "pane_status": s} for m, s in closed]), text)
