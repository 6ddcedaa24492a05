"""asset_installs: which cafleet version installed which agent asset where."""

from __future__ import annotations

from cafleet import clock

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.store.protocol import Store


def record_install(store: Store, coding_agent: str, path: str, cafleet_version: str) -> None:
    """Upsert one row after a successful installation."""
    with store.write():
        store.execute(
            "INSERT INTO asset_installs (coding_agent, path, cafleet_version, installed_at) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (coding_agent, path) DO UPDATE SET cafleet_version = excluded.cafleet_version, "
            "installed_at = excluded.installed_at",
            (coding_agent, path, cafleet_version, clock.now()),
        )
