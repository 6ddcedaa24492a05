"""The tmux backend against a real private tmux server."""

from __future__ import annotations

import json
import os
import socket
import sys
import time

import pytest

from cafleet.errors import DamagedPlacement, MuxError, PaneGone, PaneStale
from cafleet.mux import tail_lines, text_chunks
from cafleet.mux.base import PaneContext, Program
from cafleet.mux.tmux import Tmux
from tests.support.mux_inputs import ARGV_DUMPER, HOSTILE_ARGS, HOSTILE_TEXT
from tests.support.recorder import READY
from tests.support.tmux_fixtures import RECORDER, split, wait_for


@pytest.fixture
def tmux(tmux_server) -> Tmux:
    return Tmux.from_env(tmux_server.environ_for(tmux_server.main_pane()))


def read_json_when_present(path) -> dict:
    wait_for(path.exists, what=f"{path.name} to be written")
    return json.loads(path.read_text())


def start_recorder(tmux_server, tmux: Tmux, path) -> str:
    pane = tmux_server.new_pane([sys.executable, str(RECORDER), str(path)])
    wait_for(lambda: READY in tmux.capture(pane, 5), what="the recorder to start")
    return pane


def recorded(path) -> bytes:
    return path.read_bytes() if path.exists() else b""


# -- current pane and sessions ---------------------------------------------------------------


def test_current_pane_names_session_window_and_socket(tmux_server, tmux):
    pane = tmux_server.main_pane()
    session_id, window_id = tmux_server.run("display-message", "-p", "-t", pane, "#{session_id} #{window_id}").split()
    assert tmux.current_pane() == PaneContext(
        backend="tmux",
        session=f"{session_id}@{tmux_server.socket}",
        window_id=window_id,
        pane_id=pane,
    )


def test_stored_session_reaches_the_same_server(tmux_server, tmux):
    context = tmux.current_pane()
    again = Tmux.from_session(context.session)
    assert again.socket == tmux_server.socket
    assert again.pane_exists(context.pane_id)
    assert not again.pane_exists("%999")


def test_a_tools_stderr_quoted_in_an_error_is_display_safe(tmux_server, tmux):
    """tmux echoes a bad target in its error; an escape sequence or a bidi override in it
    reaches the one-line error as escapes, never raw."""
    with pytest.raises(MuxError) as raised:
        tmux._run(["has-session", "-t", "nope\x1b]0;owned\x07\x1b[2J\u202egnpexe"])
    message = str(raised.value)
    assert "can't find" in message and "nope\\x1b]0;owned\\x07\\x1b[2J\\u202egnpexe" in message, message
    assert message.isprintable()


def test_current_pane_needs_tmux_pane():
    with pytest.raises(MuxError, match="TMUX_PANE is not set"):
        Tmux.from_env({"TMUX": "/tmp/x,1,0"}).current_pane()


def test_current_pane_unknown_to_the_server_is_gone(tmux_server):
    with pytest.raises(PaneGone):
        Tmux.from_env(tmux_server.environ_for("%999")).current_pane()


@pytest.mark.parametrize("session", ["", "$1", "@/tmp/sock", "$1@"])
def test_malformed_stored_session_is_refused(session):
    with pytest.raises(DamagedPlacement, match=r"is not \$N@<absolute socket path>: the placement is damaged"):
        Tmux.from_session(session)


# -- split ---------------------------------------------------------------------------------


def test_split_runs_argv_exactly_with_cwd_and_env(tmux_server, tmux, tmp_path):
    out = tmp_path / "argv.json"
    workdir = tmp_path / "dir with space #{pane_id};"
    workdir.mkdir()
    env = {"CFT_A": "value with spaces; $HOME `x`", "CFT_B": "#{session_name};"}
    context = tmux.current_pane()
    pane = split(
        tmux,
        context.window_id,
        [sys.executable, "-c", ARGV_DUMPER, str(out), *HOSTILE_ARGS],
        cwd=str(workdir),
        env=env,
    )
    assert pane.startswith("%") and len(pane) > 1 and pane != context.pane_id
    assert read_json_when_present(out) == {"argv": HOSTILE_ARGS, "cwd": str(workdir), "env": env}
    assert not (workdir / "pwned").exists()


