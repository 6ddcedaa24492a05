"""`cafleet member ...`: create, list, show, delete, capture, prompt."""

from __future__ import annotations

from cafleet import render
from cafleet.broker import members


def list_(ctx, fleet_id):
    records = members.roster(ctx.store(), fleet_id)

    def text():
        rows = [
            [r["member_id"], r["name"], r["kind"], r["backend"] or "-", r["coding_agent"] or "-",
             r["pane_id"] or "pending", render.dash(r["idle_seconds"])]
            for r in records
        ]
        return render.table(rows, ["MEMBER", "NAME", "KIND", "BACKEND", "AGENT", "PANE", "IDLE_S"])

    ctx.emit(records, text)


def show(ctx, member_id):
    record = members.get_member(ctx.store(), member_id)

    def text():
        placement = record["placement"]
        lines = [
            f"member {record['member_id']}: {record['name']} ({record['kind']}, {record['status']})",
            f"fleet: {record['fleet_id']}",
            f"description: {render.display_safe(record['description'])}",
            f"registered: {record['registered_at']}",
        ]
        if record["deregistered_at"]:
            lines.append(f"deregistered: {record['deregistered_at']}")
        if placement:
            lines.append(
                f"placement: {placement['backend']} pane {placement['pane_id'] or 'pending'} "
                f"(window {placement['window_id']}), agent {placement['coding_agent']}"
            )
        else:
            lines.append("placement: none")
        lines.append(f"last activity: {render.dash(record['last_activity_at'])} (idle {render.dash(record['idle_seconds'])} s)")
        return "\n".join(lines)

    ctx.emit(record, text)
