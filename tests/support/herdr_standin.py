#!/usr/bin/env python3
"""A stand-in for the ``herdr`` command line, backed by a private tmux server.

herdr cannot be installed here, so tests drive this program instead (through the
``tests/support/bin/herdr`` wrapper). It implements the ``herdr pane`` subcommands cafleet
uses -- ``current``, ``get``, ``list``, ``layout``, ``split``, ``run``, ``send-text``,
``send-keys``, ``read``, ``close``, ``process-info`` -- and ``herdr tab create|list``, with
herdr's output contract and its JSON shapes (``src/api/schema/{panes,tabs,response}.rs`` of
herdr's source):

* success: exit 0; JSON commands print one compact ``{"id": ..., "result": {...}}`` line on
  stdout, input commands print nothing, ``read`` prints the text itself;
* server-side failure: exit 1 and ``{"id": ..., "error": {"code": ..., "message": ...}}`` on
  stderr (``pane_not_found``, ``server_not_running``, ``invalid_params``);
* usage error: exit 2 and a plain-text line on stderr.

The herdr server is a tmux server: herdr's socket path *is* the tmux socket. It is taken
from ``HERDR_SOCKET_PATH`` (set in every pane, as herdr does) or, like herdr's default
session, from ``HERDR_STANDIN_TMUX_SOCKET``. One workspace ``w1`` is a tmux session, tabs
``w1:tN`` are windows and panes ``w1:pN`` are tmux panes; the mapping and counters live in
``<socket>.standin.json``, guarded by an ``flock`` on ``<socket>.standin.lock``. New panes
run the shell recorded by :func:`start_server` and get ``HERDR_ENV``, ``HERDR_SOCKET_PATH``,
``HERDR_WORKSPACE_ID``, ``HERDR_TAB_ID`` and ``HERDR_PANE_ID``.

Sizes are tmux's: ``pane layout`` reports each tmux pane's position and size as its
``rect`` and the window's size as the ``area`` (herdr's rectangles include a pane's border,
tmux's panes have none and a one-cell divider between them), and no ``splits`` (tmux's
layout tree is not herdr's). A tab's label is the one ``tab create --label`` gave, else its
position (as herdr's); a tab closes with its last pane (tmux closes the window).
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

WORKSPACE = "w1"
TMUX_TIMEOUT = 10.0
_ROW_FORMAT = "\t".join(
    [
        "#{pane_id}",
        "#{window_id}",
        "#{pane_active}",
        "#{window_active}",
        "#{pane_pid}",
        "#{pane_dead}",
        "#{pane_current_path}",
        "#{pane_left}",
        "#{pane_top}",
        "#{pane_width}",
        "#{pane_height}",
        "#{window_width}",
        "#{window_height}",
        "#{window_zoomed_flag}",
    ]
)
_NAMED_KEYS = {
    "enter": "Enter",
    "tab": "Tab",
    "esc": "Escape",
    "escape": "Escape",
    "backspace": "BSpace",
    "left": "Left",
    "right": "Right",
    "up": "Up",
    "down": "Down",
    "space": "Space",
    "home": "Home",
    "end": "End",
    "pageup": "PPage",
    "pagedown": "NPage",
    "delete": "DC",
    "insert": "IC",
    "shift+tab": "BTab",
    "minus": "-",
    "plus": "+",
    "backtick": "`",
}


class Failure(Exception):
    """A herdr error envelope (exit 1) or, with ``usage=True``, a usage error (exit 2)."""

    def __init__(self, code: str, message: str, *, usage: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.usage = usage


def usage(message: str) -> Failure:
    return Failure("", message, usage=True)


# -- tmux ----------------------------------------------------------------------------------


def _protect(arg: str) -> str:
    """tmux splits commands at an argument ending in ';' unless it ends in '\\;'."""
    return arg[:-1] + "\\;" if arg.endswith(";") else arg


def tmux(socket: str, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> str:
    argv = ["tmux", "-f", "/dev/null", "-S", socket, *(_protect(a) for a in args)]
    try:
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=TMUX_TIMEOUT, env=env)
    except subprocess.TimeoutExpired:
        raise Failure("timeout", "the backing tmux server did not answer") from None
    err = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode != 0:
        if "no server running" in err or "error connecting to" in err:
            raise Failure("server_not_running", f"herdr server is not running at {socket}")
        raise Failure("internal_error", err.splitlines()[0] if err else "tmux failed")
    return done.stdout.decode("utf-8", "replace")


# -- state ---------------------------------------------------------------------------------


def _state_path(socket: str) -> str:
    return socket + ".standin.json"


def _load(socket: str) -> dict[str, Any]:
    try:
        with open(_state_path(socket), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        raise Failure("server_not_running", f"herdr server is not running at {socket}") from None


def _save(socket: str, state: dict[str, Any]) -> None:
    tmp = _state_path(socket) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(state, handle)
    os.replace(tmp, _state_path(socket))


@contextmanager
def _locked(socket: str) -> Iterator[None]:
    with open(socket + ".standin.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def _pane_env(socket: str, tab: str, pane: str) -> list[str]:
    values = {
        "HERDR_ENV": "1",
        "HERDR_SOCKET_PATH": socket,
        "HERDR_WORKSPACE_ID": WORKSPACE,
        "HERDR_TAB_ID": tab,
        "HERDR_PANE_ID": pane,
    }
    return [arg for key, value in values.items() for arg in ("-e", f"{key}={value}")]


def start_server(
    socket: str,
    *,
    shell: Sequence[str],
    env: dict[str, str],
    cwd: str | None = None,
    width: int = 200,
    height: int = 50,
) -> None:
    """Start the stand-in "herdr server": workspace w1, tab w1:t1, root pane w1:p1."""
    args = ["new-session", "-d", "-s", WORKSPACE, "-x", str(width), "-y", str(height)]
    args += ["-P", "-F", "#{pane_id}\t#{window_id}", *_pane_env(socket, "w1:t1", "w1:p1")]
    if cwd is not None:
        args += ["-c", cwd.replace("#", "##")]
    out = tmux(socket, *args, "--", *shell, env=env)
    tmux(socket, "set-option", "-s", "exit-empty", "off")
    pane, window = out.strip().split("\t")
    state = {
        "shell": list(shell),
        "next_pane": 2,
        "next_tab": 2,
        "next_terminal": 2,
        "tabs": {"w1:t1": window},
        "panes": {"w1:p1": {"tmux": pane, "tab": "w1:t1", "terminal": "term_1"}},
    }
    with _locked(socket):
        _save(socket, state)


# -- panes ---------------------------------------------------------------------------------


class Server:
    """The state of one stand-in server, read under its lock."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.state = _load(socket)
        self.rows: dict[str, list[str]] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read tmux's panes (tmux id -> the fields of _ROW_FORMAT)."""
        rows = tmux(self.socket, "list-panes", "-a", "-F", _ROW_FORMAT).splitlines()
        self.rows = {row.split("\t")[0]: row.split("\t") for row in rows if row}

    def save(self) -> None:
        _save(self.socket, self.state)

    def live(self) -> list[str]:
        """herdr ids of panes that still exist, in creation order."""
        ids = [p for p, rec in self.state["panes"].items() if rec["tmux"] in self.rows]
        return sorted(ids, key=lambda p: int(p.rsplit("p", 1)[1]))

    def resolve(self, pane_id: str) -> dict[str, Any]:
        record = self.state["panes"].get(pane_id)
        if record is None or record["tmux"] not in self.rows:
            raise Failure("pane_not_found", f"pane {pane_id} not found")
        return record

    def focused(self) -> str:
        for pane_id in self.live():
            row = self.rows[self.state["panes"][pane_id]["tmux"]]
            if row[2] == "1" and row[3] == "1":
                return pane_id
        raise Failure("pane_not_found", "no focused pane")

    def tabs(self) -> list[str]:
        """herdr ids of the tabs that still have a pane, in creation order."""
        live = {self.state["panes"][p]["tab"] for p in self.live()}
        return sorted(live, key=lambda t: int(t.rsplit("t", 1)[1]))

    def tab_panes(self, tab_id: str) -> list[str]:
        """The tab's panes in tmux's order (left to right, top to bottom)."""
        by_tmux = {self.state["panes"][p]["tmux"]: p for p in self.live() if self.state["panes"][p]["tab"] == tab_id}
        return [by_tmux[row] for row in self.rows if row in by_tmux]

    def tab_info(self, tab_id: str) -> dict[str, Any]:
        tabs = self.tabs()
        if tab_id not in tabs:
            raise Failure("tab_not_found", f"tab {tab_id} not found")
        panes = self.tab_panes(tab_id)
        return {
            "tab_id": tab_id,
            "workspace_id": WORKSPACE,
            "number": int(tab_id.rsplit("t", 1)[1]),
            "label": self.state.get("labels", {}).get(tab_id) or str(tabs.index(tab_id) + 1),
            "focused": self.rows[self.state["panes"][panes[0]]["tmux"]][3] == "1",
            "pane_count": len(panes),
            "agent_status": "unknown",
        }

    def info(self, pane_id: str) -> dict[str, Any]:
        record = self.resolve(pane_id)
        row = self.rows[record["tmux"]]
        return {
            "pane_id": pane_id,
            "terminal_id": record["terminal"],
            "workspace_id": WORKSPACE,
            "tab_id": record["tab"],
            "focused": row[2] == "1" and row[3] == "1",
            "cwd": row[6],
            "agent_status": "unknown",
            "revision": 0,
        }


