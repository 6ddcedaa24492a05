"""The herdr backend, driven through the herdr stand-in (a real CLI over a private tmux)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from cafleet.errors import MuxError, PaneGone, PaneStale
from cafleet.mux.base import PaneContext, Program
from cafleet.mux.herdr import Herdr
from tests.support.mux_inputs import ARGV_DUMPER, HOSTILE_ARGS, HOSTILE_TEXT
from tests.support.recorder import READY
from tests.support.tmux_fixtures import RECORDER, split, wait_for


@pytest.fixture
def herdr(herdr_env) -> Herdr:
    return Herdr.from_env(herdr_env.environ)


def read_json_when_present(path) -> dict:
    wait_for(path.exists, what=f"{path.name} to be written")
    return json.loads(path.read_text())


def recorded(path) -> bytes:
    return path.read_bytes() if path.exists() else b""


def start_recorder(herdr_env, herdr: Herdr, path) -> str:
    pane = herdr_env.new_pane([sys.executable, str(RECORDER), str(path)])
    wait_for(lambda: READY in herdr.capture(pane, 5), what="the recorder to start")
    return pane


def envelope(raw: bytes) -> dict:
    lines = raw.decode().splitlines()
    assert len(lines) == 1, raw
    return json.loads(lines[0])


# -- the stand-in's command-line contract ----------------------------------------------------


def test_standin_prints_herdr_json_envelopes(herdr_env):
    done = herdr_env.run("pane", "current")
    assert done.returncode == 0 and done.stderr == b""
    current = envelope(done.stdout)
    assert current["id"] == "cli:pane:current"
    assert current["result"]["type"] == "pane_current"
    pane = current["result"]["pane"]
    assert {k: pane[k] for k in ("pane_id", "workspace_id", "tab_id", "focused")} == {
        "pane_id": "w1:p1",
        "workspace_id": "w1",
        "tab_id": "w1:t1",
        "focused": True,
    }
    listed = envelope(herdr_env.run("pane", "list").stdout)["result"]
    assert listed["type"] == "pane_list"
    assert [p["pane_id"] for p in listed["panes"]] == ["w1:p1"]


def test_standin_reports_errors_as_envelopes_on_stderr(herdr_env):
    done = herdr_env.run("pane", "get", "w1:p99")
    assert (done.returncode, done.stdout) == (1, b"")
    assert envelope(done.stderr) == {
        "id": "cli:pane:get",
        "error": {"code": "pane_not_found", "message": "pane w1:p99 not found"},
    }
    done = herdr_env.run("pane", "send-keys", "w1:p1", "enter", "no-such-key")
    assert done.returncode == 1
    assert envelope(done.stderr)["error"]["code"] == "invalid_params"
    usage = herdr_env.run("pane", "split", "w1:p1")
    assert usage.returncode == 2 and usage.stderr.startswith(b"usage: herdr pane split")


def test_standin_without_a_server_says_server_not_running(herdr_env, tmp_path):
    environ = dict(herdr_env.environ, HERDR_SOCKET_PATH=str(tmp_path / "none.sock"))
    done = herdr_env.run("pane", "list", environ=environ)
    assert done.returncode == 1
    assert envelope(done.stderr)["error"]["code"] == "server_not_running"


# -- current pane and sessions ---------------------------------------------------------------


def test_current_pane_names_workspace_tab_and_socket(herdr_env, herdr):
    assert herdr.current_pane() == PaneContext(
        backend="herdr",
        session=f"w1@{herdr_env.socket}",
        window_id="w1:t1",
        pane_id="w1:p1",
    )


def test_stored_session_reaches_the_same_server(herdr_env, herdr, monkeypatch):
    monkeypatch.delenv("HERDR_STANDIN_TMUX_SOCKET")  # only the stored socket can lead there
    again = Herdr.from_session(herdr.current_pane().session)
    assert (again.socket, again.workspace) == (herdr_env.socket, "w1")
    assert again.pane_exists("w1:p1")
    assert not again.pane_exists("w1:p99")


def test_current_pane_needs_herdr_pane_id(herdr_env):
    environ = {k: v for k, v in herdr_env.environ.items() if k != "HERDR_PANE_ID"}
    with pytest.raises(MuxError, match="HERDR_PANE_ID is not set"):
        Herdr.from_env(environ).current_pane()


def test_current_pane_of_a_closed_pane_is_gone(herdr_env):
    with pytest.raises(PaneGone, match="w1:p99"):
        Herdr.from_env(dict(herdr_env.environ, HERDR_PANE_ID="w1:p99")).current_pane()


# -- split ---------------------------------------------------------------------------------


def test_split_runs_argv_exactly_with_cwd_and_env(herdr_env, herdr, tmp_path):
    out = tmp_path / "argv.json"
    workdir = tmp_path / "dir with space #{pane_id};"
    workdir.mkdir()
    env = {"CFT_A": "value with spaces; $HOME `x`", "CFT_B": "#{session_name};"}
    pane = split(
        herdr,
        "w1:t1",
        [sys.executable, "-c", ARGV_DUMPER, str(out), *HOSTILE_ARGS],
        cwd=str(workdir),
        env=env,
    )
    assert pane == "w1:p2"
    assert read_json_when_present(out) == {"argv": HOSTILE_ARGS, "cwd": str(workdir), "env": env}
    assert not (workdir / "pwned").exists()
    info = envelope(herdr_env.run("pane", "process-info", "--pane", pane).stdout)
    process = info["result"]["process_info"]  # exec: the program replaced the pane's shell
    assert process["foreground_processes"][0]["pid"] == process["shell_pid"]


def test_split_keeps_focus_and_splits_the_tabs_focused_pane(herdr_env, herdr):
    new = split(herdr, "w1:t1", ["sleep", "60"])
    panes = envelope(herdr_env.run("pane", "list").stdout)["result"]["panes"]
    assert [(p["pane_id"], p["tab_id"], p["focused"]) for p in panes] == [
        ("w1:p1", "w1:t1", True),
        (new, "w1:t1", False),
    ]
    root = herdr_env.tmux_pane("w1:p1")
    assert herdr_env.tmux("display-message", "-p", "-t", "w1", "#{pane_id}").strip() == root


def test_split_of_a_missing_tab_pane_or_directory_fails_clearly(herdr, tmp_path):
    with pytest.raises(MuxError, match="herdr tab w1:t9 has no pane to split"):
        split(herdr, "w1:t9", ["true"])
    with pytest.raises(PaneGone, match="w1:p99"):
        split(herdr, "w1:t1", ["true"], target_pane="w1:p99")
    with pytest.raises(MuxError, match="without a command"):
        split(herdr, "w1:t1", [])
    with pytest.raises(MuxError, match="does not exist"):
        split(herdr, "w1:t1", ["true"], cwd=str(tmp_path / "missing"))


# -- tabs and sizes (placement) ----------------------------------------------------------------

TAB_INFO_KEYS = {"tab_id", "workspace_id", "number", "label", "focused", "pane_count", "agent_status"}


def test_standin_tab_create_list_and_pane_layout_print_herdrs_shapes(herdr_env):
    made = envelope(herdr_env.run("tab", "create", "--workspace", "w1", "--label", "x y", "--no-focus").stdout)
    assert made["id"] == "cli:tab:create" and made["result"]["type"] == "tab_created"
    tab, root = made["result"]["tab"], made["result"]["root_pane"]
    assert set(tab) == TAB_INFO_KEYS
    assert (tab["tab_id"], tab["label"], tab["focused"], tab["pane_count"]) == ("w1:t2", "x y", False, 1)
    assert (root["pane_id"], root["tab_id"]) == ("w1:p2", "w1:t2")
    listed = envelope(herdr_env.run("tab", "list", "--workspace", "w1").stdout)
    assert listed["id"] == "cli:tab:list" and listed["result"]["type"] == "tab_list"
    assert [(t["tab_id"], t["label"], t["focused"]) for t in listed["result"]["tabs"]] == [
        ("w1:t1", "1", True),  # a tab without a label is named by its position, as herdr's
        ("w1:t2", "x y", False),  # --no-focus: the focus stays where it was
    ]
    layout = envelope(herdr_env.run("pane", "layout", "--pane", "w1:p2").stdout)
    assert layout["id"] == "cli:pane:layout" and layout["result"]["type"] == "pane_layout"
    snapshot = layout["result"]["layout"]
    assert set(snapshot) == {"workspace_id", "tab_id", "zoomed", "area", "focused_pane_id", "panes", "splits"}
    assert snapshot["area"] == {"x": 0, "y": 0, "width": 200, "height": 50}
    assert snapshot["panes"] == [{"pane_id": "w1:p2", "focused": True, "rect": snapshot["area"]}]
    missing = herdr_env.run("tab", "create", "--workspace", "w9")
    assert missing.returncode == 1
    assert envelope(missing.stderr)["error"] == {"code": "workspace_not_found", "message": "workspace w9 not found"}


def test_tab_layout_reports_the_tabs_panes_and_their_sizes(herdr_env, herdr):
    right, _ = herdr.split_identified("w1:t1", Program(["sleep", "60"]), target_pane="w1:p1", beside=True)
    below, _ = herdr.split_identified("w1:t1", Program(["sleep", "60"]), target_pane=right)
    tab, panes = herdr.tab_layout("w1:p1")
    listed = herdr_env.tmux("list-panes", "-a", "-F", "#{pane_id} #{pane_width} #{pane_height}").splitlines()
    sizes = {tmux_id: (int(w), int(h)) for tmux_id, w, h in (line.split() for line in listed)}
    assert tab == "w1:t1"
    assert {p: (w, h) for p, w, h in panes} == {p: sizes[herdr_env.tmux_pane(p)] for p in ("w1:p1", right, below)}
    assert panes[0][1:] == (100, 50) and {panes[1][1:], panes[2][1:]} == {(99, 25), (99, 24)}
    with pytest.raises(PaneGone, match="w1:p99"):
        herdr.tab_layout("w1:p99")


def test_new_tab_runs_argv_exactly_with_cwd_and_env_and_leaves_the_focus(herdr_env, herdr, tmp_path):
    out = tmp_path / "argv.json"
    workdir = tmp_path / "dir with space #{pane_id};"
    workdir.mkdir()
    env = {"CFT_A": "value with spaces; $HOME `x`", "CFT_B": "#{session_name};"}
    argv = [sys.executable, "-c", ARGV_DUMPER, str(out), *HOSTILE_ARGS]
    tab, pane, identity = herdr.new_tab(Program(argv, str(workdir), env), label="cafleet-1-e2e")
    assert (tab, pane) == ("w1:t2", "w1:p2")
    assert read_json_when_present(out) == {"argv": HOSTILE_ARGS, "cwd": str(workdir), "env": env}
    assert not (workdir / "pwned").exists()
    assert identity and herdr.identity(pane) == identity  # the shell's, kept by the program exec'd there
    tabs = envelope(herdr_env.run("tab", "list").stdout)["result"]["tabs"]
    assert [(t["tab_id"], t["label"], t["focused"]) for t in tabs] == [
        ("w1:t1", "1", True),
        ("w1:t2", "cafleet-1-e2e", False),
    ]
    with pytest.raises(MuxError, match="does not exist"):
        herdr.new_tab(Program(["true"], cwd=str(tmp_path / "missing")), label="x")
    with pytest.raises(MuxError, match="not a valid environment variable"):
        herdr.new_tab(Program(["true"], env={"A=B": "c"}), label="x")
    assert len(envelope(herdr_env.run("tab", "list").stdout)["result"]["tabs"]) == 2  # nothing opened


def test_labelled_tabs_are_the_workspaces_tabs_of_that_label_with_their_panes(herdr_env, herdr):
    assert herdr.labelled_tabs("cafleet-1-e2e") == []
    first, root, _ = herdr.new_tab(Program(["sleep", "60"]), label="cafleet-1-e2e")
    herdr.new_tab(Program(["sleep", "60"]), label="cafleet-1-e2e-other")
    second, other, _ = herdr.new_tab(Program(["sleep", "60"]), label="cafleet-1-e2e")
    below, _ = herdr.split_identified(first, Program(["sleep", "60"]), target_pane=root)
    assert herdr.labelled_tabs("cafleet-1-e2e") == [(first, [root, below]), (second, [other])]
    herdr.kill(other)  # a tab closes with its last pane
    assert herdr.labelled_tabs("cafleet-1-e2e") == [(first, [root, below])]
    with pytest.raises(MuxError, match="workspace is unknown"):
        Herdr(herdr_env.socket, binary=herdr_env.binary).labelled_tabs("cafleet-1-e2e")


# -- capture -------------------------------------------------------------------------------


def test_capture_returns_what_the_program_printed(herdr_env, herdr):
    script = (
        "import time\n"
        "for i in range(1, 21): print(f'row {i}')\n"
        "print('ünïcødé 中文')\n"
        "print('\\x1b[31mred\\x1b[0m')\n"
        "time.sleep(60)\n"
    )
    pane = herdr_env.new_pane([sys.executable, "-c", script])
    expected = "row 19\nrow 20\nünïcødé 中文\nred"
    wait_for(lambda: herdr.capture(pane, 4) == expected, what="the printed rows")
    assert herdr.capture(pane, 1) == "red"
    assert herdr.capture(pane, 1, ansi=True) == "\x1b[31mred"


def test_capture_of_a_gone_pane_is_pane_gone(herdr):
    with pytest.raises(PaneGone, match="herdr pane w1:p99 is gone"):
        herdr.capture("w1:p99")


# -- typing --------------------------------------------------------------------------------


def test_type_text_types_hostile_strings_literally(herdr_env, herdr, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(herdr_env, herdr, out)
    expected = b""
    for text in [*HOSTILE_TEXT, "--help", "-h", "enter"]:
        herdr.type_text(pane, text)
        expected += text.encode()
        wait_for(lambda want=expected: recorded(out) == want, what=f"{text!r} to arrive")
    herdr.press_enter(pane)
    wait_for(lambda: recorded(out) == expected + b"\r", what="Enter to arrive")
    assert not (tmp_path / "x").exists()


def test_press_arrow_sends_the_arrow_keys(herdr_env, herdr, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(herdr_env, herdr, out)
    herdr.press_arrow(pane, "right", 2)
    herdr.press_arrow(pane, "left", 1)
    wait_for(lambda: recorded(out) == b"\x1b[C\x1b[C\x1b[D", what="the arrows to arrive")
    with pytest.raises(ValueError):
        herdr.press_arrow(pane, "escape", 1)  # only the four arrows


def test_type_text_sends_long_text_exactly(herdr_env, herdr, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(herdr_env, herdr, out)
    text = "".join(f"{i:05d};中🙂-" for i in range(1500))
    herdr.type_text(pane, text)
    wait_for(lambda: len(recorded(out)) >= len(text.encode()), timeout=20, what="all text")
    assert recorded(out) == text.encode()


def test_typing_into_a_gone_pane_is_pane_gone(herdr):
    with pytest.raises(PaneGone) as typed:
        herdr.type_text("w1:p99", "hello")
    with pytest.raises(PaneGone) as entered:
        herdr.press_enter("w1:p99")
    # each names the pane as a value, so a delivery failure names it once without reading the text
    assert typed.value.pane == entered.value.pane == "w1:p99"


# -- kill, existence, supervision ------------------------------------------------------------


def test_identity_is_the_panes_shell_process_and_a_mismatch_touches_nothing(herdr_env, herdr, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(herdr_env, herdr, out)
    identity = herdr.identity(pane)
    pid = int(herdr_env.tmux("display-message", "-p", "-t", herdr_env.tmux_pane(pane), "#{pane_pid}"))
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        started = handle.read().rsplit(")", 1)[1].split()[19]
    assert identity == f"{pid}:{started}"  # the recorder exec'd in the pane's shell keeps both

    herdr.expect(pane, f"{pid}:{int(started) + 1}")
    for call in (
        lambda: herdr.type_text(pane, "typed"),
        lambda: herdr.press_enter(pane),
        lambda: herdr.press_backspace(pane, 3),
        lambda: herdr.press_arrow(pane, "right", 1),
        lambda: herdr.kill(pane),
        lambda: herdr.capture(pane),
        lambda: herdr.inspect(pane),
    ):
        with pytest.raises(PaneStale, match=f"herdr pane {pane} is stale"):
            call()
    assert recorded(out) == b""
    herdr.expect(pane, identity)
    herdr.type_text(pane, "typed")
    wait_for(lambda: recorded(out) == b"typed", what="the checked text")
    assert herdr.inspect(pane)[0] is True
    assert herdr.kill(pane) is True and herdr.kill(pane) is False


def test_split_and_current_pane_report_the_identity(herdr_env, herdr):
    pane, identity = herdr.split_identified(herdr_env.tab, Program(["sleep", "60"]), target_pane=herdr_env.root_pane)
    wait_for(lambda: herdr.pane_current_command(pane) == "sleep", what="sleep to replace the shell")
    assert identity and herdr.identity(pane) == identity
    here = herdr.current_pane()
    assert here.identity == herdr.identity(herdr_env.root_pane) and here.pane_id == "w1:p1"


def test_kill_closes_the_pane_and_tolerates_a_gone_one(herdr_env, herdr):
    pane = herdr_env.new_pane(["sleep", "60"])
    backing = herdr_env.tmux_pane(pane)
    assert herdr.pane_exists(pane)
    assert herdr.kill(pane) is True
    assert not herdr.pane_exists(pane)
    assert backing not in herdr_env.tmux("list-panes", "-a", "-F", "#{pane_id}").split()
    assert herdr.kill(pane) is False


def test_a_pane_whose_program_exits_is_gone(herdr_env, herdr):
    pane = herdr_env.new_pane(["sleep", "0.3"])
    wait_for(lambda: not herdr.pane_exists(pane), what="the pane to close")
    with pytest.raises(PaneGone):
        herdr.pane_dead(pane)


def test_pane_current_command_and_dead(herdr_env, herdr):
    pane = herdr_env.new_pane(["cat"])
    wait_for(lambda: herdr.pane_current_command(pane) == "cat", what="cat to run")
    assert herdr.pane_dead(pane) is False


def test_a_stopped_server_has_no_panes(herdr_env, tmp_path):
    stopped = Herdr(str(tmp_path / "none.sock"), binary=herdr_env.binary)
    assert stopped.kill("w1:p1") is False
    assert stopped.pane_exists("w1:p1") is False
    with pytest.raises(PaneGone, match=r"herdr pane w1:p1 is gone \(herdr server is not running"):
        stopped.type_text("w1:p1", "x")


def test_other_herdr_errors_are_one_line_mux_errors(tmp_path):
    failing = tmp_path / "herdr"
    envelope_line = '{"id":"cli:pane:close","error":{"code":"internal_error","message":"boom"}}'
    failing.write_text(f"#!/bin/sh\necho '{envelope_line}' >&2\nexit 1\n")
    failing.chmod(0o755)
    herdr = Herdr(binary=str(failing))
    with pytest.raises(MuxError) as caught:
        herdr.kill("w1:p1")
    assert str(caught.value) == "herdr pane close failed: boom (internal_error)."
    with pytest.raises(MuxError) as caught:
        herdr.type_text("w1:p1", "x")
    assert type(caught.value) is MuxError
    assert str(caught.value) == "herdr pane send-text failed: boom (internal_error)."


# -- failures of herdr itself ----------------------------------------------------------------


def test_a_herdr_that_never_answers_times_out_as_mux_error(tmp_path):
    slow = tmp_path / "herdr"
    slow.write_text("#!/bin/sh\nexec sleep 30\n")
    slow.chmod(0o755)
    herdr = Herdr(timeout=0.3, binary=str(slow))
    started = time.monotonic()
    with pytest.raises(MuxError, match=r"herdr pane get did not answer within 0\.3 s"):
        herdr.pane_exists("w1:p1")
    assert time.monotonic() - started < 20  # gave up well before the program's 30 s


def test_binary_comes_from_cafleet_herdr_bin(herdr_env):
    environ = dict(herdr_env.environ, CAFLEET_HERDR_BIN="/nonexistent/herdr")
    with pytest.raises(MuxError, match="/nonexistent/herdr is not installed or not on PATH"):
        Herdr.from_env(environ).current_pane()
    environ["CAFLEET_HERDR_BIN"] = herdr_env.binary
    assert Herdr.from_env(environ).current_pane().pane_id == "w1:p1"


def test_unparseable_output_is_a_mux_error(tmp_path):
    odd = tmp_path / "herdr"
    odd.write_text("#!/bin/sh\necho not json\n")
    odd.chmod(0o755)
    with pytest.raises(MuxError, match="herdr pane current printed no JSON result"):
        Herdr(binary=str(odd), pane="w1:p1").current_pane()
