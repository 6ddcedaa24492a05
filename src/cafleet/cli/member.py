"""`cafleet member ...`: create, list, show, delete, capture, prompt, answer, exec."""

from __future__ import annotations

from cafleet import render, validation
from cafleet.broker import members

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.broker.records import MemberBrief
    from cafleet.cli.context import Context


def list_(ctx: Context, fleet_id, state, idle_after):
    if state:
        from cafleet.delivery.supervision import liveness

        detailed = members.roster_detail(ctx.store(), fleet_id)
        states = liveness.fleet_states(ctx.store(), fleet_id, liveness.MuxPool(), idle_after, roster=detailed)
        records = liveness.merge_states([members.brief(record) for record in detailed], states)
    else:
        records = members.roster(ctx.store(), fleet_id)

    spend = _spend_against_budget(ctx, fleet_id, records)
    trees = _worktrees(ctx, records)

    def text():
        rows = [
            [
                r["member_id"],
                r["name"],
                r["kind"],
                r["backend"] or "-",
                r["coding_agent"] or "-",
                r["pane_id"] or "pending",
                render.dash(r["idle_seconds"]),
            ]
            + ([r["state"]] if state else [])
            + ([spend.get(r["member_id"], "-")] if spend else [])
            + ([render.inline(trees[r["member_id"]]["branch"]) if r["member_id"] in trees else "-"] if trees else [])
            for r in records
        ]
        headers = (
            ["MEMBER", "NAME", "KIND", "BACKEND", "AGENT", "PANE", "IDLE_S"]
            + (["STATE"] if state else [])
            + (["SPEND/BUDGET"] if spend else [])
            + (["WORKTREE BRANCH"] if trees else [])
        )
        return render.table(rows, headers)

    ctx.emit(records, text)


def _worktrees(ctx: Context, records: list[MemberBrief]) -> dict:
    """``{member_id: worktree}`` of the listed members that have one (and ``"worktree"``
    added to their records only: the roster record of a member without one is unchanged);
    one query, none on a database without the worktree table."""
    from cafleet.broker import worktrees as worktree_records

    found = worktree_records.for_members(ctx.store(), [r["member_id"] for r in records])
    shown = {}
    for record in records:
        row = found.get(record["member_id"])
        if row is not None:
            record["worktree"] = shown[record["member_id"]] = worktree_records.public(row)
    return shown


def _spend_against_budget(ctx: Context, fleet_id, records: list[MemberBrief]) -> dict:
    """``{member_id: "spend/budget"}`` for members with a budget (and ``"spend"`` and
    ``"budget"`` added to their records), from the stored totals; empty, at the cost of two
    small queries, when no member of the fleet has one (docs/usage.md)."""
    from cafleet.broker import usage as budgets

    capped = budgets.capped_members(ctx.store(), fleet_id)
    if not capped:
        return {}
    from cafleet.cli.usage import spend_text
    from cafleet.delivery import usage

    shown = {}
    for record in records:
        if record["member_id"] in capped:
            report = usage.member_usage(ctx.store(), ctx.environ, record["member_id"], fresh=False)
            record["spend"] = {"usd": report["usd"], "tokens": report["tokens"]["total"]}
            record["budget"] = report["budget"]
            shown[record["member_id"]] = spend_text(report)
    return shown


def show(ctx: Context, member_id, with_dialog):
    from cafleet.broker import worktrees as worktree_records

    record: dict = dict(members.get_member(ctx.store(), member_id))  # plus "dialog" with --with-dialog
    row = worktree_records.get(ctx.store(), member_id)
    record["worktree"] = worktree_records.public(row)
    seen = None
    if with_dialog:
        from cafleet.delivery.keystrokes.answer import dialog_on

        seen = dialog_on(ctx.store(), member_id)
        record["dialog"] = None if seen is None else seen.as_json()

    def text():
        placement = record["placement"]
        safe = render.inline
        lines = [
            f"member {record['member_id']}: {safe(record['name'])} ({record['kind']}, {safe(record['status'])})",
            f"fleet: {record['fleet_id']}",
            f"description: {safe(record['description'])}",
            f"registered: {safe(record['registered_at'])}",
        ]
        if record["deregistered_at"]:
            lines.append(f"deregistered: {safe(record['deregistered_at'])}")
        if placement:
            lines.append(
                f"placement: {safe(placement['backend'])} pane {safe(placement['pane_id'] or 'pending')} "
                f"(session {safe(placement['session'])}, window {safe(placement['window_id'])}), "
                f"agent {safe(placement['coding_agent'])}"
            )
        else:
            lines.append("placement: none")
        tree = record["worktree"]
        if tree:
            lines.append(
                f"worktree: {safe(tree['path'])} (branch {safe(tree['branch'])} from {safe(tree['base'])} "
                f"{safe(tree['base_commit'][:12])}, {safe(tree['status'])})"
            )
        lines.append(
            f"last activity: {safe(record['last_activity_at'])} (idle {render.dash(record['idle_seconds'])} s)"
        )
        if with_dialog:
            lines += _dialog_lines(member_id, seen)
        return "\n".join(lines)

    ctx.emit(record, text)