def _value(args: Sequence[str], index: int, flag: str) -> str:
    if index + 1 >= len(args):
        raise usage(f"missing value for {flag}")
    return args[index + 1]


def _expand_equals(args: Sequence[str], flags: Sequence[str]) -> list[str]:
    out: list[str] = []
    for arg in args:
        flag, sep, value = arg.partition("=")
        out += [flag, value] if sep and flag in flags else [arg]
    return out


def _optional_pane(args: Sequence[str]) -> str | None:
    """``[--pane ID|--current]``: None means the calling pane (HERDR_PANE_ID)."""
    pane = None
    index = 0
    while index < len(args):
        if args[index] == "--pane":
            pane = _value(args, index, "--pane")
            index += 2
        elif args[index] == "--current":
            pane = None
            index += 1
        else:
            raise usage(f"unknown option: {args[index]}")
    return pane


def _caller(server: Server, pane: str | None) -> str:
    return pane or os.environ.get("HERDR_PANE_ID", "").strip() or server.focused()


def cmd_current(server: Server, args: Sequence[str]) -> dict[str, Any]:
    return {"type": "pane_current", "pane": server.info(_caller(server, _optional_pane(args)))}


def cmd_get(server: Server, args: Sequence[str]) -> dict[str, Any]:
    if len(args) != 1:
        raise usage("usage: herdr pane get <pane_id>")
    return {"type": "pane_info", "pane": server.info(args[0])}