def test_split_of_a_single_word_command_runs_it_without_shell_parsing(tmux_server, tmux, tmp_path):
    marker = tmp_path / "ran"
    script = tmp_path / "my prog; $HOME"
    script.write_text(f"#!/bin/sh\necho ok > '{marker}'\nsleep 60\n")
    script.chmod(0o755)
    split(tmux, tmux.current_pane().window_id, [str(script)])
    # the shell creates the file before it writes to it: wait for the whole line
    wait_for(lambda: marker.exists() and marker.read_text() == "ok\n", what="the single-word command to run")


def test_split_keeps_focus_on_the_calling_pane(tmux_server, tmux):
    context = tmux.current_pane()
    before = tmux_server.run("display-message", "-p", "-t", "main", "#{window_id} #{pane_id}")
    new = split(tmux, context.window_id, ["sleep", "60"], target_pane=context.pane_id)
    after = tmux_server.run("display-message", "-p", "-t", "main", "#{window_id} #{pane_id}")
    assert after == before == f"{context.window_id} {context.pane_id}\n"
    panes = tmux_server.run("list-panes", "-t", context.window_id, "-F", "#{pane_id}").split()
    assert panes == [context.pane_id, new]


def test_split_refuses_a_missing_directory_and_an_empty_command(tmux, tmp_path):
    window = tmux.current_pane().window_id
    with pytest.raises(MuxError, match="does not exist"):
        split(tmux, window, ["true"], cwd=str(tmp_path / "missing"))
    with pytest.raises(MuxError, match="without a command"):
        split(tmux, window, [])


def test_split_into_a_missing_window_fails_in_one_line(tmux):
    with pytest.raises(MuxError) as caught:
        split(tmux, "@999", ["true"])
    assert str(caught.value).startswith("tmux split-window failed: ")
    assert "\n" not in str(caught.value)


# -- capture -------------------------------------------------------------------------------


def test_capture_returns_what_the_program_printed(tmux_server, tmux):
    script = (
        "import time\n"
        "for i in range(1, 81): print(f'row {i}')\n"
        "print('ünïcødé 中文  ')\n"
        "print('\\x1b[31mred\\x1b[0m')\n"
        "time.sleep(60)\n"
    )
    pane = tmux_server.new_pane([sys.executable, "-c", script])
    expected = "row 78\nrow 79\nrow 80\nünïcødé 中文  \nred"
    wait_for(lambda: tmux.capture(pane, 5) == expected, what="the printed rows")
    assert tmux.capture(pane, 1) == "red"
    assert tmux.capture(pane, 100).split("\n") == [f"row {i}" for i in range(1, 81)] + [
        "ünïcødé 中文  ",
        "red",
    ]
    assert tmux.capture(pane, 1, ansi=True) == "\x1b[31mred"


def test_capture_of_a_gone_pane_is_pane_gone(tmux):
    with pytest.raises(PaneGone, match="%999"):
        tmux.capture("%999")


def test_tail_lines_drops_trailing_blank_lines_only():
    assert tail_lines("a\n\nb  \n   \n\n", 2) == "\nb  "
    assert tail_lines("\n\n", 3) == ""


# -- typing --------------------------------------------------------------------------------


