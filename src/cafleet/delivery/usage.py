"""What members have spent: the attribution rows the broker keeps, joined with the usage
records each coding agent writes (:mod:`cafleet.agents.usage`; docs/usage.md). The agents'
readers are imported where a read needs them: a send's budget gate mostly reads stored totals."""

from __future__ import annotations

import json
from collections.abc import Mapping

from cafleet.agents.usage.totals import TranscriptReader, Usage, price_table
from cafleet.broker import usage
from cafleet.errors import CafleetError, DatabaseError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store

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


def _claude_live(store: Store, source: dict, record: dict, sessions: list[str]) -> str | None:
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
    from cafleet.agents.previews import claude_previews
    from cafleet.agents.usage.claude import claude_live_session

    live = claude_live_session(source["data_dir"], int(pid), source["cwd"], spawn_session=sessions[0])
    if live is None or live in sessions:
        return None
    previews = claude_previews(source["data_dir"], live)
    if not previews or not usage.previews_are_for(store, source["member_id"], previews):
        return None
    if usage.session_holder(store, live, besides=source["member_id"]) is not None:
        return None
    return live


def _member_usage(
    store: Store, record: dict, source: dict | None, agent: str | None, reader, fleet_id: int
) -> tuple[Usage, list[str], str | None]:
    """(usage, files read, why there are no records) for one member."""
    if source is None:
        return _not_read(source, agent)
    if agent == "claude" and source["session_id"] and source["data_dir"]:
        sessions = source["session_id"].split()
        live = _claude_live(store, source, record, sessions)
        if live is not None:
            sessions.append(live)
            try:  # noqa: SIM105 - contextlib stays off the hot commands' path
                usage.add_session(store, source["member_id"], live)
            except CafleetError:
                pass  # counted now; remembered on a later read
        from cafleet.agents.usage.claude import claude_usage

        found, paths = claude_usage(source["data_dir"], sessions, reader)
        return found, paths, _why_none(found)
    if agent == "codex" and source["data_dir"]:
        from cafleet.agents.usage.codex import codex_usage

        found, paths = codex_usage(
            source["data_dir"],
            started_at=source["started_at"],
            fleet_id=fleet_id,
            member_id=source["member_id"],
            reader=reader,
        )
        return found, paths, _why_none(found)
    if agent == "opencode" and source["data_dir"]:
        from cafleet.agents.usage.opencode import opencode_usage

        found, paths = opencode_usage(
            source["data_dir"],
            cwd=source["cwd"],
            started_at=source["started_at"],
            fleet_id=fleet_id,
            member_id=source["member_id"],
        )
        return found, paths, _why_none(found)
    return _not_read(source, agent)


def _not_read(source: dict | None, agent: str | None) -> tuple[Usage, list[str], str]:
    """(no usage, no files, why) for a member whose records cafleet does not read."""
    if source is None:
        return (
            Usage(),
            [],
            (
                "no attribution recorded for this member (not spawned by `member create`: the "
                "Director, or a member made by another program or an older cafleet)"
            ),
        )
    return Usage(), [], f"usage of {agent or 'this agent'} is not read yet"


def _why_none(found: Usage) -> str | None:
    """Why a member's report has no rows: None when it has records (readable or not)."""
    return None if found.models or found.unreadable else "no records yet"


READ_AGENTS = ("claude", "codex", "opencode")
"""The agents whose records cafleet reads (docs/usage.md)."""
GATE_READ_BYTES = 16 << 20
"""The most bytes the budget gate reads, once, for members whose usage was never read
(docs/usage.md, "Stored totals"); the keeper goes on from where that read stopped."""


