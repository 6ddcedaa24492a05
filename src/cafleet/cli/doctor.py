"""`cafleet doctor`: one section per concern, each ✓/✗ with a one-line fix."""

from __future__ import annotations

from cafleet.errors import CafleetError, ExitCode


def multiplexer_section(environ) -> dict:
    from cafleet.mux.detect import detect_backend, multiplexer_for_environment

    try:
        backend = detect_backend(environ)
        pane = multiplexer_for_environment(environ).current_pane()
    except CafleetError as error:
        return {"ok": False, "error": str(error), "fix": "run cafleet inside a tmux or herdr pane"}
    return {"ok": True, "backend": backend, "session": pane.session, "window_id": pane.window_id, "pane_id": pane.pane_id}


def database_section(ctx) -> dict:
    try:
        path = ctx.db_path
    except CafleetError as error:
        return {"ok": False, "path": None, "error": str(error), "fix": "set CAFLEET_DATABASE_URL to an absolute path"}
    try:
        ctx.store()
    except CafleetError as error:
        return {"ok": False, "path": path, "error": str(error), "fix": "point CAFLEET_DATABASE_URL at a cafleet database or move the file away"}
    return {"ok": True, "path": path, "diagnosis": "current format (schema 1)"}


def _line(ok: bool, title: str, detail: str, fix: str | None = None) -> str:
    text = f"{'✓' if ok else '✗'} {title}: {detail}"
    if not ok and fix:
        text += f"\n    fix: {fix}"
    return text


def doctor(ctx):
    report = {
        "multiplexer": multiplexer_section(ctx.environ),
        "database": database_section(ctx),
    }

    def text():
        mux, db = report["multiplexer"], report["database"]
        lines = [
            _line(mux["ok"], "multiplexer",
                  f"{mux['backend']} pane {mux['pane_id']}" if mux["ok"] else mux["error"], mux.get("fix")),
            _line(db["ok"], "database", f"{db['path']} ({db['diagnosis']})" if db["ok"] else db["error"], db.get("fix")),
        ]
        return "\n".join(lines)

    ctx.emit(report, text)
    return ExitCode.OK if all(section["ok"] for section in report.values()) else ExitCode.FAILURE
