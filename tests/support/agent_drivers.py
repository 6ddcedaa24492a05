"""The real claude, codex and opencode behind one small interface, for the keeper's
tests on the real agents (tests/test_keeper_real.py) and its latency benchmark
(bench/keeper_real.py).

:func:`keeper_fleet` starts one agent's fleet with the fleet keeper on (``fleet create``
starts it): claude and opencode through :func:`tests.support.real_agents.real_fleet` (the
scripted Anthropic Messages API), codex through :func:`tests.support.real_codex.codex_fleet`
(the scripted Responses API; its approval flag ``on-request`` unless told otherwise, so
only an escalated command asks first). :class:`Driven` gives the same verbs whichever the
agent: create a member, send, read the screen and the input box, type as a person would,
count how often the member's model received a preview (its ``[cafleet msg N from`` marker
in the user side of the requests), script shell calls and read what they gave the model. Every keeper of the fleet's database is ended by its pid on exit
(tests/support/keeper.py).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from cafleet.delivery.keystrokes import screen
from tests.support import model_api as m, openai_responses as responses, real_codex
from tests.support.keeper import end_every_keeper, running_keeper
from tests.support.real_agents import allow_every_command, composer_text, real_fleet, received_count, skip_reason
from tests.support.tmux_fixtures import wait_for

AGENTS = ("claude", "codex", "opencode")
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

    def start_wait(self, timeout: int = 600) -> subprocess.Popen:
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

    def idle_empty(self, shown: str) -> bool:
        return self.classify(shown) == screen.PaneState.IDLE and not self.box(shown)

    def wait_idle_empty(self, pane: str, timeout: float = TURN_TIMEOUT) -> str:
        return self.wait_screen(pane, self.idle_empty, timeout, f"{self.agent} idle with an empty input box")

    # -- agent-specific: members, the model's side
    def create(self, name: str, ready: bool = True) -> tuple[int, str]:
        raise NotImplementedError

    def asker(self) -> tuple[int, str]:
        """A member whose next shell command waits for its user's permission."""
        raise NotImplementedError

    def script_permission(self, path: str) -> None:
        """The model's next turn calls the shell to ``touch path`` (a permission dialog)."""
        raise NotImplementedError

    def ask_permission(self, path: str) -> tuple[int, str]:
        """A new asker, prompted until its permission dialog for ``touch path`` is drawn."""
        member_id, pane = self.asker()
        self.script_permission(path)
        self.type_keys(pane, "make a file")
        self.wait_screen(pane, lambda s: "make a file" in self.box(s), 20, "the typed prompt")
        self.press(pane, "Enter")
        self.wait_screen(
            pane, lambda s: self.classify(s) == screen.PaneState.AWAITING_USER, TURN_TIMEOUT, "the permission dialog"
        )
        return member_id, pane

    def allow_every_command(self) -> None:
        """Members started from now on run every shell command without asking."""
        raise NotImplementedError

    def script_question(self) -> None:
        """The model's next turn asks its user "Which colour should the button be?" (Red,
        Blue) with the agent's own question tool, then answers "Noted." once answered."""
        raise NotImplementedError

    def question_mode(self, pane: str) -> None:
        """Whatever the agent needs before its question tool reaches the screen."""

    def question_answer(self) -> str:
        """What the question tool gave the model (its last request's view), "" before."""
        outputs = self.tool_outputs()
        return outputs[-1] if outputs else ""

    def script_commands(self, commands: list[str], then: str) -> None:
        """The model's next turns call the shell tool with each of ``commands`` in turn,
        then answer ``then``."""
        raise NotImplementedError

    def tool_outputs(self) -> list[str]:
        """What each shell call gave the model, oldest first (its last request's view)."""
        raise NotImplementedError

    def received(self, message_id: int) -> int:
        """How many times the model received the preview of ``message_id``."""
        raise NotImplementedError

    def started(self) -> bool:
        """The model has had a turn (in a fresh fleet: the first member's spawn prompt)."""
        return bool(self.api.turns())

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

    def shell(self, command: str, description: str = "Run a command") -> m.Reply:
        tool = "Bash" if self.agent == "claude" else "bash"
        return m.Reply(tool_calls=[m.ToolCall(tool, {"command": command, "description": description})])

    def script_permission(self, path: str) -> None:
        self.api.script.push(self.shell(f"touch {path}", "Create a file"), m.Reply(text="Made the file."))

    def allow_every_command(self) -> None:
        allow_every_command(self.fleet.env, self.agent)

    def script_question(self) -> None:
        tool = "AskUserQuestion" if self.agent == "claude" else "question"
        options = [{"label": "Red", "description": "A red button"}, {"label": "Blue", "description": "A blue button"}]
        asked = {"question": "Which colour should the button be?", "header": "Colour", "options": options}
        if self.agent == "claude":
            asked["multiSelect"] = False
        self.api.script.push(m.Reply(tool_calls=[m.ToolCall(tool, {"questions": [asked]})]), m.Reply(text="Noted."))

    def script_commands(self, commands: list[str], then: str) -> None:
        self.api.script.clear()
        self.api.script.push(*(self.shell(command) for command in commands), m.Reply(text=then))

    def tool_outputs(self) -> list[str]:
        from tests.support.model_api_anthropic import tool_results

        turns = self.api.turns()
        return tool_results(turns[-1].body) if turns else []

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
    """codex on the scripted Responses API (with the approval flag ``on-request`` an
    escalated command asks first, nothing else does; with the member argv's own ``never``
    nothing asks)."""

    agent = "codex"

    def __init__(self, codex, approval: str | None = "on-request") -> None:
        super().__init__(codex.fleet)
        self.codex = codex
        self.approval = approval
        self.api = codex.api
        self.workdir = codex.workdir
        self.touch: str | None = None
        self.steps: list[responses.Reply] = []  # script_commands' turns, taken in order
        self.api.script = self.reply

    def reply(self, request: dict) -> responses.Reply:
        if self.steps:
            return self.steps.pop(0)
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

    def script_question(self) -> None:
        options = [{"label": "Red", "description": "A red button"}, {"label": "Blue", "description": "A blue button"}]
        asked = {"id": "colour", "header": "Colour", "question": "Which colour should the button be?"}
        call = responses.tool_call("request_user_input", {"questions": [{**asked, "options": options}]})
        self.steps = [responses.Reply([call]), responses.Reply([responses.text("Noted.")])]

    def question_mode(self, pane: str) -> None:
        """codex 0.171 answers request_user_input itself outside Plan mode; shift+tab cycles
        the mode to Plan."""
        self.press(pane, "BTab")
        self.wait_screen(pane, lambda s: "Plan mode" in s, 20, "codex's Plan mode")

    def allow_every_command(self) -> None:
        """Nothing to write: the member argv's ``--ask-for-approval never`` runs every
        command unasked (in its ``workspace-write`` sandbox); a fleet started with another
        approval flag would ask."""
        assert self.approval is None, f"codex members here run with --ask-for-approval {self.approval}"

    def script_commands(self, commands: list[str], then: str) -> None:
        # login=False: a login shell would reset PATH from /etc/profile
        calls = [responses.tool_call("exec_command", {"cmd": command, "login": False}) for command in commands]
        self.steps = [responses.Reply([call]) for call in calls] + [responses.Reply([responses.text(then)])]

    def tool_outputs(self) -> list[str]:
        turns = self.api.turns()
        return responses.tool_outputs(turns[-1]) if turns else []

    def settle(self, pane: str) -> None:
        wait_for(lambda: not self.steps, TURN_TIMEOUT, 0.05, "codex to take every scripted turn")
        self.wait_idle_empty(pane)

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


