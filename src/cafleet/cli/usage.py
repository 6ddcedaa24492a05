"""`cafleet member usage` and `cafleet fleet usage` (docs/usage.md)."""

from __future__ import annotations

from cafleet import render

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def _dollars(value) -> str:
    return "-" if value is None else f"${value:.4f}"


def _model_rows(report: dict) -> list[list]:
    return [
        [
            model,
            row["input"],
            row["cache_write"],
            row["cache_read"],
            row["output"],
            row["calls"],
            _dollars(row["usd"]) + ("" if row["usd"] is None else f" ({row['usd_source']})"),
        ]
        for model, row in report["models"].items()
    ]


MODEL_HEADERS = ["MODEL", "INPUT", "CACHE_WRITE", "CACHE_READ", "OUTPUT", "CALLS", "USD"]


def _summary(report: dict) -> str:
    tokens = report["tokens"]
    line = (
        f"{tokens['total']} tokens (input {tokens['input']}, cache write {tokens['cache_write']}, "
        f"cache read {tokens['cache_read']}, output {tokens['output']}) in {report['calls']} calls, "
        f"{_dollars(report['usd'])}"
    )
    if report["unpriced"]:
        line += f" plus unpriced models: {', '.join(render.inline(m) for m in report['unpriced'])}"
    skipped = report["unreadable_records"]
    if skipped:
        line += f"; {skipped} unreadable record{'' if skipped == 1 else 's'} skipped"
    return line


def member(ctx: Context, member_id):
    from cafleet.delivery import usage

    report = usage.member_usage(ctx.store(), ctx.environ, member_id)

    def text():
        head = f"member {member_id} ({render.inline(report['name'])}, {render.inline(report['coding_agent'])}"
        head += f", {_budget_text(report['budget'])})" if report["budget"] else ")"
        if report["no_records"]:
            return f"{head}: {report['no_records']}"
        lines = [f"{head}: {_summary(report)}", render.table(_model_rows(report), MODEL_HEADERS)]
        if report["lower_bound_because"]:
            lines.append("a lower bound: the agent's files leave out " + "; ".join(report["lower_bound_because"]))
        return "\n".join(lines)

    ctx.emit(report, text)


def fleet(ctx: Context, fleet_id):
    from cafleet.delivery import usage

    report = usage.fleet_usage(ctx.store(), ctx.environ, fleet_id)

    def text():
        rows = [
            [
                r["member_id"],
                r["name"],
                r["coding_agent"] or "-",
                r["tokens"]["total"],
                r["calls"],
                _dollars(r["usd"]) if not r["no_records"] else r["no_records"],
                _budget_text(r["budget"]),
            ]
            for r in report["members"]
        ]
        lines = [
            f"fleet {fleet_id}: {_summary(report)}"
            + (f"; {_budget_text(report['budget'])}" if report["budget"] else ""),
            render.table(rows, ["MEMBER", "NAME", "AGENT", "TOKENS", "CALLS", "USD", "BUDGET"]),
        ]
        if report["models"]:
            lines.append(render.table(_model_rows(report), MODEL_HEADERS))
        lines.append("totals are lower bounds: see `cafleet member usage ID` for what each agent's files leave out")
        return "\n".join(lines)

    ctx.emit(report, text)


def _budget_text(budget) -> str:
    if not budget:
        return "no budget"
    parts = ([f"${budget['usd']:.4f}"] if budget["usd"] is not None else []) + (
        [f"{budget['tokens']} tokens"] if budget["tokens"] is not None else []
    )
    return "budget " + " or ".join(parts) + (" (over)" if budget["over"] else "")


def budget(ctx: Context, fleet_id, usd, tokens, clear):
    from cafleet.broker import usage as budgets
    from cafleet.delivery import authority, usage
    from cafleet.errors import UsageError

    # --usd and --tokens are bounded by their declarations in cafleet.config (the parser)
    if clear and (usd is not None or tokens is not None):
        raise UsageError("--clear takes no --usd or --tokens; give one or the other")
    authority.require_director(ctx.store(), ctx.environ, fleet_id, "fleet budget")
    if clear or usd is not None or tokens is not None:
        budgets.set_fleet_budget(ctx.store(), fleet_id, usd, tokens)
    report = usage.fleet_usage(ctx.store(), ctx.environ, fleet_id)
    shown = {"fleet_id": fleet_id, "budget": report["budget"], "usd": report["usd"], "tokens": report["tokens"]}
    ctx.emit(shown, lambda: f"fleet {fleet_id}: {_budget_text(report['budget'])}; spent {_summary(report)}")


def spend_text(report: dict) -> str:
    """``$0.0123/$5.0000`` or ``1050/1000 tok``, with ``(over)``: spend against budget."""
    budget = report["budget"]
    parts = []
    if budget["usd"] is not None:
        parts.append(f"${report['usd']:.4f}/${budget['usd']:.4f}")
    if budget["tokens"] is not None:
        parts.append(f"{report['tokens']['total']}/{budget['tokens']} tok")
    return " ".join(parts) + (" (over)" if budget["over"] else "")
