"""What members have spent: the attribution rows the broker keeps, joined with the usage
records each coding agent writes (:mod:`cafleet.agents.usage`; docs/usage.md)."""

from __future__ import annotations

from collections.abc import Mapping

from cafleet.agents import usage as agent_usage
from cafleet.broker import usage
from cafleet.errors import CafleetError

# What each agent leaves out of the files cafleet reads: a total is a lower bound by these.
NOT_SEEN: dict[str, tuple[str, ...]] = {
    "claude": (
        "the /compact summary call",
        "title generation",
        "most of an interrupted reply",
        "a session begun with /clear and left before any usage read saw it",
    ),
    "codex": (
        "the first turn's title-generation request",
        "threads the member starts itself after its spawn thread (/new, /clear): only the thread whose first "
        "prompt carries its identity is its own",
    ),
    "opencode": (
        "session-title generation (the small model's call)",
        "sessions the member starts itself after its spawn session (only the session whose first prompt "
        "carries its identity, and that session's subagents, are its own)",
    ),
}


def new_reader() -> agent_usage.TranscriptReader:
    """A reader to keep across :func:`fleet_usage` calls (it reads only what was appended)."""
    return agent_usage.TranscriptReader()


def _claude_live(source: dict, record: dict) -> str | None:
    """The session a local claude member's process is in now (it changes with ``/clear``):
    the pane's pid is the last field of its tmux identity."""
    identity = record.get("identity") or ""
    pid = identity.rpartition(":")[2]
    if record.get("backend") != "tmux" or identity.count(":") != 2 or not pid.isdigit():
        return None
    return agent_usage.claude_live_session(source["data_dir"], int(pid), source["cwd"])


def _member_usage(
    store, record: dict, source: dict | None, agent: str | None, reader, fleet_id: int
) -> tuple[agent_usage.Usage, list[str], str | None]:
    """(usage, files read, why there are no records) for one member."""
    empty = agent_usage.Usage()
    if source is None:
        return (
            empty,
            [],
            (
                "no attribution recorded for this member (not spawned by `member create`: the "
                "Director, or a member made by another program or an older cafleet)"
            ),
        )
    if agent == "claude" and source["session_id"] and source["data_dir"]:
        sessions = source["session_id"].split()
        live = _claude_live(source, record)
        if live is not None and live not in sessions:
            sessions.append(live)
            try:
                usage.add_session(store, source["member_id"], live)
            except CafleetError:
                pass  # counted now; remembered on a later read
        found, paths = agent_usage.claude_usage(source["data_dir"], sessions, reader)
        return found, paths, None if found.models else "no records yet"
    if agent == "codex" and source["data_dir"]:
        found, paths = agent_usage.codex_usage(
            source["data_dir"],
            started_at=source["started_at"],
            fleet_id=fleet_id,
            member_id=source["member_id"],
            reader=reader,
        )
        return found, paths, None if found.models else "no records yet"
    if agent == "opencode" and source["data_dir"]:
        found, paths = agent_usage.opencode_usage(
            source["data_dir"],
            cwd=source["cwd"],
            started_at=source["started_at"],
            fleet_id=fleet_id,
            member_id=source["member_id"],
        )
        return found, paths, None if found.models else "no records yet"
    return empty, [], f"usage of {agent or 'this agent'} is not read yet"


def _member_report(store, record: dict, source: dict | None, prices, reader, fleet_id: int) -> dict:
    found, paths, why = _member_usage(store, record, source, record["coding_agent"], reader, fleet_id)
    report = found.report(prices)
    report.update(
        member_id=record["member_id"],
        name=record["name"],
        coding_agent=record["coding_agent"],
        files=paths,
        no_records=why,
        lower_bound_because=list(NOT_SEEN.get(record["coding_agent"] or "", ())),
    )
    report["_usage"] = found
    return report


