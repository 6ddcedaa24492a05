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
        "a session begun with /clear that holds no cafleet preview yet",
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


def _claude_live(store, source: dict, record: dict, sessions: list[str]) -> str | None:
    """A session a local claude member's process began after its spawn session (``/clear``),
    once it is provably the member's; else None.

    The pane's pid (the last field of its tmux identity, recorded at spawn) must be the
    process cafleet started with the member's own ``--session-id``; the session its live
    file names (a file the member can write, so only a claim) must be held by no other
    member, and its transcript must begin user turns with cafleet previews, every one of a
    message to this member (a preview is typed only into its recipient's pane)."""
    identity = record.get("identity") or ""
    pid = identity.rpartition(":")[2]
    if record.get("backend") != "tmux" or identity.count(":") != 2 or not pid.isdigit() or len(pid) > 10:
        return None
    live = agent_usage.claude_live_session(source["data_dir"], int(pid), source["cwd"], spawn_session=sessions[0])
    if live is None or live in sessions:
        return None
    previews = agent_usage.claude_previews(source["data_dir"], live)
    if not previews or not usage.previews_are_for(store, source["member_id"], previews):
        return None
    if usage.session_holder(store, live, besides=source["member_id"]) is not None:
        return None
    return live


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
        live = _claude_live(store, source, record, sessions)
        if live is not None:
            sessions.append(live)
            try:
                usage.add_session(store, source["member_id"], live)
            except CafleetError:
                pass  # counted now; remembered on a later read
        found, paths = agent_usage.claude_usage(source["data_dir"], sessions, reader)
        return found, paths, _why_none(found)
    if agent == "codex" and source["data_dir"]:
        found, paths = agent_usage.codex_usage(
            source["data_dir"],
            started_at=source["started_at"],
            fleet_id=fleet_id,
            member_id=source["member_id"],
            reader=reader,
        )
        return found, paths, _why_none(found)
    if agent == "opencode" and source["data_dir"]:
        found, paths = agent_usage.opencode_usage(
            source["data_dir"],
            cwd=source["cwd"],
            started_at=source["started_at"],
            fleet_id=fleet_id,
            member_id=source["member_id"],
        )
        return found, paths, _why_none(found)
    return empty, [], f"usage of {agent or 'this agent'} is not read yet"


def _why_none(found: agent_usage.Usage) -> str | None:
    """Why a member's report has no rows: None when it has records (readable or not)."""
    return None if found.models or found.unreadable else "no records yet"


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


# What --force overrides, by the way the work would reach the member (the refusal's hint).
FORCE_HINTS = {
    "send": "give --force to send anyway",
    "prompt": "give --force to type the prompt anyway",
    "create": "give --force to create the member anyway",
}


def check_budget(store, environ: Mapping[str, str], member_id: int, budgets: dict, action: str = "send") -> None:
    """Refuse new work for a member over its own budget or its fleet's (the gate,
    :func:`cafleet.delivery.drain.refuse_over_budget`, calls this only when a budget is
    set: :func:`cafleet.broker.usage.budgets_for_send`). ``action`` names the way the work
    would reach the member, for the hint."""
    from cafleet.errors import OverBudget

    if budgets["member"] is not None:
        why = over(member_usage(store, environ, member_id), *budgets["member"])
        if why:
            raise OverBudget(
                f"member {member_id} is over its budget ({why}); it gets no new work.", FORCE_HINTS[action] + "."
            )
    if budgets["fleet"] is not None:
        fleet_id, usd, tokens = budgets["fleet"]
        check_fleet_budget(store, environ, fleet_id, (usd, tokens), action)


def check_fleet_budget(
    store, environ: Mapping[str, str], fleet_id: int, budget: tuple | None, action: str = "send"
) -> None:
    """Refuse new work in a fleet at or over its budget (``budget``: ``(usd, tokens)``, or
    None for none set): a send or prompt to one of its members, or a new member."""
    from cafleet.errors import OverBudget

    if budget is None:
        return
    why = over(fleet_usage(store, environ, fleet_id), *budget)
    if why:
        raise OverBudget(
            f"fleet {fleet_id} is over its budget ({why}); its members get no new work.",
            f"{FORCE_HINTS[action]}, or raise the budget with `cafleet fleet budget {fleet_id}`.",
        )