def cmd_list(server: Server, args: Sequence[str]) -> dict[str, Any]:
    workspace = None
    if args:
        if args[0] != "--workspace" or len(args) != 2:
            raise usage(f"unknown option: {args[0]}")
        workspace = args[1]
    panes = [server.info(p) for p in server.live()] if workspace in (None, WORKSPACE) else []
    return {"type": "pane_list", "panes": panes}


def _rect(row: list[str], first: int) -> dict[str, int]:
    return dict(zip(("x", "y", "width", "height"), (int(v) for v in row[first : first + 4]), strict=True))


def cmd_layout(server: Server, args: Sequence[str]) -> dict[str, Any]:
    record = server.resolve(_caller(server, _optional_pane(args)))
    panes = server.tab_panes(record["tab"])
    rows = [server.rows[server.state["panes"][p]["tmux"]] for p in panes]
    focused = next((p for p, row in zip(panes, rows, strict=True) if row[2] == "1"), panes[0])
    width, height = int(rows[0][11]), int(rows[0][12])
    layout = {
        "workspace_id": WORKSPACE,
        "tab_id": record["tab"],
        "zoomed": rows[0][13] == "1",
        "area": {"x": 0, "y": 0, "width": width, "height": height},
        "focused_pane_id": focused,
        "panes": [
            {"pane_id": p, "focused": p == focused, "rect": _rect(row, 7)} for p, row in zip(panes, rows, strict=True)
        ],
        "splits": [],
    }
    return {"type": "pane_layout", "layout": layout}


def _workspace_option(args: Sequence[str], index: int) -> str:
    workspace = _value(args, index, "--workspace")
    if workspace != WORKSPACE:
        raise Failure("workspace_not_found", f"workspace {workspace} not found")
    return workspace


def cmd_tab_list(server: Server, args: Sequence[str]) -> dict[str, Any]:
    index = 0
    while index < len(args):
        if args[index] != "--workspace":
            raise usage(f"unknown option: {args[index]}")
        _workspace_option(args, index)
        index += 2
    return {"type": "tab_list", "tabs": [server.tab_info(t) for t in server.tabs()]}


