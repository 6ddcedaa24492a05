"""Delivery on the real claude and opencode (marker ``real_agent``).

Each agent runs once per module: the pinned program from ``$CAFLEET_AGENT_PREFIX`` in a
private tmux server with a throw-away HOME, started by the real ``cafleet member create``
(its real argv) and answering turns from the scripted model API on 127.0.0.1
(tests/support/real_agents.py, tests/support/model_api.py). What the tests assert is what
the agent's model received (the user side of the turns sent to the API), what the
database says (``notified_at``, ``acked_at``) and what the screen cues read on the real
screens. Without the pinned programs every test here is skipped with the reason.

Run only this tier: ``pytest -m real_agent``.
"""

from __future__ import annotations

import re
import threading

import pytest

from cafleet.delivery.keystrokes import screen
from tests.support import model_api as m
from tests.support.real_agents import (
    AGENTS,
    composer_empty,
    composer_text,
    preview_count,
    real_fleet,
    received_count,
    skip_reason,
)

pytestmark = pytest.mark.real_agent

TURN_TIMEOUT = 90.0  # bounds a failure only; a turn normally takes a second or two


@pytest.fixture(scope="module", params=AGENTS)
def agent(request) -> str:
    reason = skip_reason(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


@pytest.fixture(scope="module")
def fleet(agent, tmp_path_factory):
    with real_fleet(agent, tmp_path_factory.mktemp(f"real-{agent}")) as real:
        real.agent = agent
        yield real


@pytest.fixture(scope="module")
def member(fleet):
    """One member started by ``member create``, answered its spawn prompt, composer empty."""
    return fleet.create_member(fleet.agent, "worker")


@pytest.fixture
def idle(fleet, member):
    """The member idle with an empty composer before and after the test, the script empty."""
    fleet.api.script.clear()
    fleet.wait_composer(member["pane_id"], fleet.agent, TURN_TIMEOUT)
    yield member
    fleet.api.script.clear()


def marker(message_id: int) -> str:
    return f"[cafleet msg {message_id} from "


def sent_id(result) -> int:
    assert result.code == 0, result
    found = re.search(r"sent message (\d+) ", result.out)
    assert found, result
    return int(found.group(1))


def wait_received(fleet, message_id: int, timeout: float = TURN_TIMEOUT) -> None:
    got = fleet.api.wait(lambda _: received_count(fleet.api, marker(message_id)), timeout)
    assert got, f"the model never received message {message_id}; turns: {len(fleet.api.turns())}"


def deliver_owed(fleet, member, ids: list[int], rounds: int = 5) -> None:
    """Retry the previews still owed (not stamped) the way cafleet does, with a
    ``message wait`` in the fleet, each time the member is idle, until all are stamped.
    A preview that failed safely (nothing submitted) is owed, never lost."""
    for _ in range(rounds):
        if all(fleet.notified_at(i) is not None for i in ids):
            return
        fleet.wait_composer(member["pane_id"], fleet.agent, TURN_TIMEOUT)
        fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "0.1")
    owed = [i for i in ids if fleet.notified_at(i) is None]
    assert not owed, f"messages {owed} are still owed after {rounds} retries"


def settle_idle(fleet, member) -> None:
    """Wait until every scripted reply was used and the agent is idle with an empty box."""
    fleet.wait_screen(
        member["pane_id"],
        lambda s: fleet.api.script.pending() == 0 and composer_empty(fleet.agent, s),
        TURN_TIMEOUT,
        "the agent to finish its turns",
    )


# --- screen classification on the real screens ---------------------------------------------


def test_real_idle_composer_is_the_only_input_box(fleet, idle):
    shown = fleet.capture(idle["pane_id"])
    assert screen.classify(fleet.agent, shown) == screen.PaneState.IDLE, shown
    box = screen.input_box(fleet.agent, shown)
    assert box, shown
    assert composer_text(fleet.agent, shown) == "", box
    # the transcript above (the spawn prompt, cafleet's identity lines) is not in the box
    assert not any("cafleet" in row for row in box), box


