"""`cafleet setup`: initialise/upgrade the database, install the embedded assets."""

from __future__ import annotations


def setup(ctx, coding_agents):
    store = ctx.store()  # diagnosis + baseline initialisation (upgrades would run here)
    result = {"database": {"path": ctx.db_path, "ok": True}}
    ctx.emit(result, lambda: f"database ready: {ctx.db_path}")
