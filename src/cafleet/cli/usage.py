"""`cafleet member usage` and `cafleet fleet usage` (docs/usage.md)."""

from __future__ import annotations

from cafleet import render


def _dollars(value) -> str:
    return "-" if value is None else f"${value:.4f}"


def _model_rows(report: dict) -> list[list]:
    return [[model, row["input"], row["cache_write"], row["cache_read"], row["output"], row["calls"],
             _dollars(row["usd"]) + ("" if row["usd"] is None else f" ({row['usd_source']})")]
            for model, row in report["models"].items()]


MODEL_HEADERS = ["MODEL", "INPUT", "CACHE_WRITE", "CACHE_READ", "OUTPUT", "CALLS", "USD"]


def _summary(report: dict) -> str:
    tokens = report["tokens"]
    line = (f"{tokens['total']} tokens (input {tokens['input']}, cache write {tokens['cache_write']}, "
            f"cache read {tokens['cache_read']}, output {tokens['output']}) in {report['calls']} calls, "
            f"{_dollars(report['usd'])}")
    if report["unpriced"]:
        line += f" plus unpriced models: {', '.join(render.inline(m) for m in report['unpriced'])}"
    return line


def member(ctx, member_id):
    from cafleet.delivery import usage

    report = usage.member_usage(ctx.store(), ctx.environ, member_id)

    def text():
        head = f"member {member_id} ({render.inline(report['name'])}, {render.inline(report['coding_agent'])})"
        if report["no_records"]:
            return f"{head}: {report['no_records']}"
        lines = [f"{head}: {_summary(report)}", render.table(_model_rows(report), MODEL_HEADERS)]
        if report["lower_bound_because"]:
            lines.append("a lower bound: the agent's files leave out " + "; ".join(report["lower_bound_because"]))
        return "\n".join(lines)

    ctx.emit(report, text)


def fleet(ctx, fleet_id):
    from cafleet.delivery import usage

    report = usage.fleet_usage(ctx.store(), ctx.environ, fleet_id)

    def text():
        rows = [[r["member_id"], r["name"], r["coding_agent"] or "-", r["tokens"]["total"], r["calls"],
                 _dollars(r["usd"]) if not r["no_records"] else r["no_records"]] for r in report["members"]]
        lines = [f"fleet {fleet_id}: {_summary(report)}",
                 render.table(rows, ["MEMBER", "NAME", "AGENT", "TOKENS", "CALLS", "USD"])]
        if report["models"]:
            lines.append(render.table(_model_rows(report), MODEL_HEADERS))
        lines.append("totals are lower bounds: see `cafleet member usage ID` for what each agent's files leave out")
        return "\n".join(lines)

    ctx.emit(report, text)
