"""cafleet delivery on the real codex TUI (the pinned npm release), offline.

Each test starts a private tmux server whose first pane is the Director (a byte recorder),
and spawns codex members through the real ``cafleet member create --coding-agent codex``.
codex runs in a throw-away ``CODEX_HOME`` whose ``config.toml`` sends every model request
to a scripted Responses API on 127.0.0.1 (tests/support/openai_responses.py) and trusts the
member's folder, so no login, trust or onboarding screen is drawn. The binary is the one in
``$CAFLEET_AGENT_PREFIX/node_modules/.bin`` (scripts/test.sh installs it), reached through
a private bin folder that is first on the member's PATH: a ``codex`` elsewhere on the
machine is never started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from cafleet.delivery.keystrokes import screen
from tests.support import real_codex
from tests.support.openai_responses import (
    PREVIEW,
    Reply,
    last_input,
    text,
    tool_call,
    user_texts,
)
from tests.support.real_codex import CODEX, TURN_TIMEOUT
from tests.support.tmux_fixtures import wait_for

VERSION = "codex-cli 0.171.0"

pytestmark = [
    pytest.mark.real_agent,
    pytest.mark.skipif(not real_codex.installed(), reason=real_codex.SKIP_REASON),
]


@pytest.fixture
def codex_fleet(env, tmp_path, monkeypatch, request):
    marker = request.node.get_closest_marker("codex_approval")
    with real_codex.codex_fleet(env, tmp_path, monkeypatch, marker.args[0] if marker else None) as fleet:
        yield fleet


def test_pinned_version():
    done = subprocess.run([str(CODEX), "--version"], capture_output=True, timeout=60)
    assert done.stdout.decode().strip() == VERSION


def test_idle_screen_and_input_box(codex_fleet):
    member = codex_fleet.create()
    shown = codex_fleet.screen(member)
    assert screen.classify("codex", shown) == screen.PaneState.IDLE
    box = screen.input_box("codex", shown)
    assert box is not None and len(box) == 1, box
    assert box[0].lstrip().startswith("›"), box
    # the spawn prompt reached the model once, as codex's first user message
    assert codex_fleet.api.received()[-1].startswith("Wait for messages from your Director.")


def test_preview_submitted_and_confirmed_once(codex_fleet):
    member = codex_fleet.create()
    sent = codex_fleet.send(member, "please run the tests")
    assert sent.code == 0, sent
    rows = codex_fleet.fleet.query("SELECT message_id, notified_at FROM messages WHERE to_member_id = ?", member)
    assert len(rows) == 1 and rows[0][1] is not None, rows
    message_id = rows[0][0]
    wait_for(
        lambda: codex_fleet.received_previews().get(message_id),
        timeout=TURN_TIMEOUT,
        what="the preview to reach the model",
    )
    codex_fleet.wait_state(member, screen.PaneState.IDLE)
    assert codex_fleet.received_previews() == {message_id: 1}
    received = [m for m in codex_fleet.api.received() if PREVIEW.search(m)]
    assert received[0].endswith("please run the tests"), received


def test_sequential_and_concurrent_sends_each_arrive_once(codex_fleet):
    member = codex_fleet.create()
    for i in range(2):
        assert codex_fleet.send(member, f"sequential {i}").code == 0
    env = codex_fleet.fleet.environ
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cafleet",
                "message",
                "send",
                "--from-member-id",
                str(codex_fleet.fleet.director),
                "--to-member-id",
                str(member),
                f"concurrent {i}",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(3)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (out, err)
    rows = codex_fleet.fleet.query("SELECT message_id, notified_at FROM messages WHERE to_member_id = ?", member)
    assert len(rows) == 5
    stamped = {mid for mid, notified in rows if notified is not None}
    wait_for(
        lambda: stamped <= set(codex_fleet.received_previews()),
        timeout=TURN_TIMEOUT,
        what="every stamped preview to reach the model",
    )
    codex_fleet.wait_state(member, screen.PaneState.IDLE)
    counts = codex_fleet.received_previews()
    assert all(counts[mid] == 1 for mid in stamped), counts
    # nothing glued: no user message carries two previews
    for message in codex_fleet.api.received():
        assert len(PREVIEW.findall(message)) <= 1, message
    # what was not stamped is still owed and is delivered by the next send
    owed = {mid for mid, notified in rows if notified is None}
    if owed:
        assert codex_fleet.send(member, "one more").code == 0
        wait_for(
            lambda: owed <= set(codex_fleet.received_previews()),
            timeout=TURN_TIMEOUT,
            what="owed previews to be delivered by the next send",
        )


def test_working_screen_and_a_send_while_working_is_queued_once(codex_fleet):
    member = codex_fleet.create()
    release = threading.Event()
    script_calls = []

    def script(request):
        script_calls.append(request)
        return Reply([text("finished the long task")], hold=release if len(script_calls) == 1 else None)

    codex_fleet.api.script = script
    try:
        first = codex_fleet.send(member, "a long task")
        assert first.code == 0, first
        shown = codex_fleet.wait_state(member, screen.PaneState.WORKING, timeout=TURN_TIMEOUT)
        assert screen.input_box("codex", shown) is not None
        second = codex_fleet.send(member, "a message while you work")
        assert second.code == 0, second
        assert "not notified" not in second.err, second
    finally:
        release.set()
    rows = codex_fleet.fleet.query(
        "SELECT message_id, notified_at FROM messages WHERE to_member_id = ? ORDER BY message_id", member
    )
    assert all(notified is not None for _, notified in rows), rows
    wait_for(
        lambda: len(codex_fleet.received_previews()) == 2, timeout=TURN_TIMEOUT, what="both previews to reach the model"
    )
    codex_fleet.wait_state(member, screen.PaneState.IDLE)
    assert codex_fleet.received_previews() == {rows[0][0]: 1, rows[1][0]: 1}


def test_member_acks_through_a_real_tool_call(codex_fleet):
    member = codex_fleet.create()
    codex_fleet.api.script = ack_script
    sent = codex_fleet.send(member, "ack this one")
    assert sent.code == 0, sent
    message_id = codex_fleet.fleet.query("SELECT MAX(message_id) FROM messages")[0][0]

    def acked():
        return (
            codex_fleet.fleet.query("SELECT status_state FROM messages WHERE message_id = ?", message_id)[0][0]
            == "completed"
        )

    try:
        wait_for(acked, timeout=TURN_TIMEOUT, what="the codex member to ACK through its own cafleet call")
    finally:
        print("last model inputs:", [last_input(r) for r in codex_fleet.api.turns()][-2:])

    def tool_output():
        for request in codex_fleet.api.turns():
            if last_input(request).get("type") == "function_call_output":
                return last_input(request)["output"]
        return None

    output = wait_for(tool_output, timeout=TURN_TIMEOUT, what="codex to return the tool's output to the model")
    assert "exited with code 0" in output, output


@pytest.mark.codex_approval("on-request")
def test_approval_dialog_is_awaiting_user_and_never_typed_into(codex_fleet):
    member = codex_fleet.create()
    marker = codex_fleet.workdir / "escalated"

    def script(request):
        last = last_input(request)
        if last.get("type") == "function_call_output":
            return Reply([text("done")])
        return Reply(
            [
                tool_call(
                    "exec_command",
                    {
                        "cmd": f"touch {marker}",
                        "sandbox_permissions": "require_escalated",
                        "justification": "Create a marker file outside the sandbox?",
                    },
                )
            ]
        )

    codex_fleet.api.script = script
    first = codex_fleet.send(member, "please escalate")
    assert first.code == 0, first
    shown = codex_fleet.wait_state(member, screen.PaneState.AWAITING_USER, timeout=TURN_TIMEOUT)
    second = codex_fleet.send(member, "1")  # a digit would pick an option if it were typed
    assert second.code == 0, second
    assert "not notified" in second.err, second
    after = codex_fleet.screen(member)
    assert screen.classify("codex", after) == screen.PaneState.AWAITING_USER, after
    assert not marker.exists()
    assert "[cafleet msg" not in "\n".join(after.splitlines()[-12:]) or shown


def ack_script(request):
    """Answer a preview by ACKing it with a real ``cafleet message ack`` tool call."""
    if last_input(request).get("type") == "function_call_output":
        return Reply([text("acknowledged")])
    for _, message in reversed(user_texts(request)):
        found = PREVIEW.search(message)
        if found:
            # login=False: a login shell would reset PATH from /etc/profile
            return Reply([tool_call("exec_command", {"cmd": f"cafleet message ack {found.group(1)}", "login": False})])
        break
    return Reply([text("ok")])


def test_half_typed_text_is_never_submitted(codex_fleet):
    member = codex_fleet.create()
    pane = codex_fleet.fleet.query("SELECT mux_pane_id FROM member_placements WHERE member_id = ?", member)[0][
        0
    ].split()[0]
    codex_fleet.fleet.server.run("send-keys", "-t", pane, "-l", "half typed by a person")
    wait_for(lambda: "half typed by a person" in codex_fleet.screen(member), what="the half-typed text")
    sent = codex_fleet.send(member, "do not glue me")
    assert sent.code == 0, sent
    assert "not notified" in sent.err, sent
    shown = codex_fleet.screen(member)
    box = screen.input_box("codex", shown)
    assert box is not None and "half typed by a person" in "".join(box), shown
    assert "[cafleet msg" not in "".join(box), shown
    assert not any("half typed" in m for m in codex_fleet.api.received())
    rows = codex_fleet.fleet.query("SELECT notified_at FROM messages WHERE to_member_id = ?", member)
    assert rows == [(None,)]


def test_send_right_after_member_create_is_delivered_once_and_never_glued(codex_fleet):
    member = codex_fleet.create(wait=False)
    first = codex_fleet.send(member, "straight after create")
    assert first.code == 0, first
    codex_fleet.wait_idle(member)
    second = codex_fleet.send(member, "the next one")
    assert second.code == 0, second
    rows = codex_fleet.fleet.query(
        "SELECT message_id, notified_at FROM messages WHERE to_member_id = ? ORDER BY message_id", member
    )
    assert all(notified is not None for _, notified in rows), rows
    ids = {mid for mid, _ in rows}
    wait_for(
        lambda: ids <= set(codex_fleet.received_previews()),
        timeout=TURN_TIMEOUT,
        what="both previews to reach the model",
    )
    codex_fleet.wait_state(member, screen.PaneState.IDLE)
    assert codex_fleet.received_previews() == dict.fromkeys(ids, 1)
    for message in codex_fleet.api.received():
        assert len(PREVIEW.findall(message)) <= 1, message


def test_body_ending_in_a_file_mention_is_submitted_whole(codex_fleet):
    member = codex_fleet.create()
    (codex_fleet.workdir / "README.md").write_text("hello\n", encoding="utf-8")
    sent = codex_fleet.send(member, "please read @README.md")
    assert sent.code == 0, sent
    message_id = codex_fleet.fleet.query("SELECT MAX(message_id) FROM messages")[0][0]
    wait_for(
        lambda: codex_fleet.received_previews().get(message_id),
        timeout=TURN_TIMEOUT,
        what="the preview to reach the model",
    )
    [received] = [m for m in codex_fleet.api.received() if PREVIEW.search(m)]
    assert "please read @README.md" in received, received


def test_two_fleets_on_two_databases_each_member_reaches_its_own(env, tmp_path, monkeypatch, codex_fleet):
    """Two codex members sharing one CODEX_HOME, each ACKing in its own fleet's database."""
    codex_fleet.api.script = ack_script
    first = codex_fleet.create("first")
    other_db = tmp_path / "other" / "cafleet.db"
    other_env = dict(codex_fleet.fleet.environ, CAFLEET_DATABASE_URL=str(other_db))
    server = codex_fleet.fleet.server
    director2 = server.new_pane([sys.executable, "-c", "import time; time.sleep(3600)"])
    other_env.update(server.environ_for(director2))
    created = subprocess.run(
        [sys.executable, "-m", "cafleet", "fleet", "create", "--name", "second", "--coding-agent", "codex", "--json"],
        env=other_env,
        capture_output=True,
        timeout=60,
    )
    assert created.returncode == 0, created.stderr
    import json

    fleet2 = json.loads(created.stdout)
    made = subprocess.run(
        [
            sys.executable,
            "-m",
            "cafleet",
            "member",
            "create",
            "--fleet-id",
            str(fleet2["fleet_id"]),
            "--name",
            "second",
            "--description",
            "second on codex",
            "--coding-agent",
            "codex",
            "--json",
            "Wait for messages.",
        ],
        env=other_env,
        capture_output=True,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr
    second = json.loads(made.stdout)["member_id"]

    def second_screen():
        shown = subprocess.run(
            [sys.executable, "-m", "cafleet", "member", "capture", str(second), "--lines", "60"],
            env=other_env,
            capture_output=True,
            timeout=60,
        )
        return shown.stdout.decode()

    # the second member has no keeper either (the suite turns keepers off): a preview sent
    # while codex is still starting would stay owed, so it is sent once codex is idle
    wait_for(
        lambda: screen.classify("codex", second_screen()) == screen.PaneState.IDLE,
        timeout=real_codex.START_TIMEOUT,
        interval=0.1,
        what="the second codex member to be idle",
    )
    sent1 = codex_fleet.send(first, "ack me in the first database")
    assert sent1.code == 0, sent1
    sent2 = subprocess.run(
        [
            sys.executable,
            "-m",
            "cafleet",
            "message",
            "send",
            "--from-member-id",
            str(fleet2["director_member_id"]),
            "--to-member-id",
            str(second),
            "ack me in the second database",
        ],
        env=other_env,
        capture_output=True,
        timeout=120,
    )
    assert sent2.returncode == 0, sent2.stderr
    import sqlite3

    def states(db):
        conn = sqlite3.connect(db)
        try:
            return [row[0] for row in conn.execute("SELECT status_state FROM messages ORDER BY message_id")]
        finally:
            conn.close()

    wait_for(
        lambda: states(codex_fleet.fleet.db) == ["completed"] and states(other_db) == ["completed"],
        timeout=TURN_TIMEOUT * 2,
        what="each member to ACK in its own database",
    )


# --- usage (docs/usage.md): usage numbers chosen per member are summed exactly per member ---

USAGE_IDENTITY = re.compile(r"- your member id: (\d+)\n")
USAGE_TIMEOUT = 90.0


def usage_script(request: dict) -> Reply:
    """Input 1000×member id + 1 and output 10×member id: whose call it was shows in its numbers."""
    for _, said in user_texts(request):
        found = USAGE_IDENTITY.search(said)
        if found:
            member = int(found.group(1))
            return Reply([text("Ready.")], input_tokens=1000 * member + 1, output_tokens=10 * member)
    return Reply([text("ok")], input_tokens=7, output_tokens=1)


def usage_of(fleet, member_id: int, calls: int) -> dict:
    deadline = time.monotonic() + USAGE_TIMEOUT
    while True:
        done = fleet.fleet.cafleet("member", "usage", str(member_id), "--json")
        assert done.code == 0, done
        report = done.json()
        if report["calls"] >= calls or time.monotonic() > deadline:
            return report
        time.sleep(0.2)


def test_codex_usage_is_summed_exactly_per_member_in_one_cwd(codex_fleet):
    codex_fleet.api.script = usage_script
    first = codex_fleet.create("first")
    second = codex_fleet.create("second")
    a = usage_of(codex_fleet, first, 1)
    b = usage_of(codex_fleet, second, 1)
    assert (a["calls"], a["tokens"]["input"], a["tokens"]["output"]) == (1, 1000 * first + 1, 10 * first), a
    assert (b["calls"], b["tokens"]["input"], b["tokens"]["output"]) == (1, 1000 * second + 1, 10 * second), b
    assert len(a["files"]) == 1 and a["files"] != b["files"]
    [(model, row)] = a["models"].items()
    assert row["usd_source"] == "price table v1" and model.startswith("gpt-5"), a  # codex records no dollars
    whole = codex_fleet.fleet.cafleet("fleet", "usage", str(codex_fleet.fleet.fleet_id), "--json").json()
    assert (whole["calls"], whole["tokens"]["input"]) == (2, 1000 * (first + second) + 2)


def test_a_rule_doctor_reports_really_stops_the_member(codex_fleet):
    """A codex rules file that forbids `cafleet message ack` beside cafleet's own allow rule:
    `cafleet doctor` reports it before the spawn, and the real codex refuses the ACK
    (docs/agents.md, "Permission rules that silence members"); a prompt rule on a command
    members do not run is not reported."""
    rules = Path(os.environ["CODEX_HOME"]) / "rules" / "team.rules"
    rules.write_text(
        'prefix_rule(pattern = ["cafleet", "message", "ack"], decision = "forbidden")\n'
        'prefix_rule(pattern = ["cafleet", "member", "delete"], decision = "prompt")\n',
        encoding="utf-8",
    )
    doctor = codex_fleet.fleet.cafleet("doctor", "--json")
    found = doctor.json()["member_permissions"]["findings"]
    assert [(f["coding_agent"], f["path"], f["commands"]) for f in found] == [("codex", str(rules), ["ack"])]
    assert doctor.code == 1
    member = codex_fleet.create()
    codex_fleet.api.script = ack_script
    sent = codex_fleet.send(member, "ack this one")
    assert sent.code == 0, sent
    message_id = codex_fleet.fleet.query("SELECT MAX(message_id) FROM messages")[0][0]

    def tool_output():
        for request in codex_fleet.api.turns():
            if last_input(request).get("type") == "function_call_output":
                return last_input(request)["output"]
        return None

    output = wait_for(tool_output, timeout=TURN_TIMEOUT, what="codex to return the tool's outcome to the model")
    assert "policy forbids commands starting with `cafleet message ack`" in output, output
    state = codex_fleet.fleet.query("SELECT status_state FROM messages WHERE message_id = ?", message_id)[0][0]
    assert state != "completed", output


def test_a_member_in_its_worktree_is_not_blocked_by_the_trust_dialog(codex_fleet, tmp_path):
    """The user trusts the repository (``[projects."<repo>"] trust_level = "trusted"``),
    never the member's worktree outside it: codex still starts straight into its composer
    there and answers its spawn prompt (docs/agents.md, docs/worktrees.md)."""
    fleet = codex_fleet.fleet
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test\n\temail = test@example.invalid\n")
    fleet.environ.update(GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")
    for args in (["init", "--quiet", "-b", "main"], ["commit", "--quiet", "--allow-empty", "-m", "first"]):
        subprocess.run(["git", *args], cwd=codex_fleet.workdir, env=fleet.environ, check=True, timeout=60)
    result = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "tree",
        "--description",
        "codex in its worktree",
        "--coding-agent",
        "codex",
        "--worktree",
        "--json",
        "Wait for messages from your Director.",
    )
    assert result.code == 0, result
    record = result.json()
    assert not record["worktree"]["path"].startswith(str(codex_fleet.workdir) + os.sep)
    shown = codex_fleet.wait_idle(record["member_id"])
    assert "trust" not in shown.lower(), shown
    pid = int(fleet.server.run("display-message", "-p", "-t", record["pane_id"], "#{pane_pid}").strip())
    assert os.readlink(f"/proc/{pid}/cwd") == record["worktree"]["path"]