def cmd_tab_create(server: Server, args: Sequence[str]) -> dict[str, Any]:
    cwd, label, focus = None, None, False
    env: dict[str, str] = {}
    index = 0
    while index < len(args):
        flag = args[index]
        if flag in ("--focus", "--no-focus"):
            focus, index = flag == "--focus", index + 1
            continue
        if flag == "--workspace":
            _workspace_option(args, index)
        elif flag == "--cwd":
            cwd = os.path.abspath(_value(args, index, flag))
        elif flag == "--label":
            label = _value(args, index, flag)
        elif flag == "--env":
            key, sep, val = _value(args, index, flag).partition("=")
            if not sep or not key:
                raise usage("env must use KEY=VALUE")
            env[key] = val
        else:
            raise usage(f"unknown option: {flag}")
        index += 2
    if cwd is not None and not os.path.isdir(cwd):
        raise Failure("tab_create_failed", f"No such file or directory: {cwd}")
    state = server.state
    tab_id, pane_id = f"{WORKSPACE}:t{state['next_tab']}", f"{WORKSPACE}:p{state['next_pane']}"
    tmux_args = ["new-window", "-P", "-F", "#{pane_id}\t#{window_id}", "-t", f"{WORKSPACE}:"]
    tmux_args += [] if focus else ["-d"]
    if cwd is not None:
        tmux_args += ["-c", cwd.replace("#", "##")]
    for key, val in env.items():
        tmux_args += ["-e", f"{key}={val}"]
    tmux_args += _pane_env(server.socket, tab_id, pane_id)
    new, window = tmux(server.socket, *tmux_args, "--", *state["shell"]).strip().split("\t")
    state["next_tab"] += 1
    state["next_pane"] += 1
    state["tabs"][tab_id] = window
    if label is not None:
        state.setdefault("labels", {})[tab_id] = label
    state["panes"][pane_id] = {"tmux": new, "tab": tab_id, "terminal": f"term_{state['next_terminal']}"}
    state["next_terminal"] += 1
    server.save()
    server.refresh()
    return {"type": "tab_created", "tab": server.tab_info(tab_id), "root_pane": server.info(pane_id)}


def cmd_split(server: Server, args: Sequence[str]) -> dict[str, Any]:
    target, direction, ratio, cwd, focus = None, None, None, None, False
    env: dict[str, str] = {}
    index = 0
    if args and not args[0].startswith("--"):
        target, index = args[0], 1
    while index < len(args):
        flag = args[index]
        if flag in ("--focus", "--no-focus"):
            focus, index = flag == "--focus", index + 1
            continue
        if flag == "--current":
            target, index = os.environ.get("HERDR_PANE_ID") or None, index + 1
            continue
        value = _value(args, index, flag)
        index += 2
        if flag == "--pane":
            target = value
        elif flag == "--direction":
            if value not in ("right", "down"):
                raise usage(f"invalid split direction: {value} (expected right or down)")
            direction = value
        elif flag == "--ratio":
            try:
                ratio = float(value)
            except ValueError:
                raise usage(f"invalid ratio: {value}") from None
        elif flag == "--cwd":
            cwd = os.path.abspath(value)
        elif flag == "--env":
            key, sep, val = value.partition("=")
            if not sep or not key:
                raise usage("env must use KEY=VALUE")
            env[key] = val
        else:
            raise usage(f"unknown option: {flag}")
    if direction is None:
        raise usage(
            "usage: herdr pane split [<pane_id>|--pane ID|--current] --direction right|down "
            "[--ratio FLOAT] [--cwd PATH] [--env KEY=VALUE] [--focus] [--no-focus]"
        )
    source = target or server.focused()
    record = server.resolve(source)
    if cwd is not None and not os.path.isdir(cwd):
        raise Failure("invalid_params", f"cwd is not a directory: {cwd}")
    state = server.state
    pane_id = f"{WORKSPACE}:p{state['next_pane']}"
    terminal = f"term_{state['next_terminal']}"
    tmux_args = ["split-window", "-P", "-F", "#{pane_id}", "-t", record["tmux"]]
    tmux_args += ["-h"] if direction == "right" else ["-v"]
    tmux_args += [] if focus else ["-d"]
    if ratio is not None and 0.0 < ratio < 1.0:
        tmux_args += ["-l", f"{max(1, round((1.0 - ratio) * 100))}%"]
    if cwd is not None:
        tmux_args += ["-c", cwd.replace("#", "##")]
    for key, val in env.items():  # herdr-managed variables below stay authoritative
        tmux_args += ["-e", f"{key}={val}"]
    tmux_args += _pane_env(server.socket, record["tab"], pane_id)
    new = tmux(server.socket, *tmux_args, "--", *state["shell"]).strip()
    state["next_pane"] += 1
    state["next_terminal"] += 1
    state["panes"][pane_id] = {"tmux": new, "tab": record["tab"], "terminal": terminal}
    server.save()
    server.refresh()
    return {"type": "pane_info", "pane": server.info(pane_id)}