def test_real_typed_text_shows_in_the_input_box_only(fleet, idle):
    pane = idle["pane_id"]
    fleet.type_keys(pane, "words typed by a person")
    try:
        shown = fleet.wait_screen(pane, lambda s: "words typed by a person" in s, 20, "the typed words")
        box = screen.input_box(fleet.agent, shown)
        assert any("words typed by a person" in row for row in box), box
        assert screen.classify(fleet.agent, shown) == screen.PaneState.IDLE, shown
    finally:
        fleet.press(pane, *["BSpace"] * len("words typed by a person"))
    fleet.wait_composer(pane, fleet.agent, 20)


def test_real_working_while_a_reply_streams(fleet, idle):
    pane = idle["pane_id"]
    hold = threading.Event()
    fleet.api.script.push(m.Reply(text="Still thinking about it.", hold=hold))
    try:
        message_id = sent_id(fleet.send(idle["member_id"], "Please check the build."))
        assert fleet.notified_at(message_id) is not None
        shown = fleet.wait_state(pane, fleet.agent, screen.PaneState.WORKING, TURN_TIMEOUT)
        # the box is still the composer, empty, not the transcript's echo of our preview
        box = screen.input_box(fleet.agent, shown)
        assert box and not any(marker(message_id) in row for row in box), box
        # text typed into the box while the agent works leaves the state "working"
        fleet.type_keys(pane, "typed while it works")
        shown = fleet.wait_screen(pane, lambda s: "typed while it works" in s, 20, "the typed words")
        assert screen.classify(fleet.agent, shown) == screen.PaneState.WORKING, shown
        fleet.press(pane, *["BSpace"] * len("typed while it works"))
        fleet.wait_screen(pane, lambda s: "typed while it works" not in s, 20, "the words erased")
    finally:
        hold.set()
    settle_idle(fleet, idle)
    assert preview_count(fleet.api, marker(message_id)) == 1


# --- a preview submitted and confirmed exactly once ------------------------------------------


def test_real_preview_reaches_the_model_exactly_once(fleet, idle):
    message_id = sent_id(fleet.send(idle["member_id"], "Run the tests, then report."))
    assert fleet.notified_at(message_id) is not None
    wait_received(fleet, message_id)
    settle_idle(fleet, idle)
    assert preview_count(fleet.api, marker(message_id)) == 1
    assert "Run the tests, then report." in " ".join(
        t
        for t in __import__("tests.support.model_api_anthropic", fromlist=["x"]).user_texts(fleet.api.turns()[-1].body)
        if marker(message_id) in t
    )


def test_real_sequential_previews_each_reach_the_model_once(fleet, idle):
    ids = [sent_id(fleet.send(idle["member_id"], f"Sequential task {n}.")) for n in range(3)]
    assert all(fleet.notified_at(i) is not None for i in ids)
    for message_id in ids:
        wait_received(fleet, message_id)
    settle_idle(fleet, idle)
    assert [preview_count(fleet.api, marker(i)) for i in ids] == [1, 1, 1]


def test_real_concurrent_previews_each_reach_the_model_once(fleet, idle):
    senders = [
        fleet.start_cli(
            "message",
            "send",
            "--from-member-id",
            str(fleet.director),
            "--to-member-id",
            str(idle["member_id"]),
            f"Concurrent task {n}.",
        )
        for n in range(4)
    ]
    ids = []
    for proc in senders:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (out, err)
        ids.append(int(re.search(rb"sent message (\d+) ", out).group(1)))
    stamped = [i for i in ids if fleet.notified_at(i) is not None]
    for message_id in stamped:
        wait_received(fleet, message_id)
    deliver_owed(fleet, idle, ids)
    for message_id in ids:
        wait_received(fleet, message_id)
    settle_idle(fleet, idle)
    assert sorted(preview_count(fleet.api, marker(i)) for i in ids) == [1, 1, 1, 1]


@pytest.fixture
def keeper_env(fleet):
    """The Director's environment with the fleet keeper on; every keeper of the fleet's
    database is ended by its pid at teardown (tests/support/keeper.py), failing the test if
    one it did not know of was left running."""
    from tests.support.keeper import assert_none_left

    environ = dict(fleet.environ, CAFLEET_KEEPER="on")

    def recorded() -> list[int]:
        shown = fleet.cafleet("fleet", "show", str(fleet.fleet_id), "--json")
        known = shown.json()["keeper"] if shown.code == 0 else {}
        return [known["pid"]] if known.get("running") and known.get("pid") else []

    try:
        yield environ
    finally:
        assert_none_left(fleet.db, recorded)