def _read_now(store: Store, record: dict, source: dict, fleet_id: int, stored, allowance) -> tuple:
    """Read what is new in one member's records, from where the stored state says the
    last read stopped, and store the totals (only when they or the state changed).
    Returns ``(usage, files, why there are no records, bytes read)``."""
    try:
        state = json.loads(stored[1]) if stored is not None else {}
    except ValueError:
        state = {}  # not what cafleet wrote: read again from the start
    reader = TranscriptReader.load(state, allowance)
    found, paths, why = _member_usage(store, record, source, record["coding_agent"], reader, fleet_id)
    if record["coding_agent"] == "opencode" and not paths and stored is not None:
        return (*_from_stored(stored[0]), 0)  # its database is gone: what was counted stays counted
    totals = json.dumps({"usage": found.dump(), "files": paths, "no_records": why}, sort_keys=True)
    new_state = json.dumps(reader.dump(), sort_keys=True)
    if stored is None or (totals, new_state) != (stored[0], stored[1]):
        try:  # noqa: SIM105 - contextlib stays off the hot commands' path
            usage.save_totals(store, source["member_id"], totals, new_state)
        except DatabaseError:
            pass  # busy or read-only: reported all the same, and read again (from the old offsets) next time
    return found, paths, why, reader.bytes_read


def _from_stored(totals: str) -> tuple:
    """``(usage, files, why there are no records)`` from a stored totals row."""
    try:
        data = json.loads(totals)
        files = [str(path) for path in data["files"]]
        why = data["no_records"]
        return Usage.load(data["usage"]), files, why if why is None else str(why)
    except (ValueError, TypeError, KeyError):
        return Usage(), [], NEVER_READ


NEVER_READ = "not read yet (the fleet keeper reads it within seconds; `cafleet member usage ID` reads it now)"


def _reads(source: dict | None, agent: str | None) -> bool:
    """Whether cafleet reads this member's records (the cases of :func:`_member_usage`)."""
    if source is None or not source["data_dir"]:
        return False
    return agent in ("codex", "opencode") or (agent == "claude" and bool(source["session_id"]))


def refresh(store: Store, fleet_id: int, member_ids=None, allowance: int | None = None) -> tuple[dict, int]:
    """Read what is new in the records of the fleet's members (or of ``member_ids`` among
    them) and store their totals: ``({member_id: (usage, files, why)}, bytes read)``.
    The fleet keeper runs this every :data:`cafleet.delivery.supervision.keeper.USAGE_EVERY` s, and
    ``fleet watch`` every round when the keeper is off. ``allowance`` bounds the bytes read
    over all of them (None: no bound)."""
    roster = [
        r for r in usage.fleet_members(store, fleet_id) if member_ids is None or r["member_id"] in set(member_ids)
    ]
    sources = usage.sources(store, [r["member_id"] for r in roster])
    wanted = [r for r in roster if _reads(sources.get(r["member_id"]), r["coding_agent"])]
    stored = usage.stored_totals(store, [r["member_id"] for r in wanted])
    found: dict = {}
    total = 0
    for record in wanted:
        left = None if allowance is None else max(allowance - total, 0)
        *result, read = _read_now(
            store, record, sources[record["member_id"]], fleet_id, stored.get(record["member_id"]), left
        )
        found[record["member_id"]] = tuple(result)
        total += read
    return found, total


def _member_report(record: dict, source: dict | None, prices, read: dict, stored: dict) -> dict:
    """One member's report: from what was just read (``read``), else from its stored totals."""
    member_id = record["member_id"]
    agent = record["coding_agent"]
    if member_id in read:
        found, paths, why = read[member_id]
    elif not _reads(source, agent):
        found, paths, why = _not_read(source, agent)
    elif member_id in stored:
        found, paths, why = _from_stored(stored[member_id][0])
    else:
        found, paths, why = Usage(), [], NEVER_READ
    report = found.report(prices)
    report.update(
        member_id=member_id,
        name=record["name"],
        coding_agent=agent,
        files=paths,
        no_records=why,
        lower_bound_because=list(NOT_SEEN.get(agent or "", ())),
    )
    report["_usage"] = found
    return report


def member_usage(store: Store, environ: Mapping[str, str], member_id: int, fresh: bool = True) -> dict:
    """One member's tokens by kind and model and its dollars: what is new in its agent's
    records read first (``member usage``), or with ``fresh=False`` its stored totals
    only (``member list``), no file read."""
    from cafleet.broker import members

    member = members.get_member(store, member_id)
    placement: Mapping[str, object] = member["placement"] or {}
    fleet_id = member["fleet_id"]
    record = {
        "member_id": member_id,
        "name": member["name"],
        "coding_agent": placement.get("coding_agent"),
        "backend": placement.get("backend"),
        "identity": placement.get("identity"),
    }
    prices = price_table(environ)  # a bad price file is refused before any read
    source = usage.sources(store, [member_id]).get(member_id)
    read = refresh(store, fleet_id, [member_id])[0] if fresh else {}
    stored = {} if fresh else usage.stored_totals(store, [member_id])
    report = _member_report(record, source, prices, read, stored)
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