def member_usage(store, environ: Mapping[str, str], member_id: int) -> dict:
    """One member's tokens by kind and model and its dollars."""
    from cafleet.broker import members

    record = members.get_member(store, member_id)
    placement = record.get("placement") or {}
    fleet_id = record["fleet_id"]
    record = {
        "member_id": member_id,
        "name": record["name"],
        "coding_agent": placement.get("coding_agent"),
        "backend": placement.get("backend"),
        "identity": placement.get("identity"),
    }
    source = usage.sources(store, [member_id]).get(member_id)
    report = _member_report(
        store, record, source, agent_usage.price_table(environ), agent_usage.TranscriptReader(), fleet_id
    )
    report.pop("_usage")
    report["budget"] = _budget(report, source)
    return report


def _budget(report: dict, source: dict | None) -> dict | None:
    if source is None or (source["budget_usd"] is None and source["budget_tokens"] is None):
        return None
    return {
        "usd": source["budget_usd"],
        "tokens": source["budget_tokens"],
        "over": over(report, source["budget_usd"], source["budget_tokens"]) is not None,
    }


def fleet_usage(store, environ: Mapping[str, str], fleet_id: int, reader=None) -> dict:
    """Every member's usage (deregistered ones included) and the fleet's sum. A ``reader``
    kept by the caller reads only what the agents appended since its last use."""
    roster = usage.fleet_members(store, fleet_id)
    sources = usage.sources(store, [r["member_id"] for r in roster])
    prices = agent_usage.price_table(environ)
    reader = reader or agent_usage.TranscriptReader()
    total = agent_usage.Usage()
    reports = []
    for record in roster:
        report = _member_report(store, record, sources.get(record["member_id"]), prices, reader, fleet_id)
        total.merge(report.pop("_usage"))
        report["budget"] = _budget(report, sources.get(record["member_id"]))
        reports.append(report)
    fleet = total.report(prices)
    budget = usage.fleet_budget(store, fleet_id)
    fleet.update(
        fleet_id=fleet_id,
        members=reports,
        budget=None
        if budget is None
        else {"usd": budget[0], "tokens": budget[1], "over": over(fleet, *budget) is not None},
    )
    return fleet


def over(spent: dict, usd: float | None, tokens: int | None) -> str | None:
    """Why ``spent`` (a usage report) is at or over a budget, or None."""
    if usd is not None and spent["usd"] >= usd:
        return f"${spent['usd']:.4f} spent of a ${usd:.4f} budget"
    if tokens is not None and spent["tokens"]["total"] >= tokens:
        return f"{spent['tokens']['total']} tokens spent of a {tokens}-token budget"
    return None


def check_budget(store, environ: Mapping[str, str], member_id: int, budgets: dict) -> None:
    """Refuse new work for a member over its own budget or its fleet's (the send path,
    only when a budget is set: :func:`cafleet.broker.usage.budgets_for_send`)."""
    from cafleet.errors import CafleetError

    if budgets["member"] is not None:
        why = over(member_usage(store, environ, member_id), *budgets["member"])
        if why:
            raise CafleetError(
                f"member {member_id} is over its budget ({why}); it gets no new work. Send anyway with --force."
            )
    if budgets["fleet"] is not None:
        fleet_id, usd, tokens = budgets["fleet"]
        why = over(fleet_usage(store, environ, fleet_id), usd, tokens)
        if why:
            raise CafleetError(
                f"fleet {fleet_id} is over its budget ({why}); its members get no new work. "
                "Send anyway with --force, or raise it with `cafleet fleet budget`."
            )


def refuse_over_budget(store, environ: Mapping[str, str], member_id: int) -> None:
    """The send path's budget gate: raise when ``member_id`` or its fleet is over budget.
    Costs one catalogue lookup when no budget is set (nothing of the agents' is read)."""
    from cafleet.broker import usage as budgets_table

    budgets = budgets_table.budgets_for_send(store, member_id)
    if budgets is not None:
        check_budget(store, environ, member_id, budgets)