def test_real_previews_sent_while_the_agent_works_each_reach_the_model_once_in_order(fleet, idle, keeper_env):
    """The agent is working (its reply held open) and six previews are sent, the keeper on.
    claude queues the first and then draws ``❯ Press up to edit queued messages`` in its
    empty composer: a hint, not someone's text, so each later preview is queued behind it
    (stamped by its own send, while the turn still runs) instead of being held as "someone
    is typing". When the turn ends, each reaches the model exactly once, in order."""
    pane = idle["pane_id"]
    hold = threading.Event()
    fleet.api.script.push(m.Reply(text="Working on the first task.", hold=hold))
    ids: list[int] = []
    try:
        first = sent_id(fleet.send(idle["member_id"], "First task, keeps you busy."))
        assert fleet.notified_at(first) is not None
        fleet.wait_state(pane, fleet.agent, screen.PaneState.WORKING, TURN_TIMEOUT)
        for n in range(6):
            result = fleet.cafleet(
                "message",
                "send",
                "--from-member-id",
                str(fleet.director),
                "--to-member-id",
                str(idle["member_id"]),
                f"Queued task {n}.",
                environ=keeper_env,
            )
            ids.append(sent_id(result))
            # typed and confirmed while the turn is still held open: queued, not held
            assert fleet.notified_at(ids[-1]) is not None, (result, fleet.capture(pane))
        assert not hold.is_set() and fleet.api.script.pending() == 0
    finally:
        hold.set()
    for message_id in ids:
        wait_received(fleet, message_id)
    settle_idle(fleet, idle)
    assert [received_count(fleet.api, marker(i)) for i in ids] == [1] * 6
    assert preview_count(fleet.api, marker(first)) == 1
    from tests.support.model_api_anthropic import user_texts

    said = " ".join(user_texts(fleet.api.turns()[-1].body))
    at = [said.index(marker(i)) for i in ids]
    assert at == sorted(at), said[-3000:]


def test_real_long_body_types_a_bounded_preview_and_is_read_whole(fleet, idle):
    """A 6,000-character body with ``CAFLEET_MAX_TEXT_LEN`` at its maximum: the preview typed
    carries ``PREVIEW_MAX_LEN`` code points of it and reaches the model once (on opencode a
    6,000-character line was never seen in the box in time, so it was never confirmed and
    held the box); the member reads the whole body with ``message show``."""
    from cafleet.delivery.keystrokes.preview import PREVIEW_MAX_LEN

    body = "".join(f"item{n:04d} " for n in range(700))[:6000]
    wide = dict(fleet.environ, CAFLEET_MAX_TEXT_LEN="1000000")
    result = fleet.cafleet(
        "message",
        "send",
        "--from-member-id",
        str(fleet.director),
        "--to-member-id",
        str(idle["member_id"]),
        "--file",
        "-",
        input=body.encode(),
        environ=wide,
    )
    message_id = sent_id(result)
    # on a loaded machine opencode may draw the line after the send's echo wait: the
    # preview is then owed, and the next attempt submits the line already in the box
    deliver_owed(fleet, idle, [message_id])
    wait_received(fleet, message_id)
    settle_idle(fleet, idle)
    assert preview_count(fleet.api, marker(message_id)) == 1
    assert not screen.box_text(fleet.agent, fleet.capture(idle["pane_id"]))  # nothing left in the box
    from tests.support.model_api_anthropic import user_texts

    [said] = [t for t in user_texts(fleet.api.turns()[-1].body) if marker(message_id) in t]
    assert body[:PREVIEW_MAX_LEN] + "\u2026" in said and body[: PREVIEW_MAX_LEN + 1] not in said
    shown = fleet.cafleet("message", "show", str(message_id), "--json", environ=wide)
    assert shown.json()["text"] == body


# --- what must never be typed into ----------------------------------------------------------