def create(
    ctx: Context,
    fleet_id,
    name,
    description,
    coding_agent,
    model,
    effort,
    host,
    budget_usd,
    budget_tokens,
    force,
    worktree,
    no_worktree,
    branch,
    base,
    repo,
    placement,
    text,
    file,
):
    from cafleet.cli.body import read_body
    from cafleet.delivery.spawning import panes

    # every input is checked before anything is written: the budgets by the parser (their
    # declarations in cafleet.config), the rest here and in panes.create_member
    validation.name(name, "--name")
    validation.description(description, "--description")
    wants_worktree = _worktree_choice(worktree, no_worktree)
    prompt = read_body(ctx, text, file, limit=panes.MAX_COMMAND_BYTES, what="a spawn prompt", nul=False)
    _director_only(ctx, "member create", fleet_id=fleet_id)
    request = panes.SpawnRequest(
        fleet_id=fleet_id,
        name=name,
        description=description,
        prompt=prompt,
        coding_agent=coding_agent,
        model=model,
        effort=effort,
        host=host,
        budget_usd=budget_usd,
        budget_tokens=budget_tokens,
        force=force,
        worktree=wants_worktree,
        branch=branch,
        base=base,
        repo=repo,
        placement=placement,
    )
    record = panes.create_member(ctx.store(), ctx.settings, request, ctx.hooks)
    ctx.emit(record, lambda: _created_line(record, name, host))
    _start_keeper(ctx, fleet_id)  # its previews and notices need one


def _worktree_choice(worktree: bool, no_worktree: bool) -> bool | None:
    """--worktree (True), --no-worktree (False) or neither (None: the fleet's default)."""
    if worktree and no_worktree:
        from cafleet.errors import UsageError

        raise UsageError("--worktree and --no-worktree contradict each other; give one.")
    return True if worktree else (False if no_worktree else None)


def _created_line(record: dict, name: str, host: str | None) -> str:
    """What `member create` says of the member it created, in one line."""
    where = f" on host {render.inline(host)}" if host else ""
    tree = record.get("worktree")
    where += f" in worktree {render.inline(tree['path'])} (branch {render.inline(tree['branch'])})" if tree else ""
    return (
        f"created member {record['member_id']} ({render.inline(name)}, "
        f"{render.inline(record['coding_agent'])}) in pane {render.inline(record['pane_id'])}{where}"
    )


def _start_keeper(ctx: Context, fleet_id: int) -> None:
    """Start the fleet's keeper unless it runs; a warning when it cannot be started."""
    from cafleet.delivery.keystrokes import drain

    warning = drain.start_keeper(ctx.store(), ctx.settings, fleet_id, ctx.hooks)
    if warning:
        ctx.err(warning)


def delete(ctx: Context, member_id, discard_worktree):
    from cafleet.delivery.spawning import panes

    _director_only(ctx, "member delete", member_id=member_id)
    status, tree = panes.delete_member(
        ctx.store(), ctx.settings, member_id, discard_worktree=discard_worktree, hooks=ctx.hooks
    )

    def text():
        lines = [f"deleted member {member_id}; pane {status.text()}"]
        if tree is not None:
            lines.append(worktree_line(member_id, tree))
        return "\n".join(lines)

    record = {"member_id": member_id, "pane_status": status.text()}
    if tree is not None:  # a member without a worktree: the record as before worktrees existed
        record["worktree"] = tree
    ctx.emit(record, text)


def revive(ctx: Context, member_id):
    """Start a member whose pane or agent is gone again, its conversation resumed."""
    from cafleet.delivery.spawning import restore

    _director_only(ctx, "member revive", member_id=member_id)
    result = restore.revive_member(ctx.store(), ctx.settings, member_id, ctx.hooks)
    ctx.emit(result, lambda: outcome_line(result))
    _start_keeper(ctx, members.get_member(ctx.store(), member_id)["fleet_id"])
    return 1 if result["outcome"] == restore.LOST else None


def outcome_line(row: dict) -> str:
    """One member's outcome of a restore or revive, in one line (shared with fleet restore)."""
    pane = f" in pane {render.inline(row['pane_id'])}" if row["pane_id"] else ""
    detail = f": {render.inline(row['detail'])}" if row["detail"] else ""
    return f"member {row['member_id']}: {row['outcome']}{pane}{detail}"


def worktree_line(member_id: int, tree: dict) -> str:
    """What a delete did with a member's worktree, in one line (shared with fleet delete)."""
    from cafleet.delivery.worktrees import kept_line

    if tree["status"] == "removed":
        return (
            f"member {member_id}: removed its worktree {render.inline(tree['path'])} "
            f"and branch {render.inline(tree['branch'])}"
        )
    return kept_line(member_id, tree)