def missing(agent: str) -> str | None:
    """Why ``agent`` cannot run here (its pinned program is not installed), or None."""
    if agent == "codex":
        return None if real_codex.installed() else real_codex.SKIP_REASON
    return skip_reason(agent)


@contextmanager
def keeper_fleet(
    agent: str,
    root: Path,
    env: dict,
    monkeypatch,
    extra: Mapping[str, str] | None = None,
    *,
    codex_approval: str | None = "on-request",
) -> Iterator[Driven]:
    """``agent``'s fleet under ``root`` with the keeper on; ``env`` (an isolated
    environment, tests/support/environ.py) and ``monkeypatch`` are used for codex, whose
    fleet is built like the other stand-in fleets. ``extra`` is added to the environment
    of the command line, the keeper and the panes (settings such as the notices'
    thresholds). ``codex_approval`` replaces the codex member argv's ``--ask-for-approval
    never`` (None keeps it). Every keeper is ended by pid on exit."""
    settings = {"CAFLEET_KEEPER": "on", **(extra or {})}
    if agent == "codex":
        env.update(settings)
        for name, value in settings.items():
            monkeypatch.setenv(name, value)
        with real_codex.codex_fleet(env, root, monkeypatch, approval=codex_approval) as codex:
            driven: Driven = Codex(codex, codex_approval)
            try:
                yield driven
            finally:
                driven.end_keepers()
        return
    with real_fleet(agent, root / f"real-{agent}", settings) as fleet:
        driven = Anthropic(fleet, agent)
        try:
            yield driven
        finally:
            driven.end_keepers()