def _paste(server: Server, pane_tmux: str, text: str, *, bracketed: bool) -> None:
    """Write ``text`` to the pane exactly (no LF->CR), bracketed only if the app asked."""
    if not text:
        return
    buffer = f"herdr-standin-{os.getpid()}"
    tmux(server.socket, "load-buffer", "-b", buffer, "-", stdin=text.encode("utf-8", "replace"))
    paste = ["paste-buffer", "-d", "-r", "-b", buffer, "-t", pane_tmux]
    tmux(server.socket, *(paste + (["-p"] if bracketed else [])))


def cmd_send_text(server: Server, args: Sequence[str]) -> None:
    if len(args) < 2:
        raise usage("usage: herdr pane send-text <pane_id> <text>")
    _paste(server, server.resolve(args[0])["tmux"], " ".join(args[1:]), bracketed=False)


def cmd_run(server: Server, args: Sequence[str]) -> None:
    if len(args) < 2:
        raise usage("usage: herdr pane run <pane_id> <command>")
    pane = server.resolve(args[0])["tmux"]
    _paste(server, pane, " ".join(args[1:]), bracketed=True)
    tmux(server.socket, "send-keys", "-t", pane, "Enter")


def _tmux_key(key: str) -> str:
    lowered = key.lower()
    if lowered in _NAMED_KEYS:
        return _NAMED_KEYS[lowered]
    if lowered[:1] == "f" and lowered[1:].isdigit() and 1 <= int(lowered[1:]) <= 12:
        return lowered.upper()
    for prefix, tmux_prefix in (("ctrl+", "C-"), ("control+", "C-"), ("c-", "C-"), ("alt+", "M-")):
        if lowered.startswith(prefix) and len(key) == len(prefix) + 1:
            return tmux_prefix + lowered[-1]
    if len(key) == 1 and key.isprintable():
        return key
    raise Failure("invalid_params", f"invalid key: {key}")


def cmd_send_keys(server: Server, args: Sequence[str]) -> None:
    if len(args) < 2:
        raise usage("usage: herdr pane send-keys <pane_id> <key> [key ...]")
    pane = server.resolve(args[0])["tmux"]
    keys = [_tmux_key(key) for key in args[1:]]  # validate every key before writing any
    tmux(server.socket, "send-keys", "-t", pane, "--", *keys)


def cmd_read(server: Server, args: Sequence[str]) -> str:
    args = _expand_equals(args, ("--source", "--lines", "--format"))
    pane, source, lines, ansi = None, "recent", None, False
    index = 0
    while index < len(args):
        flag = args[index]
        if flag == "--source":
            source = _value(args, index, flag).replace("_", "-")
            if source not in ("visible", "recent", "recent-unwrapped", "detection"):
                raise usage(f"invalid read source: {source}")
            index += 2
        elif flag == "--lines":
            value = _value(args, index, flag)
            if not value.isdigit():
                raise usage(f"invalid value for --lines: {value}")
            lines, index = int(value), index + 2
        elif flag == "--format":
            value = _value(args, index, flag)
            if value not in ("text", "ansi"):
                raise usage(f"invalid read format: {value}")
            ansi, index = value == "ansi", index + 2
        elif flag in ("--ansi", "--raw"):
            ansi, index = True, index + 1
        elif flag.startswith("-"):
            raise usage(f"unknown option: {flag}")
        elif pane is not None:
            raise usage(f"unexpected argument: {flag}")
        else:
            pane, index = flag, index + 1
    if pane is None:
        raise usage("usage: herdr pane read <pane_id> [--source S] [--lines N] [--format F]")
    recent = source.startswith("recent")
    count = lines if lines is not None else (80 if recent else None)
    capture = ["capture-pane", "-p", "-t", server.resolve(pane)["tmux"]]
    if ansi and source != "detection":  # detection is always plain text
        capture.append("-e")
    if recent:
        capture += ["-S", f"-{count}"] + (["-J"] if source == "recent-unwrapped" else [])
    rows = tmux(server.socket, *capture).split("\n")
    if rows and rows[-1] == "":  # tmux ends every row with a newline
        rows.pop()
    if count is not None:
        rows = rows[len(rows) - count :] if count else []
    return "\n".join(rows)