def diff(ctx: Context, member_id, stat):
    from cafleet.delivery import worktrees

    record = worktrees.diff(ctx.store(), ctx.environ, member_id, stat=stat)
    ctx.emit(record, lambda: record["diff"].rstrip("\n"))


def capture(ctx: Context, member_id, lines, ansi):
    from cafleet.delivery.spawning import panes

    record = panes.capture_member(ctx.store(), member_id, lines, ansi)
    ctx.emit(record, record["text"])


def prompt(ctx: Context, member_id, force, text):
    from cafleet.delivery.spawning import panes

    _director_only(ctx, "member prompt", member_id=member_id)
    record = panes.prompt_member(ctx.store(), ctx.settings, member_id, text, force=force, hooks=ctx.hooks)
    ctx.emit(record, lambda: f"prompt submitted to member {member_id} (pane {record['pane_id']})")


def _dialog_lines(member_id: int, seen) -> list[str]:
    """``member show --with-dialog``'s lines: the dialog as the notice shows it (its text already
    escaped, :mod:`cafleet.delivery.keystrokes.dialog`) and its options as `member answer` numbers them."""
    if seen is None:
        return ["dialog: none (no dialog awaiting its user on its screen, or its screen cannot be read)"]
    lines = [f"dialog {seen.digest}:", *(f"    {line}" if line else "" for line in seen.lines)]
    if not seen.options:
        return [*lines, "options: none (answer it in its pane)"]
    listed = ", ".join(f"{number} {label}" for number, label in seen.options)
    how = "" if seen.numbered else " (its buttons, numbered left to right)"
    return [
        *lines,
        f"options{how}: {listed}",
        f"answer: cafleet member answer {member_id} CHOICE --dialog {seen.digest}",
    ]


def answer(ctx: Context, member_id, choice, dialog, label):
    from cafleet.delivery.keystrokes.answer import answer_member

    _director_only(ctx, "member answer", member_id=member_id)
    record = answer_member(ctx.store(), ctx.settings, member_id, choice, dialog, label, ctx.hooks)
    ctx.emit(
        record,
        lambda: (
            f"answered option {choice} ({render.inline(record['label'])}) of the dialog on member {member_id}'s "
            f"pane {record['pane_id']}"
        ),
    )


def exec_(ctx: Context, member_id, command, file, wait):
    from cafleet.broker.execs import MAX_COMMAND_BYTES, check_command, status_text
    from cafleet.cli.body import read_body
    from cafleet.delivery import execs

    if command is None and file is None:
        from cafleet.errors import UsageError

        raise UsageError("missing the command: give COMMAND or --file PATH (--file - reads stdin).")
    if command is not None and file is not None:
        from cafleet.errors import UsageError

        raise UsageError("give the command either as COMMAND or with --file, not both.")
    if command is not None:
        text = check_command(command)
    else:
        text = check_command(read_body(ctx, None, file, limit=MAX_COMMAND_BYTES, what="a command", nul=False))
    settings = ctx.settings
    _director_only(ctx, "member exec", member_id=member_id)

    def print_id(record):  # the id is out before any pane input
        if not ctx.json:
            ctx.out(f"exec {record['exec_id']} stored for member {member_id}")

    record, failure = execs.create(ctx.store(), settings, member_id, text, on_stored=print_id, hooks=ctx.hooks)
    if failure:
        ctx.err(
            f"Warning: exec {record['exec_id']} is stored but not typed into member {member_id}'s pane yet: {failure}."
        )
    elif not ctx.json:
        ctx.out(f"exec {record['exec_id']} typed into member {member_id}'s pane")
    if wait:
        record = execs.wait(ctx.store(), settings, record["exec_id"], hooks=ctx.hooks)
    from cafleet.broker.execs import public

    ctx.emit(public(record), lambda: _exec_line(record, status_text) if wait else None)
    if wait and record["outcome"] != "finished":
        from cafleet.errors import ExitCode

        return ExitCode.FAILURE
    return None


def _exec_line(record, status_text) -> str:
    if record["outcome"] == "finished":
        return f"exec {record['exec_id']} finished: {status_text(record['exit_status'])}"
    return f"exec {record['exec_id']} {record['outcome'].replace('_', ' ')}: no exit status"


def exec_run(ctx: Context, exec_id):
    from cafleet.delivery import execs

    return execs.run(ctx.store(), ctx.environ, exec_id, ctx.out)


def _director_only(ctx: Context, command: str, *, fleet_id=None, member_id=None) -> None:
    """Refused, before anything is stored or typed, unless the caller is the fleet's
    Director (by its pane) or the person (docs/security.md)."""
    from cafleet.delivery import authority

    if fleet_id is not None:
        authority.require_director(ctx.store(), ctx.environ, fleet_id, command)
    else:
        authority.require_director_of(ctx.store(), ctx.environ, member_id, command)
