"""The fleet keeper on the real claude, codex and opencode (marker ``real_agent``).

docs/delivery.md, "The fleet keeper": a preview that cannot be typed when it is sent is
delivered by the keeper as soon as the pane can take it, with no command running. Here
the panes are the pinned programs (tests/support/real_agents.py, tests/support/real_codex.py)
answering from a scripted model API on 127.0.0.1, the keeper on (``CAFLEET_KEEPER=on``:
``fleet create`` starts it); what is asserted is what the member's model received (the
preview's ``[cafleet msg N from`` marker in the user side of its requests) and what the
database says. Every keeper a test started is ended by its pid at teardown
(tests/support/keeper.py), which fails the test if one it did not know of was left.

Each test has a fleet of its own (one agent, one private tmux server, one model API).
Every wait is bounded (it bounds a failure; none is a timed assertion). Without the pinned
programs each test is skipped with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cafleet.delivery import screen
from tests.support import model_api as m
from tests.support import openai_responses as responses
from tests.support import real_codex
from tests.support.keeper import (
    end_every_keeper,
    keeper,
    keeper_on,
    keeper_processes,
    kill,
    log_lines,
    running_keeper,
)
from tests.support.pane_fleet import preview_line, start
from tests.support.real_agents import composer_text, real_fleet, received_count, skip_reason
from tests.support.remote_fleet import create_remote, fleet_with_hosts, short_directory
from tests.support.tmux_fixtures import wait_for

real_agent = pytest.mark.real_agent

AGENTS = ("claude", "codex", "opencode")
DELIVERY_BOUND = 20.0  # the bound for a send right after `member create`; bounds a failure only
TURN_TIMEOUT = 90.0  # bounds a failure only; a turn normally takes a second or two
PERSON_TEXT = "a person is typing this"


def marker(message_id: int) -> str:
    return f"[cafleet msg {message_id} from "


class Driven:
    """One agent's fleet with the keeper on, the same few verbs whichever the agent."""

    agent = ""

    def __init__(self, fleet) -> None:
        self.fleet = fleet  # RealFleet (claude, opencode) or PaneFleet (codex)
        self.server = fleet.server
        self.workdir = getattr(fleet, "workdir", None)

    # -- the command line
    def send(self, member_id: int, body: str) -> dict:
        result = self.fleet.cafleet(
            "message",
            "send",
            "--from-member-id",
            str(self.fleet.director),
            "--to-member-id",
            str(member_id),
            "--file",
            "-",
            "--json",
            input=body.encode("utf-8"),
        )
        assert result.code == 0, result
        record = result.json()
        record["err"] = result.err
        return record

    def running_keeper(self) -> dict:
        return running_keeper(self.fleet)

    def end_keepers(self) -> None:
        end_every_keeper(self.fleet)

    def notified_at(self, message_id: int) -> str | None:
        return self.fleet.query("SELECT notified_at FROM messages WHERE message_id = ?", message_id)[0][0]

    def start_wait(self, timeout: int = 60) -> subprocess.Popen:
        """The Director blocked in ``message wait`` (its output is read only on failure)."""
        return subprocess.Popen(
            [sys.executable, "-m", "cafleet", "message", "wait", str(self.fleet.director), "--timeout", str(timeout)],
            env=dict(self.fleet.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    # -- the screen
    def capture(self, pane: str) -> str:
        return self.server.run("capture-pane", "-p", "-t", pane)

    def wait_screen(self, pane: str, check, timeout: float, what: str) -> str:
        return wait_for(lambda: (lambda s: s if check(s) else None)(self.capture(pane)), timeout, 0.05, what)

    def classify(self, shown: str) -> str:
        return screen.classify(self.agent, shown)

    def box(self, shown: str) -> str:
        """The text in the input box, the agent's placeholder left out."""
        return screen.box_text(self.agent, shown) or ""

    def type_keys(self, pane: str, text: str) -> None:
        self.server.run("send-keys", "-t", pane, "-l", text)

    def press(self, pane: str, *keys: str) -> None:
        self.server.run("send-keys", "-t", pane, *keys)

    def wait_idle_empty(self, pane: str, timeout: float = TURN_TIMEOUT) -> str:
        return self.wait_screen(
            pane,
            lambda s: self.classify(s) == screen.PaneState.IDLE and not self.box(s),
            timeout,
            f"{self.agent} idle with an empty input box",
        )

    # -- agent-specific: members, the model's side
    def create(self, name: str, ready: bool = True) -> tuple[int, str]:
        raise NotImplementedError

    def asker(self) -> tuple[int, str]:
        """A member whose next shell command waits for its user's permission."""
        raise NotImplementedError

    def script_permission(self, path: str) -> None:
        """The model's next turn calls the shell to ``touch path`` (a permission dialog)."""
        raise NotImplementedError

    def received(self, message_id: int) -> int:
        """How many times the model received the preview of ``message_id``."""
        raise NotImplementedError

    def received_text(self, text: str) -> int:
        raise NotImplementedError

    def glued(self) -> list[str]:
        """User messages the model received holding two previews, or a preview and the person's text."""
        raise NotImplementedError

    def settle(self, pane: str) -> None:
        """Every scripted turn answered and the agent idle with an empty box."""
        self.wait_idle_empty(pane)


class Anthropic(Driven):
    """claude or opencode on the scripted Anthropic Messages API."""

    def __init__(self, fleet, agent: str) -> None:
        super().__init__(fleet)
        self.agent = agent
        self.api = fleet.api

    def box(self, shown: str) -> str:
        return composer_text(self.agent, shown)

    def create(self, name: str, ready: bool = True) -> tuple[int, str]:
        record = self.fleet.create_member(self.agent, name, ready=ready)
        return record["member_id"], record["pane_id"]

    def asker(self) -> tuple[int, str]:
        if self.agent == "claude":  # by absolute path, without cafleet's dontAsk flags
            record = self.fleet.start_plain("claude", "asker")
            self.wait_idle_empty(record["pane_id"])
            return record["member_id"], record["pane_id"]
        return self.create("asker")  # opencode's config asks before a shell command

    def script_permission(self, path: str) -> None:
        tool = "Bash" if self.agent == "claude" else "bash"
        self.api.script.push(
            m.Reply(tool_calls=[m.ToolCall(tool, {"command": f"touch {path}", "description": "Create a file"})]),
            m.Reply(text="Made the file."),
        )

    def received(self, message_id: int) -> int:
        return received_count(self.api, marker(message_id))

    def received_text(self, text: str) -> int:
        return received_count(self.api, text)

    def glued(self) -> list[str]:
        from tests.support.model_api_anthropic import user_texts

        found = []
        for turn in self.api.turns():
            for text in user_texts(turn.body):
                if text.count("[cafleet msg ") > 1 or ("[cafleet msg " in text and PERSON_TEXT in text):
                    found.append(text)
        return found

    def settle(self, pane: str) -> None:
        self.wait_screen(
            pane,
            lambda s: self.api.script.pending() == 0 and self.classify(s) == screen.PaneState.IDLE and not self.box(s),
            TURN_TIMEOUT,
            f"{self.agent} to finish its turns",
        )


class Codex(Driven):
    """codex on the scripted Responses API (its approval flag ``on-request``: an escalated
    command asks first; nothing else does)."""

    agent = "codex"

    def __init__(self, codex) -> None:
        super().__init__(codex.fleet)
        self.codex = codex
        self.api = codex.api
        self.workdir = codex.workdir
        self.touch: str | None = None
        self.api.script = self.reply

    def reply(self, request: dict) -> responses.Reply:
        last = responses.last_input(request)
        if last.get("type") == "function_call_output":
            return responses.Reply([responses.text("Made the file.")])
        if self.touch is not None:
            path, self.touch = self.touch, None
            arguments = {
                "cmd": f"touch {path}",
                "sandbox_permissions": "require_escalated",
                "justification": "Create a file outside the sandbox?",
            }
            return responses.Reply([responses.tool_call("exec_command", arguments)])
        return responses.Reply([responses.text("Done.")])

    def create(self, name: str, ready: bool = True) -> tuple[int, str]:
        member_id = self.codex.create(name, wait=ready)
        placement = self.fleet.query("SELECT mux_pane_id FROM member_placements WHERE member_id = ?", member_id)
        return member_id, placement[0][0].split()[0]

    def asker(self) -> tuple[int, str]:
        return self.create("asker")

    def script_permission(self, path: str) -> None:
        self.touch = path

    def received(self, message_id: int) -> int:
        return self.codex.received_previews().get(message_id, 0)

    def received_text(self, text: str) -> int:
        return sum(text in message for message in self.api.received())

    def glued(self) -> list[str]:
        return [
            message
            for message in self.api.received()
            if len(responses.PREVIEW.findall(message)) > 1
            or (responses.PREVIEW.search(message) and PERSON_TEXT in message)
        ]


@pytest.fixture(params=AGENTS)
def driven(request, tmp_path):
    """One agent's fleet with the keeper on (``fleet create`` starts it); every keeper of
    its database ended by pid at teardown."""
    agent = request.param
    if agent == "codex":
        if not real_codex.installed():
            pytest.skip(real_codex.SKIP_REASON)
        env, monkeypatch = request.getfixturevalue("env"), request.getfixturevalue("monkeypatch")
        env["CAFLEET_KEEPER"] = "on"
        monkeypatch.setenv("CAFLEET_KEEPER", "on")
        with real_codex.codex_fleet(env, tmp_path, monkeypatch, approval="on-request") as codex:
            driven: Driven = Codex(codex)
            try:
                yield driven
            finally:
                driven.end_keepers()
        return
    reason = skip_reason(agent)  # before the `env` fixture: it hides CAFLEET_AGENT_PREFIX
    if reason:
        pytest.skip(reason)
    with real_fleet(agent, tmp_path / f"real-{agent}", {"CAFLEET_KEEPER": "on"}) as fleet:
        driven = Anthropic(fleet, agent)
        try:
            yield driven
        finally:
            driven.end_keepers()


def delivered_once(driven: Driven, member_id: int, message_id: int, pane: str, log: str) -> None:
    """Stamped notified (the keeper confirmed the submission), the model holding the
    preview once when the agent is done, and the keeper's log saying it delivered it once."""
    wait_for(
        lambda: driven.notified_at(message_id),
        timeout=30,
        interval=0.1,
        what=f"message {message_id} to be stamped notified (keeper log: {log_lines(log)})",
    )
    driven.settle(pane)
    assert driven.received(message_id) == 1, log_lines(log)
    delivered = f"delivered the preview of message {message_id} to member {member_id}"
    assert sum(line.endswith(delivered) for line in log_lines(log)) <= 1, log_lines(log)
    assert driven.glued() == []


def held_by_the_keeper(driven: Driven, member_id: int, message_id: int, log: str) -> None:
    """The keeper has tried the owed preview and is retrying it."""
    wait_for(
        lambda: any(f"member {member_id} still owed message {message_id}: " in line for line in log_lines(log)),
        timeout=30,
        interval=0.1,
        what=f"the keeper to find the preview of message {message_id} held",
    )


# --- (a) a send right after `member create`, the Director blocked in `message wait` ----------


@real_agent
def test_a_send_right_after_member_create_reaches_the_model_once_while_the_director_waits(driven):
    """The README walkthrough: `member create`, a send at once (the agent is still
    starting: its input box may not show yet), then `message wait`. No other command runs;
    the preview reaches the member's model once, within the bound."""
    log = driven.running_keeper()["log"]
    member_id, pane = driven.create("early", ready=False)
    sent = driven.send(member_id, "Sent while you start.")
    message_id = sent["message_id"]
    waiting = driven.start_wait()
    try:
        wait_for(
            lambda: driven.received(message_id),
            timeout=DELIVERY_BOUND,
            interval=0.1,
            what=f"the model to receive message {message_id} (the send said: {sent['err'].strip()!r})",
        )
        delivered_once(driven, member_id, message_id, pane, log)
        assert waiting.poll() is None, waiting.communicate()  # still blocked: nothing else delivered it
    finally:
        if waiting.poll() is None:
            waiting.kill()
        waiting.communicate()


# --- (b) a permission prompt answered by a person --------------------------------------------


@real_agent
def test_b_a_preview_held_by_a_permission_prompt_follows_the_persons_answer(driven):
    log = driven.running_keeper()["log"]
    member_id, pane = driven.asker()
    made = driven.workdir / "made-by-the-agent"
    driven.script_permission(str(made))
    driven.type_keys(pane, "make a file")
    driven.wait_screen(pane, lambda s: "make a file" in driven.box(s), 20, "the typed prompt")
    driven.press(pane, "Enter")
    driven.wait_screen(
        pane, lambda s: driven.classify(s) == screen.PaneState.AWAITING_USER, TURN_TIMEOUT, "the permission dialog"
    )
    sent = driven.send(member_id, "Are you there?")
    message_id = sent["message_id"]
    assert sent["notified"] is False and "awaiting its user" in sent["err"], sent
    held_by_the_keeper(driven, member_id, message_id, log)
    shown = driven.capture(pane)
    assert driven.classify(shown) == screen.PaneState.AWAITING_USER, shown  # not a key reached the dialog
    assert not made.exists() and driven.received(message_id) == 0

    driven.press(pane, "Enter")  # the person allows the command; no command runs after this
    wait_for(
        lambda: driven.received(message_id),
        timeout=30,
        interval=0.1,
        what=f"the model to receive message {message_id} after the answer",
    )
    assert made.exists()  # the answer was the person's: the command ran
    delivered_once(driven, member_id, message_id, pane, log)


# --- (c) a person's half-typed text is never submitted --------------------------------------


@real_agent
@pytest.mark.parametrize("then", ["clears", "submits"])
def test_c_half_typed_text_is_never_submitted_and_the_preview_follows(driven, then):
    log = driven.running_keeper()["log"]
    member_id, pane = driven.create("typing")
    driven.type_keys(pane, PERSON_TEXT)
    driven.wait_screen(pane, lambda s: driven.box(s) == PERSON_TEXT, 20, "the half-typed text")
    sent = driven.send(member_id, "Do not glue me to their text.")
    message_id = sent["message_id"]
    assert sent["notified"] is False and "held: input box has text" in sent["err"], sent
    held_by_the_keeper(driven, member_id, message_id, log)
    shown = driven.capture(pane)
    assert driven.box(shown) == PERSON_TEXT, shown  # left exactly as the person left it
    assert driven.received(message_id) == 0 and driven.received_text(PERSON_TEXT) == 0

    if then == "clears":  # no command runs after this
        driven.press(pane, *["BSpace"] * (len(PERSON_TEXT) + 4))
    else:
        driven.press(pane, "Enter")
    wait_for(
        lambda: driven.received(message_id),
        timeout=30,
        interval=0.1,
        what=f"the model to receive message {message_id} after the person {then}",
    )
    delivered_once(driven, member_id, message_id, pane, log)
    assert driven.received_text(PERSON_TEXT) == (1 if then == "submits" else 0)


# --- on the stand-in, both stores, a member on another host ------------------------------------
# tests/test_keeper.py covers a killed keeper and two keepers at once for a local member; here
# the member is on a host reached over a real sshd, which cannot be reached while its
# previews are owed: each send is refused there, and only a keeper delivers afterwards.

KEEPER_RETRIES = "The fleet keeper retries it as soon as the pane can take it. Do not resend."


@pytest.fixture
def remote(env, tmp_path, monkeypatch):
    """(fleet, host, member id): the keeper on, one stand-in member on a host reached over
    a real sshd, ready, and the host then stopped (sshd gone, the shared connection closed)."""
    keeper_on(env, monkeypatch)
    with short_directory() as short_dir:
        with fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (fleet, [host]):
            try:
                created = create_remote(fleet, host, "far", "--json")
                assert created.code == 0, created
                member = created.json()["member_id"]
                fleet.wait_ready(member)
                host.stop()
                yield fleet, host, member
            finally:
                end_every_keeper(fleet)


def owed_send(fleet, member: int, body: str) -> dict:
    sent = fleet.send(fleet.director, member, body, "--json")
    assert (sent.code, sent.json()["notified"]) == (0, False), sent
    assert "cannot be reached over SSH" in sent.err and sent.err.endswith(KEEPER_RETRIES + "\n"), sent
    return sent.json()


def delivered_in_order(fleet, member: int, records: list[dict]) -> None:
    """Each preview submitted once, oldest first, and stamped."""
    previews = [preview_line(record) for record in records]
    wait_for(
        lambda: len(fleet.submits(member)) >= len(previews),
        timeout=30,
        interval=0.05,
        what=f"{len(previews)} previews submitted to member {member}",
    )
    ids = [record["message_id"] for record in records]
    wait_for(lambda: all(fleet.notified_at(i) for i in ids), what=f"messages {ids} stamped")
    assert fleet.submits(member) == previews  # nothing lost, nothing doubled


@pytest.mark.slow
@pytest.mark.stores("sqlite", "postgres")
def test_killed_keeper_is_replaced_by_the_next_send_to_a_member_on_another_host(remote):
    fleet, host, member = remote
    first_keeper = running_keeper(fleet)
    first = owed_send(fleet, member, "first task")
    log = first_keeper["log"]
    wait_for(
        lambda: any(
            f"member {member} still owed message {first['message_id']}: host " in line for line in log_lines(log)
        ),
        what="the keeper to find the host unreachable",
    )
    kill(first_keeper["pid"])  # SIGKILL: no last word, its record stays behind
    assert keeper(fleet)["running"] is False
    second = owed_send(fleet, member, "second task")  # the next command that leaves a preview owed
    replacement = running_keeper(fleet, other_than=first_keeper["pid"])
    assert keeper_processes(fleet.db) == [replacement["pid"]]
    host.start()  # no command runs after this
    delivered_in_order(fleet, member, [first, second])


@pytest.mark.slow
@pytest.mark.stores("sqlite", "postgres")
def test_two_commands_at_once_that_find_no_keeper_leave_one_for_a_member_on_another_host(remote):
    """No keeper runs; two sends to the unreachable host at once each leave a preview owed
    and each may start a keeper: exactly one is left, and it delivers both once."""
    fleet, host, member = remote
    kill(running_keeper(fleet)["pid"])  # the one `fleet create` started
    argv = ["message", "send", "--from-member-id", str(fleet.director), "--to-member-id", str(member), "--json"]
    both = [start([*argv, f"task {n}"], fleet.environ) for n in range(2)]
    records = []
    for process in both:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0 and err.decode().endswith(KEEPER_RETRIES + "\n"), err
        records.append(json.loads(out))
    records.sort(key=lambda record: record["message_id"])
    assert [record["notified"] for record in records] == [False, False]

    def one_left():
        record = keeper(fleet)
        found = keeper_processes(fleet.db)
        return found if record["running"] and found == [record["pid"]] else None

    [survivor] = wait_for(one_left, timeout=30, interval=0.1, what="exactly one keeper to be left")
    host.start()  # no command runs after this
    delivered_in_order(fleet, member, records)
    assert keeper_processes(fleet.db) == [survivor]