def test_type_text_types_hostile_strings_literally(tmux_server, tmux, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(tmux_server, tmux, out)
    expected = b""
    for text in HOSTILE_TEXT:
        tmux.type_text(pane, text)
        expected += text.encode()
        wait_for(lambda want=expected: recorded(out) == want, what=f"{text!r} to arrive")
    tmux.press_enter(pane)
    wait_for(lambda: recorded(out) == expected + b"\r", what="Enter to arrive")
    assert not (tmp_path / "x").exists()


def test_press_arrow_sends_the_arrow_keys_and_with_an_identity_only_to_its_pane(tmux_server, tmux, tmp_path):
    """How a dialog's selection is moved (``member answer`` on buttons): each arrow key as
    the terminal sends it, as often as asked; with an expected identity through the check."""
    out = tmp_path / "typed.bin"
    pane = start_recorder(tmux_server, tmux, out)
    tmux.press_arrow(pane, "right", 2)
    tmux.expect(pane, tmux.identity(pane))
    tmux.press_arrow(pane, "left", 1)
    wait_for(lambda: recorded(out) == b"\x1b[C\x1b[C\x1b[D", what="the arrows to arrive")
    with pytest.raises(ValueError):
        tmux.press_arrow(pane, "Escape", 1)  # only the four arrows
    assert recorded(out) == b"\x1b[C\x1b[C\x1b[D"


def test_type_text_sends_long_text_in_chunks_exactly(tmux_server, tmux, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(tmux_server, tmux, out)
    text = "".join(f"{i:05d};中🙂-" for i in range(3000))  # ~48 kB of UTF-8
    assert len(text_chunks(text)) > 4
    tmux.type_text(pane, text)
    wait_for(lambda: len(recorded(out)) >= len(text.encode()), timeout=20, what="all text")
    assert recorded(out) == text.encode()


def test_identity_checked_typing_types_hostile_strings_literally(tmux_server, tmux, tmp_path):
    """With an expected identity, input goes through ``if-shell``'s command string: every
    hostile text (quotes, ``;``, formats, variables, long text in chunks) still arrives
    exactly, and nothing runs."""
    out = tmp_path / "typed.bin"
    pane = start_recorder(tmux_server, tmux, out)
    tmux.expect(pane, tmux.identity(pane))
    expected = b""
    for text in [*HOSTILE_TEXT, *HOSTILE_ARGS, "it's", "'", "'\\''", "a\tb\x1b[31m", "x" * 5000 + "'" * 3000]:
        tmux.type_text(pane, text)
        expected += text.encode()
        wait_for(lambda want=expected: recorded(out) == want, timeout=20, what=f"{text[:20]!r} to arrive")
    tmux.press_enter(pane)
    wait_for(lambda: recorded(out) == expected + b"\r", what="Enter to arrive")
    assert not (tmp_path / "x").exists() and not (tmp_path / "pwned").exists()


def test_a_pane_with_another_identity_gets_no_input_and_is_not_killed(tmux_server, tmux, tmp_path):
    out = tmp_path / "typed.bin"
    pane = start_recorder(tmux_server, tmux, out)
    identity = tmux.identity(pane)
    server, start, pane_pid = identity.split(":")
    assert (int(server), int(pane_pid)) == (
        tmux_server.pid,
        int(tmux_server.run("display-message", "-p", "-t", pane, "#{pane_pid}")),
    )
    for other, why in (
        (f"{int(server) + 1}:{start}:{pane_pid}", "its tmux server was restarted"),
        (f"{server}:{start}:{int(pane_pid) + 1}", "the program cafleet started there was replaced"),
    ):
        tmux.expect(pane, other)
        for call in (
            lambda: tmux.type_text(pane, "typed"),
            lambda: tmux.press_enter(pane),
            lambda: tmux.press_backspace(pane, 3),
            lambda: tmux.press_arrow(pane, "right", 1),
            lambda: tmux.kill(pane),
            lambda: tmux.capture(pane),
            lambda: tmux.inspect(pane),
            lambda: tmux.pane_dead(pane),
        ):
            with pytest.raises(PaneStale, match=f"tmux pane {pane} is stale: {why}"):
                call()
        assert not tmux.pane_exists(pane)  # not *our* pane
    assert recorded(out) == b""
    assert pane in tmux_server.run("list-panes", "-a", "-F", "#{pane_id}").split()
    tmux.expect(pane, identity)
    assert tmux.pane_exists(pane) and tmux.kill(pane) is True
    assert tmux.kill(pane) is False  # gone is not stale


def test_split_and_current_pane_report_the_identity(tmux_server, tmux):
    pane, identity = tmux.split_identified(tmux.current_pane().window_id, Program(["sleep", "60"]))
    assert (
        identity
        == tmux.identity(pane)
        == tmux_server.run("display-message", "-p", "-t", pane, "#{pid}:#{start_time}:#{pane_pid}").strip()
    )
    here = tmux.current_pane()
    assert here.identity == tmux.identity(here.pane_id)


def test_text_chunks_respect_the_byte_limit_and_characters():
    text = "a" * 5 + "中" * 10 + "🙂" * 3
    chunks = text_chunks(text, limit=7)
    assert "".join(chunks) == text
    assert all(len(chunk.encode()) <= 7 for chunk in chunks)
    assert chunks[:3] == ["aaaaa", "中中", "中中"]
    assert text_chunks("") == []
    assert text_chunks("x\ud800y") == ["x?y"]


def test_typing_into_a_gone_pane_is_pane_gone(tmux):
    with pytest.raises(PaneGone) as typed:
        tmux.type_text("%999", "hello")
    with pytest.raises(PaneGone) as entered:
        tmux.press_enter("%999")
    with pytest.raises(PaneGone) as captured:
        tmux.capture("%999")
    # each names the pane as a value, so a delivery failure names it once without reading the text
    assert typed.value.pane == entered.value.pane == captured.value.pane == "%999"


# -- kill, existence, supervision ------------------------------------------------------------


def test_kill_closes_the_pane_and_tolerates_a_gone_one(tmux_server, tmux):
    pane = tmux_server.new_pane(["sleep", "60"])
    assert tmux.pane_exists(pane)
    assert tmux.kill(pane) is True
    assert not tmux.pane_exists(pane)
    assert pane not in tmux_server.run("list-panes", "-a", "-F", "#{pane_id}").split()
    assert tmux.kill(pane) is False


def test_kill_after_the_server_is_gone_is_not_an_error(tmux_server, tmux):
    pane = tmux_server.main_pane()
    tmux_server.kill()
    assert not os.path.exists(tmux_server.socket)
    assert tmux.kill(pane) is False
    assert not tmux.pane_exists(pane)
    with pytest.raises(PaneGone, match="is gone"):
        tmux.type_text(pane, "x")


def test_pane_dead_and_current_command(tmux_server, tmux):
    pane = tmux_server.new_pane(["cat"])
    tmux_server.run("set-option", "-w", "-t", pane, "remain-on-exit", "on")
    wait_for(lambda: tmux.pane_current_command(pane) == "cat", what="cat to run")
    assert tmux.pane_dead(pane) is False
    tmux_server.run("send-keys", "-t", pane, "C-d")
    wait_for(lambda: tmux.pane_dead(pane), what="cat to exit")
    assert tmux.pane_exists(pane)
    with pytest.raises(PaneGone):
        tmux.pane_dead("%999")
    with pytest.raises(PaneGone):
        tmux.pane_current_command("%999")


# -- failures of tmux itself -----------------------------------------------------------------


def test_a_server_that_never_answers_times_out_as_mux_error(tmp_path):
    path = f"/tmp/cft-hang-{os.getpid()}-{time.monotonic_ns()}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    try:
        tmux = Tmux(path, timeout=0.3)
        started = time.monotonic()
        with pytest.raises(MuxError, match=r"did not answer within 0\.3 s"):
            tmux.capture("%0")
        with pytest.raises(MuxError, match="did not answer"):
            tmux.kill("%0")
        assert time.monotonic() - started < 20  # gave up, did not wait for an answer
    finally:
        listener.close()
        os.unlink(path)


def test_a_missing_tmux_binary_is_a_mux_error():
    with pytest.raises(MuxError, match="not installed or not on PATH"):
        Tmux("/tmp/none.sock", binary="/nonexistent/tmux").pane_exists("%1")


# -- many panes in one call (supervision, the WebUI's screens) --------------------------------


def counting(tmux: Tmux) -> list:
    """The client calls ``tmux`` makes from now on (their argv's first words)."""
    calls: list = []
    real = tmux._call

    def call(args):
        calls.append(args[0])
        return real(args)

    tmux._call = call  # type: ignore[method-assign]
    return calls


def test_inspect_many_answers_what_inspect_answers_for_each_pane_in_few_calls(tmux_server, tmux):
    marker_lie = "cafleet-panes-0123456789abcdef\t%0\t0\t1:2:3\tsleep"  # a marker line, but not the call's
    panes = [
        tmux_server.new_pane(
            ["sh", "-c", 'printf "%s\\n%s\\n" "$1" "$2"; exec sleep 600', "sh", f"row of pane {i}", marker_lie]
        )
        for i in range(100)
    ]
    dead = tmux_server.new_pane(["cat"])
    tmux_server.run("set-option", "-w", "-t", dead, "remain-on-exit", "on")
    tmux_server.run("send-keys", "-t", dead, "C-d")
    wait_for(lambda: tmux.inspect(dead)[1], what="the dead pane's program to exit")
    for i, pane in enumerate(panes):
        wait_for(lambda pane=pane, i=i: f"row of pane {i}" in tmux.capture(pane, 5), what=f"pane {pane}'s row")
    stale = panes[7]
    tmux.expect(stale, "1:2:3")  # recorded with another identity: a pane cafleet did not create
    for pane in panes[:5]:
        tmux.expect(pane, tmux.identity(pane))  # recorded with its own identity
    wanted = [*panes[:10], "%9999", *panes[10:], dead]

    calls = counting(tmux)
    found = tmux.inspect_many(wanted, 30)
    assert len(calls) == 3  # one stopped at the gone pane; the 91 after it did not fit in one call
    assert list(found) == wanted
    for pane in wanted:
        if pane == stale:
            assert isinstance(found[pane], PaneStale) and "is stale" in str(found[pane])
            with pytest.raises(PaneStale):
                tmux.inspect(pane, 30)
        else:
            assert found[pane] == tmux.inspect(pane, 30), pane
    assert found["%9999"] == (False, False, "", "")
    assert found[dead][:2] == (True, True)
    assert found[panes[3]][0:3] == (True, False, "sleep")
    rows = found[panes[3]][3].splitlines()  # the lie is on screen, as text (a terminal draws no tab)
    assert rows[0] == "row of pane 3" and rows[1].split() == marker_lie.split("\t")

    coloured = tmux.inspect_many([panes[0]], 5, ansi=True)[panes[0]]
    assert coloured[3] == tmux.capture(panes[0], 5, ansi=True)


def test_inspect_many_of_a_gone_server_or_one_that_never_answers_costs_one_call(tmux_server, tmux, tmp_path):
    pane = tmux_server.new_pane(["sleep", "600"])
    tmux_server.kill()
    calls = counting(tmux)
    assert tmux.inspect_many([pane, "%1", "%2"]) == {p: (False, False, "", "") for p in (pane, "%1", "%2")}
    assert len(calls) == 1

    path = f"/tmp/cft-hang-{os.getpid()}-{time.monotonic_ns()}.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(8)
    try:
        hung = Tmux(path, timeout=0.3)
        calls = counting(hung)
        found = hung.inspect_many(["%0", "%1"])
        assert len(calls) == 1
        assert all(
            isinstance(error, MuxError) and "did not answer within 0.3 s" in str(error) for error in found.values()
        )
    finally:
        listener.close()
        os.unlink(path)