@pytest.fixture(scope="module")
def asker(fleet, member):
    """A second pane of the same program whose shell commands need approval: claude
    started by absolute path without cafleet's ``dontAsk`` flags; for opencode the
    member itself (its config asks before any shell command the cafleet preset does not
    allow)."""
    if fleet.agent == "claude":
        plain = fleet.start_plain("claude", "asker")
        fleet.wait_composer(plain["pane_id"], "claude", TURN_TIMEOUT)
        return plain
    return member


def test_real_permission_dialog_is_awaiting_user_and_never_typed_into(fleet, asker):
    pane = asker["pane_id"]
    fleet.api.script.clear()
    fleet.wait_composer(pane, fleet.agent, TURN_TIMEOUT)
    fleet.api.script.push(
        m.Reply(
            tool_calls=[
                m.ToolCall(
                    "Bash" if fleet.agent == "claude" else "bash",
                    {"command": "touch never-run", "description": "Create a file"},
                )
            ]
        )
    )
    fleet.type_keys(pane, "make a file")
    fleet.wait_screen(
        pane,
        lambda s: (
            "make a file" in (screen.input_box(fleet.agent, s) or [""])[-1]
            or "make a file" in " ".join(screen.input_box(fleet.agent, s) or [])
        ),
        20,
        "the typed prompt",
    )
    fleet.press(pane, "Enter")
    dialog = fleet.wait_state(pane, fleet.agent, screen.PaneState.AWAITING_USER, TURN_TIMEOUT)
    try:
        turns = len(fleet.api.turns())
        result = fleet.send(asker["member_id"], "Are you there?")
        message_id = sent_id(result)
        assert "was not notified" in result.err, result
        assert fleet.notified_at(message_id) is None
        shown = fleet.capture(pane)
        assert marker(message_id) not in shown, shown
        assert screen.classify(fleet.agent, shown) == screen.PaneState.AWAITING_USER, shown
        assert len(fleet.api.turns()) == turns  # nothing answered the dialog
        assert not (fleet.workdir / "never-run").exists()
    finally:
        fleet.press(pane, "Escape")
    fleet.wait_screen(
        pane,
        lambda s: screen.classify(fleet.agent, s) != screen.PaneState.AWAITING_USER,
        TURN_TIMEOUT,
        "the dialog dismissed",
    )
    assert dialog  # kept for the failure message above
    assert not (fleet.workdir / "never-run").exists()
    # the owed preview is delivered by the next send, once
    fleet.wait_composer(pane, fleet.agent, TURN_TIMEOUT)
    second = sent_id(fleet.send(asker["member_id"], "Second try."))
    deliver_owed(fleet, asker, [message_id, second])
    wait_received(fleet, second)
    wait_received(fleet, message_id)
    settle_idle(fleet, asker)
    assert preview_count(fleet.api, marker(message_id)) == 1
    assert preview_count(fleet.api, marker(second)) == 1


QUESTION = {
    "question": "Which colour should the button be?",
    "header": "Colour",
    "options": [
        {"label": "Red", "description": "A red button"},
        {"label": "Blue", "description": "A blue button"},
    ],
}


def question_call(agent: str) -> m.Reply:
    """The model asks its user a question: claude's ``AskUserQuestion``, opencode's
    ``question`` (1.18.33: ``{questions: [{question, header, options: [{label,
    description}], multiple?, custom?}]}``; offered to the TUI with
    ``OPENCODE_ENABLE_QUESTION_TOOL``, tests/support/real_agents.py)."""
    if agent == "claude":
        return m.Reply(tool_calls=[m.ToolCall("AskUserQuestion", {"questions": [dict(QUESTION, multiSelect=False)]})])
    return m.Reply(tool_calls=[m.ToolCall("question", {"questions": [QUESTION]})])