def fleet_usage(store: Store, environ: Mapping[str, str], fleet_id: int, fresh: bool = True) -> dict:
    """Every member's usage (deregistered ones included) and the fleet's sum: what is new
    in the agents' records read first (``fleet usage``, ``fleet budget``), or with
    ``fresh=False`` the stored totals only (the WebUI, ``fleet watch``), no file read."""
    prices = price_table(environ)
    roster = usage.fleet_members(store, fleet_id)
    read = refresh(store, fleet_id)[0] if fresh else {}
    sources = usage.sources(store, [r["member_id"] for r in roster])
    stored = {} if fresh else usage.stored_totals(store, [r["member_id"] for r in roster])
    total = Usage()
    reports = []
    for record in roster:
        report = _member_report(record, sources.get(record["member_id"]), prices, read, stored)
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


def spent(store: Store, environ: Mapping[str, str], member_id: int | None = None, fleet_id: int | None = None) -> dict:
    """The usage report of one member, or of a whole fleet, from the stored totals: one
    query (:func:`cafleet.broker.usage.spent_totals`), no agent's file read. A member whose
    usage was never read (none since the keeper started, or a database from before the
    stored totals) is read once, at most :data:`GATE_READ_BYTES` over all of them, and its
    totals stored: the keeper goes on from there (docs/usage.md)."""
    rows = usage.spent_totals(store, member_id=member_id, fleet_id=fleet_id)
    total = Usage()
    unread = []
    for found_id, agent, totals in rows:
        if totals is not None:
            total.merge(_from_stored(totals)[0])
        elif agent in READ_AGENTS:
            unread.append(found_id)
    if unread:
        if fleet_id is None:
            from cafleet.broker import members

            fleet_id = members.get_member(store, unread[0])["fleet_id"]
        for found, _paths, _why in refresh(store, fleet_id, unread, GATE_READ_BYTES)[0].values():
            total.merge(found)
    return total.report(price_table(environ))


def check_budget(store: Store, environ: Mapping[str, str], member_id: int, budgets: dict, action: str = "send") -> None:
    """Refuse new work for a member over its own budget or its fleet's (the gate,
    :func:`cafleet.delivery.keystrokes.drain.refuse_over_budget`, calls this only when a budget is
    set: :func:`cafleet.broker.usage.budgets_for_send`), from the stored totals
    (:func:`spent`). ``action`` names the way the work would reach the member, for the hint."""
    from cafleet.errors import OverBudget

    if budgets["member"] is not None:
        why = over(spent(store, environ, member_id=member_id), *budgets["member"])
        if why:
            raise OverBudget(
                f"member {member_id} is over its budget ({why}); it gets no new work.", FORCE_HINTS[action] + "."
            )
    if budgets["fleet"] is not None:
        fleet_id, usd, tokens = budgets["fleet"]
        check_fleet_budget(store, environ, fleet_id, (usd, tokens), action)


def check_fleet_budget(
    store: Store, environ: Mapping[str, str], fleet_id: int, budget: tuple | None, action: str = "send"
) -> None:
    """Refuse new work in a fleet at or over its budget (``budget``: ``(usd, tokens)``, or
    None for none set): a send or prompt to one of its members, or a new member. From the
    stored totals (:func:`spent`)."""
    from cafleet.errors import OverBudget

    if budget is None:
        return
    why = over(spent(store, environ, fleet_id=fleet_id), *budget)
    if why:
        raise OverBudget(
            f"fleet {fleet_id} is over its budget ({why}); its members get no new work.",
            f"{FORCE_HINTS[action]}, or raise the budget with `cafleet fleet budget {fleet_id}`.",
        )