def cmd_close(server: Server, args: Sequence[str]) -> dict[str, Any]:
    if len(args) != 1:
        raise usage("usage: herdr pane close <pane_id>")
    record = server.resolve(args[0])
    tmux(server.socket, "kill-pane", "-t", record["tmux"])
    del server.state["panes"][args[0]]
    server.save()
    return {"type": "ok"}


def _proc_stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
        return handle.read().rsplit(")", 1)[1].split()


def _proc_comm(pid: int) -> str:
    with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as handle:
        return handle.read().strip()


def _proc_argv(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        return [a.decode("utf-8", "replace") for a in handle.read().split(b"\0") if a]


def cmd_process_info(server: Server, args: Sequence[str]) -> dict[str, Any]:
    pane_id = _caller(server, _optional_pane(args))
    row = server.rows[server.resolve(pane_id)["tmux"]]
    info: dict[str, Any] = {"pane_id": pane_id}
    if row[5] != "1" and row[4].isdigit():
        shell_pid = int(row[4])
        info["shell_pid"] = shell_pid
        try:
            group = int(_proc_stat(shell_pid)[5])  # tpgid: the terminal's foreground group
            info["foreground_process_group_id"] = group
            argv = _proc_argv(group)
            info["foreground_processes"] = [
                {"pid": group, "name": _proc_comm(group), "argv": argv, "cmdline": " ".join(argv)}
            ]
        except (OSError, IndexError, ValueError):
            pass  # the process ended meanwhile: report what is known
    return {"type": "pane_process_info", "process_info": info}


_JSON_COMMANDS = {
    "current": ("cli:pane:current", cmd_current),
    "get": ("cli:pane:get", cmd_get),
    "list": ("cli:pane:list", cmd_list),
    "layout": ("cli:pane:layout", cmd_layout),
    "split": ("cli:pane:split", cmd_split),
    "close": ("cli:pane:close", cmd_close),
    "process-info": ("cli:pane:process_info", cmd_process_info),
}
_SILENT_COMMANDS = {"send-text": cmd_send_text, "send-keys": cmd_send_keys, "run": cmd_run}
_TAB_COMMANDS = {
    "create": ("cli:tab:create", cmd_tab_create),
    "list": ("cli:tab:list", cmd_tab_list),
}


def _emit(stream: Any, payload: dict[str, Any]) -> None:
    line = json.dumps(payload, separators=(",", ":"), ensure_ascii=False) + "\n"
    stream.buffer.write(line.encode("utf-8"))
    stream.flush()


def run(argv: Sequence[str]) -> int:
    """Execute one ``herdr`` invocation (``argv`` without the program name)."""
    if len(argv) < 2 or argv[0] not in ("pane", "tab"):
        sys.stderr.write("herdr stand-in: only `herdr pane|tab <subcommand>` is implemented\n")
        return 2
    group, sub, args = argv[0], argv[1], argv[2:]
    json_commands = _JSON_COMMANDS if group == "pane" else _TAB_COMMANDS
    silent = _SILENT_COMMANDS if group == "pane" else {}
    request_id = json_commands.get(sub, ("cli:request", None))[0]
    if group == "pane" and sub == "read":
        request_id = "cli:pane:read"
    if sub not in json_commands and sub not in silent and (group, sub) != ("pane", "read"):
        sys.stderr.write(f"herdr {group}: unknown subcommand {sub}\n")
        return 2
    socket = os.environ.get("HERDR_SOCKET_PATH") or os.environ.get("HERDR_STANDIN_TMUX_SOCKET")
    try:
        if not socket or not os.path.exists(_state_path(socket)):
            raise Failure("server_not_running", f"herdr server is not running at {socket}")
        with _locked(socket):
            server = Server(socket)
            if sub in json_commands:
                result = json_commands[sub][1](server, args)
                _emit(sys.stdout, {"id": request_id, "result": result})
            elif sub == "read":
                sys.stdout.buffer.write(cmd_read(server, args).encode("utf-8"))
                sys.stdout.flush()
            else:
                silent[sub](server, args)
    except Failure as failure:
        if failure.usage:
            sys.stderr.write(failure.message + "\n")
            return 2
        error = {"code": failure.code, "message": failure.message}
        _emit(sys.stderr, {"id": request_id, "error": error})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
