"""asset_installs: which cafleet version installed which agent asset where."""

from __future__ import annotations

from cafleet import clock


def record_install(store, coding_agent: str, path: str, cafleet_version: str) -> None:
    """Upsert one row after a successful installation."""
    with store.write():
        store.execute(
            "INSERT INTO asset_installs (coding_agent, path, cafleet_version, installed_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (coding_agent, path) DO UPDATE SET cafleet_version = excluded.cafleet_version, "
            "installed_at = excluded.installed_at",
            (coding_agent, path, cafleet_version, clock.now()),
        )


def list_installs(store) -> list[dict]:
    rows = store.execute(
        "SELECT coding_agent, path, cafleet_version, installed_at FROM asset_installs ORDER BY coding_agent, path"
    ).fetchall()
    return [dict(zip(("coding_agent", "path", "cafleet_version", "installed_at"), row)) for row in rows]