def test_real_question_dialog_is_awaiting_user(fleet, asker):
    pane = asker["pane_id"]
    fleet.api.script.clear()
    fleet.wait_composer(pane, fleet.agent, TURN_TIMEOUT)
    fleet.api.script.push(question_call(fleet.agent))
    fleet.type_keys(pane, "ask me")
    fleet.wait_screen(pane, lambda s: "ask me" in s, 20, "the typed prompt")
    fleet.press(pane, "Enter")
    shown = fleet.wait_screen(pane, lambda s: "Which colour should the button be?" in s, TURN_TIMEOUT, "the question")
    try:
        # the dialog as drawn, read by the cues: never idle (a preview and Enter would answer it)
        shown = fleet.wait_state(pane, fleet.agent, screen.PaneState.AWAITING_USER, 20)
        assert screen.box_text(fleet.agent, shown) in (None, ""), shown
        turns = len(fleet.api.turns())
        result = fleet.send(asker["member_id"], "Pick one for me.")
        message_id = sent_id(result)
        assert fleet.notified_at(message_id) is None, result
        assert "was not notified" in result.err, result
        assert marker(message_id) not in fleet.capture(pane)
        assert len(fleet.api.turns()) == turns  # nothing answered the question
    finally:
        fleet.press(pane, "Escape")
    fleet.wait_screen(
        pane,
        lambda s: screen.classify(fleet.agent, s) != screen.PaneState.AWAITING_USER,
        TURN_TIMEOUT,
        "the question dismissed",
    )
    # the owed preview is delivered once the question is gone, once
    fleet.api.script.clear()
    deliver_owed(fleet, asker, [message_id])
    wait_received(fleet, message_id)
    settle_idle(fleet, asker)
    assert preview_count(fleet.api, marker(message_id)) == 1


def test_real_half_typed_text_is_left_alone(fleet, idle):
    pane = idle["pane_id"]
    half = "a person is typing this"
    fleet.type_keys(pane, half)
    fleet.wait_screen(pane, lambda s: half in composer_text(fleet.agent, s), 20, "the half-typed text")
    turns = len(fleet.api.turns())
    try:
        result = fleet.send(idle["member_id"], "Do not glue me to their text.")
        message_id = sent_id(result)
        shown = fleet.capture(pane)
        assert fleet.notified_at(message_id) is None, result
        assert composer_text(fleet.agent, shown) == half, shown
        assert len(fleet.api.turns()) == turns
        assert received_count(fleet.api, half) == 0
    finally:
        # leave the member clean for the next test: erase whatever the box holds
        box = composer_text(fleet.agent, fleet.capture(pane))
        fleet.press(pane, *["BSpace"] * (len(box) + 4))
        settle_idle(fleet, idle)


def hold_one(fleet, member, body: str) -> dict:
    """A message sent while a person's text is in the box: held, owed; the person's text is
    then erased. Its JSON record comes back."""
    pane = member["pane_id"]
    fleet.type_keys(pane, "person text")
    fleet.wait_screen(pane, lambda s: "person text" in composer_text(fleet.agent, s), 20, "the person's text")
    result = fleet.send(member["member_id"], body, "--json")
    assert result.code == 0 and "was not notified" in result.err, result
    fleet.press(pane, *["BSpace"] * len("person text"))
    fleet.wait_composer(pane, fleet.agent, 20)
    return result.json()


@pytest.mark.parametrize("case", ["acked meanwhile", "typed by a sender with a shorter cut"])
def test_real_our_own_preview_left_in_the_box_is_taken_back(fleet, idle, case):
    """Our own unedited preview shows in the box after the attempt that typed it gave up
    (drawn late, after its echo wait). It is recognised as ours, its header naming a message
    to this member and the rest a prefix of that message's preview, and taken back with one
    BackSpace per character (docs/delivery.md): it never holds the box. Acked meanwhile, it
    is not submitted; still owed, it is typed again whole, and each reaches the model once."""
    from cafleet.delivery.keystrokes.preview import render_preview
    from cafleet.delivery.keystrokes.submit import with_terminator

    pane = idle["pane_id"]
    left = hold_one(fleet, idle, "Left behind in the box: please review the parser changes.")
    cut = 20 if case == "typed by a sender with a shorter cut" else 200
    line = with_terminator(
        render_preview(left["message_id"], left["from_member_id"], left["created_at"], left["text"], cut).replace(
            "\n", "\u23ce"
        )
    )
    fleet.type_keys(pane, line)  # what a late-drawing agent shows after the attempt gave up
    try:
        fleet.wait_screen(pane, lambda s: marker(left["message_id"]) in composer_text(fleet.agent, s), 20, "our text")
        if case == "acked meanwhile":
            assert fleet.cafleet("message", "ack", str(left["message_id"])).code == 0
        turns = len(fleet.api.turns())
        result = fleet.send(idle["member_id"], "The next message.", "--json")
        assert result.code == 0 and result.err == "", result
        after = result.json()["message_id"]
        wait_received(fleet, after)
        settle_idle(fleet, idle)
        expected = 0 if case == "acked meanwhile" else 1
        assert received_count(fleet.api, marker(left["message_id"])) == expected
        assert received_count(fleet.api, marker(after)) == 1
        assert len(fleet.api.turns()) > turns
        if cut == 20:  # the cut copy left in the box was never submitted
            assert received_count(fleet.api, left["text"][:20] + "\u2026") == 0
    finally:  # leave the member clean for the next test whatever happened
        if composer_text(fleet.agent, fleet.capture(pane)):
            fleet.press(pane, *["BSpace"] * (len(line) + 4))
            settle_idle(fleet, idle)


