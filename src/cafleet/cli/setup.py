"""`cafleet setup`: initialise (and, when there are any, upgrade) the database, then install
the embedded skill and presets for each coding agent, offline, recording each install."""

from __future__ import annotations

from cafleet.errors import UsageError

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def setup(ctx: Context, coding_agents):
    from cafleet import __version__
    from cafleet.agents.backends import AGENTS
    from cafleet.agents.install import install
    from cafleet.broker.assets import record_install

    for agent in coding_agents:
        if agent not in AGENTS:
            raise UsageError(f"unknown coding agent {agent!r} for --coding-agent; choose {', '.join(AGENTS)}.")
    agents = list(dict.fromkeys(coding_agents)) or list(AGENTS)
    store = ctx.store()  # diagnosis, and baseline initialisation of a new file
    from cafleet.store.schema import AUX_TABLES, add_auxiliary_indexes

    added = add_auxiliary_indexes(store)  # a file made by an older cafleet gets them (and the tables) here
    tables = [name for name in added if name in AUX_TABLES]
    indexes = [name for name in added if name not in AUX_TABLES]
    installed = []
    for agent in agents:
        for result in install(agent, ctx.environ):
            record_install(store, result.coding_agent, str(result.path), __version__)
            installed.append({"coding_agent": result.coding_agent, "path": str(result.path), "status": result.status})
    shown = store.path  # a URL without its password
    report = {
        "database": {"path": shown, "ok": True, "indexes_added": indexes, "tables_added": tables},
        "assets": installed,
        "cafleet_version": __version__,
    }

    def text():
        lines = [f"database ready: {shown}"]
        lines += [f"added index {name}" for name in indexes]
        lines += [f"added table {name}" for name in tables]
        lines += [f"{item['coding_agent']}: {item['path']} ({item['status']})" for item in installed]
        return "\n".join(lines)

    ctx.emit(report, text)