# --- a send right after member create --------------------------------------------------------


@pytest.mark.parametrize("when", ["at once", "composer drawn"])
def test_real_send_right_after_member_create_is_never_stamped_while_lost(fleet, when):
    """The README walkthrough: ``member create`` then a send while the agent starts (at
    once, or as soon as its composer is first drawn, before it has submitted its spawn
    prompt). A stamped preview must reach the model exactly once; an unstamped one is
    owed and delivered once by the next send."""
    record = fleet.create_member(fleet.agent, f"early{len(fleet.api.requests)}", ready=False)
    try:
        if when == "composer drawn":
            fleet.wait_composer(record["pane_id"], fleet.agent, TURN_TIMEOUT)
        result = fleet.send(record["member_id"], "Sent while you start.")
        message_id = sent_id(result)
        stamped = fleet.notified_at(message_id) is not None
        fleet.wait_screen(
            record["pane_id"],
            lambda s: fleet.api.turns() and composer_empty(fleet.agent, s),
            TURN_TIMEOUT,
            "the new member's first turns",
        )
        if stamped:
            got = fleet.api.wait(lambda _: received_count(fleet.api, marker(message_id)), TURN_TIMEOUT)
            assert got == 1, f"message {message_id} was stamped notified but its model received it {got} times"
        # a later send delivers whatever is owed, once
        fleet.wait_composer(record["pane_id"], fleet.agent, TURN_TIMEOUT)
        second = sent_id(fleet.send(record["member_id"], "Second message."))
        deliver_owed(fleet, record, [message_id, second])
        wait_received(fleet, second)
        wait_received(fleet, message_id)
        settle_idle(fleet, record)
        assert received_count(fleet.api, marker(message_id)) == 1
        assert received_count(fleet.api, marker(second)) == 1
    finally:  # its pane goes either way: the module's next tests split the same window
        deleted = fleet.cafleet("member", "delete", str(record["member_id"]))
    assert deleted.code == 0, deleted


# --- a member that runs the cafleet commands itself ------------------------------------------


def test_real_member_polls_acks_and_replies_as_tool_calls(fleet, idle):
    member_id = idle["member_id"]
    shell = "Bash" if fleet.agent == "claude" else "bash"
    body = "Tool-call task: compile the docs."

    def call(command: str, **kwargs) -> m.Reply:
        return m.Reply(tool_calls=[m.ToolCall(shell, {"command": command, "description": "cafleet"})], **kwargs)

    # the message id is known only after the send: the first reply is held until the
    # replies that use it are queued
    hold = threading.Event()
    fleet.api.script.push(call(f"cafleet message poll {member_id}", hold=hold))
    try:
        message_id = sent_id(fleet.send(member_id, body))
        fleet.api.script.push(
            call(f"cafleet message ack {message_id}"),
            call(
                f"cafleet message send --from-member-id {member_id} --to-member-id {fleet.director} "
                f"'done with {message_id}'"
            ),
            m.Reply(text="All done."),
        )
    finally:
        hold.set()
    settle_idle(fleet, idle)
    from tests.support.model_api_anthropic import user_texts

    results = " ".join(user_texts(fleet.api.turns()[-1].body))
    assert body in results, results[-2000:]  # the poll's output came back as the tool result
    assert fleet.status(message_id) == "completed"
    replies = fleet.query(
        "SELECT text FROM messages WHERE from_member_id = ? AND to_member_id = ?", member_id, fleet.director
    )
    assert (f"done with {message_id}",) in replies
