"""A submission's decisions on the screens the pinned agents really drew, in milliseconds.

The real code of delivery/keystrokes/submit.py (its steps and the loop that carries them out) runs
against :class:`tests.support.fake_mux.RecordedPane`, which replays the recorded screens
of claude, codex and opencode (tests/fixtures/screens/) and records every key it is sent,
on a clock whose waits are instant. What the stand-in agent and a real tmux server add
(keys that arrive as typed, a real terminal's history, an agent's own timing) is proven
by the smaller integration tier in tests/test_submit.py."""

from __future__ import annotations

import pytest

from cafleet.config import Settings
from cafleet.delivery.keystrokes import submit
from cafleet.delivery.keystrokes.preview import render_preview
from cafleet.delivery.keystrokes.submit import (
    PaneAwaitingUser,
    PaneInputBusy,
    PaneNotReady,
    SubmissionNotConfirmed,
    submit_preview,
    type_prompt,
)
from cafleet.errors import ConfigError, PaneGone
from tests.support.fake_mux import AGENTS, TYPED, FakeClock, RecordedPane, recordings

TS = "2025-06-01T12:34:56.789012+00:00"
PANE = RecordedPane.PANE


def pacing(**given) -> submit.Pacing:
    return submit.Pacing(**dict({"settle": 0.3, "clock": FakeClock()}, **given))


def line_of(message_id: int, body: str) -> str:
    return f"[cafleet msg {message_id} from 3 {TS}]⏎{body}"


def send(pane: RecordedPane, message_id: int, body: str, **given) -> None:
    preview = render_preview(message_id, 3, TS, body, 200)
    submit_preview(pane, PANE, preview, pane.agent, **dict({"pacing": pacing()}, **given))


agents = pytest.mark.parametrize("agent", AGENTS)


@agents
@pytest.mark.parametrize("state", ["idle", "fresh", "replied", "working", "queued"])
def test_a_preview_is_typed_once_and_submitted_by_one_enter(agent, state):
    pane = RecordedPane(agent, state)
    send(pane, 7, "hello\nworld, ünïcödé 漢字")
    line = line_of(7, "hello⏎world, ünïcödé 漢字")
    assert pane.keys == [("text", line), ("enter",)]
    assert pane.submitted == [line]


@agents
def test_each_dialog_holds_the_preview_before_any_key(agent):
    for state in ("permission", "question"):
        pane = RecordedPane(agent, state)
        with pytest.raises(PaneAwaitingUser) as caught:
            send(pane, 9, "please proceed 1")
        assert str(caught.value) == (
            f"pane {PANE} shows a prompt awaiting its user, so nothing was typed; "
            "answer it in that pane and the message will be retried."
        )
        assert pane.keys == []


def test_codex_starting_gets_no_key():
    pane = RecordedPane("codex", "startup")  # its warning, no box drawn yet
    with pytest.raises(PaneNotReady) as caught:
        send(pane, 27, "early")
    assert str(caught.value) == (
        f"pane {PANE} does not show the codex input box (is that agent running there?), so nothing was typed."
    )
    rows = pane.screens["idle"].split("\n")
    box = next(i for i, row in enumerate(rows) if "Ask Codex to do anything" in row)
    pane.state = "idle"
    pane.screens["idle"] = "\n".join([*rows[:box], "• Waiting for startup", "", *rows[box:]])
    with pytest.raises(PaneNotReady) as caught:
        send(pane, 27, "early")
    assert str(caught.value) == f"pane {PANE} shows codex still starting, so nothing was typed."
    assert pane.keys == []


def test_a_screen_without_the_agents_box_gets_no_key():
    pane = RecordedPane("claude", "idle")
    pane.screens["idle"] = "$ sleep 100\n"
    with pytest.raises(PaneNotReady) as caught:
        send(pane, 10, "anyone there?")
    assert str(caught.value) == (
        f"pane {PANE} does not show the claude input box (is that agent running there?), so nothing was typed."
    )
    assert pane.keys == []


@agents
@pytest.mark.parametrize("state", ["typed", "working_typed"])
def test_a_persons_half_typed_text_is_held_and_left_alone(agent, state):
    pane = RecordedPane(agent, state)
    for _ in range(2):  # the next attempt holds again: nothing piles up
        with pytest.raises(PaneInputBusy) as caught:
            send(pane, 20, "review the parser")
        assert str(caught.value) == (
            f"held: input box has text in pane {PANE} (someone is typing there), so nothing was typed "
            "and that text was left as it is."
        )
    assert pane.keys == [] and TYPED in pane.screen()


@agents
def test_an_enter_that_came_too_soon_is_pressed_again(agent):
    pane = RecordedPane(agent, enters=("ignore",))
    send(pane, 11, "retry me")
    assert pane.keys == [("text", line_of(11, "retry me")), ("enter",), ("enter",)]
    assert pane.submitted == [line_of(11, "retry me")]


@agents
def test_unconfirmed_after_every_retry_takes_our_text_back(agent):
    pane = RecordedPane(agent, enters=("ignore",) * 2)
    with pytest.raises(SubmissionNotConfirmed) as caught:
        send(pane, 13, "stuck", pacing=pacing(enter_retries=1, confirm_timeout=0.3))
    assert str(caught.value) == (
        f"the typed text was still in the input box of pane {PANE} after 2 Enter presses; "
        "the submission is not confirmed; the typed text was removed."
    )
    line = line_of(13, "stuck")
    assert pane.keys == [("text", line), ("enter",), ("enter",), ("backspace", len(line))]
    assert pane.submitted == [] and pane.box == ""


@agents
def test_text_that_never_shows_gets_no_enter(agent):
    pane = RecordedPane(agent, draw_after=None)  # frozen: the box never shows what is typed
    with pytest.raises(SubmissionNotConfirmed) as caught:
        send(pane, 25, "wake up", pacing=pacing(settle=0, echo_timeout=0.5))
    assert str(caught.value) == (
        f"the typed text never showed in the {agent} input box of pane {PANE}, so Enter was not pressed."
    )
    assert pane.keys == [("text", line_of(25, "wake up"))]
    # It wakes: the text sits unsubmitted, and the retry submits it as it stands.
    pane.draw_after = 0
    pane._shown_after = 0
    send(pane, 25, "wake up")
    assert pane.keys[1:] == [("enter",)]
    assert pane.submitted == [line_of(25, "wake up")]


@agents
def test_text_drawn_a_few_captures_late_is_still_seen(agent):
    pane = RecordedPane(agent, draw_after=5)
    send(pane, 12, "settled")
    assert pane.keys == [("text", line_of(12, "settled")), ("enter",)]


@agents
def test_text_cleared_without_an_echo_is_vanished_and_enter_is_not_retried(agent):
    pane = RecordedPane(agent, enters=("clear",))
    with pytest.raises(SubmissionNotConfirmed) as caught:
        send(pane, 26, "first task")
    assert str(caught.value) == (
        f"the typed text vanished from the {agent} input box of pane {PANE} without reaching its "
        "transcript or queue (the agent cleared its input, as it does while starting); Enter is not retried."
    )
    assert pane.keys == [("text", line_of(26, "first task")), ("enter",)]
    send(pane, 26, "first task")  # owed: the retry types it once
    assert pane.submitted == [line_of(26, "first task")]


@agents
def test_an_echo_drawn_late_is_confirmed_not_called_vanished(agent):
    # 2.5 confirm timeouts of captures (0.05 s apart) pass before the echo shows
    pane = RecordedPane(agent, enters=(100,))
    send(pane, 28, "late echo", pacing=pacing(confirm_timeout=2.0))
    assert pane.keys == [("text", line_of(28, "late echo")), ("enter",)]
    assert pane.submitted == [line_of(28, "late echo")]


@agents
def test_a_preview_taken_after_the_attempt_gave_up_is_not_typed_again(agent):
    """The echo comes after the attempt stopped waiting (it fails, vanished); the retry
    finds the header in the transcript and types nothing. A prompt line, which may be meant
    twice, is typed again."""
    pane = RecordedPane(agent, enters=(10_000,))
    with pytest.raises(SubmissionNotConfirmed, match="vanished"):
        send(pane, 29, "taken late", pacing=pacing(confirm_timeout=0.5))
    pane.echoed = len(pane.submitted)  # the late echo is drawn
    keys = list(pane.keys)
    send(pane, 29, "taken late")
    assert pane.keys == keys
    type_prompt(pane, PANE, line_of(29, "taken late"), agent, pacing=pacing())
    assert pane.submitted == [line_of(29, "taken late")] * 2


@agents
def test_an_echo_scrolled_into_the_history_is_found_only_after_an_enter(agent):
    """The echo scrolled out of the captured rows: a retry that knows an Enter was
    pressed before (``earlier``) reads the history and types nothing; one that does not
    types the preview again."""
    pane = RecordedPane(agent)
    pane.history = [f"row {n}" for n in range(100)]
    send(pane, 33, "taken late, then a long answer")
    pane.scroll_out()
    pane.history += [f"(reply line {n} of 80)" for n in range(1, 81)]
    header = "[cafleet msg 33 from 3 "
    assert header not in pane.capture(PANE, submit.CAPTURE_LINES)
    assert header in pane.capture(PANE, submit.HISTORY_LINES)
    keys = list(pane.keys)
    send(pane, 33, "taken late, then a long answer", earlier=True)
    assert pane.keys == keys
    send(pane, 33, "taken late, then a long answer")
    assert pane.keys[len(keys) :] == [("text", line_of(33, "taken late, then a long answer")), ("enter",)]


@agents
def test_the_agents_own_record_counts_as_taken(agent):
    pane = RecordedPane(agent)
    asked = []
    send(pane, 34, "recorded", recorded=lambda: asked.append(1) or True)
    assert asked == [1] and pane.keys == []


@agents
def test_on_enter_is_called_once_right_before_the_first_enter(agent):
    pane = RecordedPane(agent, enters=("ignore",))
    seen = []
    send(pane, 35, "noted", on_enter=lambda: seen.append(list(pane.keys)))
    assert seen == [[("text", line_of(35, "noted"))]]


@agents
@pytest.mark.parametrize("cut", [None, 40, 23])  # whole, cut mid-word, cut before a blank
def test_our_own_leftover_is_submitted_or_replaced_never_glued(agent, cut):
    line = line_of(22, "owed task")
    pane = RecordedPane(agent, box=line if cut is None else line[:cut])
    send(pane, 22, "owed task")
    if cut is None:
        assert pane.keys == [("enter",)]  # whole: submitted as it stands
    else:
        assert pane.keys == [("backspace", cut), ("text", line), ("enter",)]
    assert pane.submitted == [line]


@agents
def test_another_preview_of_ours_is_taken_back_and_an_edited_one_held(agent):
    whole = line_of(23, "the older task, left in the box")
    cut = render_preview(23, 3, TS, "the older task, left in the box", 9).replace("\n", "⏎")
    assert cut.endswith("…")

    def ours(text: str) -> str | None:
        return whole if text.startswith("[cafleet msg 23 from ") else None

    for leftover in (whole, whole[:45], cut):
        pane = RecordedPane(agent, box=leftover)
        send(pane, 24, "new", ours=ours)
        assert pane.submitted == [line_of(24, "new")], leftover
        assert pane.keys[0][0] == "backspace" and pane.keys[1:] == [("text", line_of(24, "new")), ("enter",)]
    for other in (whole.replace("older", "oldest"), line_of(23, "older one, edited by a person")):
        pane = RecordedPane(agent, box=other)
        with pytest.raises(PaneInputBusy):
            send(pane, 24, "new", ours=ours if "oldest" in other else None)
        assert pane.keys == [] and pane.box == other


@agents
@pytest.mark.parametrize("dialog", ["permission", "question"])
def test_a_dialog_that_opens_before_the_confirmation_gets_no_second_enter(agent, dialog):
    pane = RecordedPane(agent, enters=(dialog,))
    with pytest.raises(PaneAwaitingUser) as caught:
        send(pane, 36, "go on")
    assert str(caught.value) == (
        f"pane {PANE} began showing a prompt awaiting its user before the submission was confirmed; "
        "Enter was not pressed again."
    )
    assert pane.keys == [("text", line_of(36, "go on")), ("enter",)]


def test_typed_text_cannot_fake_claudes_menu():
    # A composer row "❯ 1. Yes, ..." looks like claude's permission menu; it is only our
    # own typed text, so Enter is pressed.
    pane = RecordedPane("claude")
    type_prompt(pane, PANE, "1. Yes, merge the branch", "claude", pacing=pacing())
    assert pane.submitted == ["1. Yes, merge the branch"]


@agents
@pytest.mark.parametrize("body", ["see @src/parser.py", "look at @", "mail a@b.c"])
def test_a_trailing_mention_gets_one_blank(agent, body):
    pane = RecordedPane(agent)
    send(pane, 29, body)
    assert pane.submitted == [line_of(29, body) + " "]


def test_a_gone_pane_is_reported():
    pane = RecordedPane("claude")
    pane.kill(PANE)
    with pytest.raises(PaneGone):
        send(pane, 1, "x")


def test_negative_pacing_is_refused_before_any_capture():
    pane = RecordedPane("claude")
    with pytest.raises(ValueError):
        send(pane, 1, "x", pacing=pacing(settle=-1))
    assert pane.captures == 0


@agents
def test_each_agents_placeholder_hint_is_an_empty_box(agent):
    pane = RecordedPane(agent, "fresh")  # started with no prompt: its first placeholder hint
    assert submit.gate(PANE, agent, pane.screen()) == ""
    send(pane, 21, "go")
    assert pane.keys == [("text", line_of(21, "go")), ("enter",)]


def test_with_terminator_only_where_a_completion_could_open():
    from cafleet.delivery.keystrokes.submit import with_terminator

    assert with_terminator("[m]⏎see @src/x.py") == "[m]⏎see @src/x.py "
    assert with_terminator("[m]⏎@x") == "[m]⏎@x "
    assert with_terminator("[m]⏎cost $5") == "[m]⏎cost $5 "
    assert with_terminator("[m]⏎a/b") == "[m]⏎a/b "
    assert with_terminator("/review") == "/review "
    assert with_terminator("[m]⏎plain words") == "[m]⏎plain words"
    assert with_terminator("[m]⏎@x then words") == "[m]⏎@x then words"
    assert with_terminator("[m]⏎ends in a blank @x ") == "[m]⏎ends in a blank @x "


def test_settle_delay_from_the_environment():
    assert Settings({}).submit_settle == 0.3
    assert Settings({"CAFLEET_SUBMIT_SETTLE": "0.15"}).submit_settle == 0.15
    with pytest.raises(ConfigError):
        Settings({"CAFLEET_SUBMIT_SETTLE": "soon"})


# --- the steps themselves: decisions from screens, no pane at all -----------------------------


def test_the_steps_decide_from_the_screens_they_are_sent():
    """Driven by hand: each step is what the screens sent back so far call for."""
    screens = recordings("codex")
    line = line_of(40, "by hand")
    typed = screens["typed"].replace(TYPED, line)
    steps = submit._submission(PANE, line, "codex", pacing(), once=True)
    first = steps.send(None)
    assert isinstance(first, submit.Capture) and first.ansi
    keys = steps.send(screens["idle"])
    assert isinstance(keys, submit.Keys) and keys.text == line
    pause = steps.send(None)
    assert isinstance(pause, submit.Pause) and pause.seconds == 0.3
    watch = steps.send(None)
    assert isinstance(watch, submit.Watch) and watch.check(typed) and not watch.check(screens["idle"])
    assert steps.send((True, typed)) is submit.ENTER
    confirm = steps.send(None)
    echoed = screens["working"].replace(
        next(r for r in screens["working"].split("\n") if "[cafleet msg 1 from 1 " in r), "› " + line
    )
    assert isinstance(confirm, submit.Watch) and confirm.check(echoed) and not confirm.check(typed)
    with pytest.raises(StopIteration):
        steps.send((True, echoed))


@agents
def test_the_gate_on_every_recorded_state(agent):
    expected = {
        "idle": "",
        "fresh": "",
        "replied": "",
        "working": "",
        "queued": "",
        "typed": TYPED,
        "working_typed": TYPED,
        "permission": PaneAwaitingUser,
        "question": PaneAwaitingUser,
    }
    for state, shown in recordings(agent).items():
        want = expected.get(state)
        if want is None:
            continue  # startup: each agent's own (codex's is tested above)
        if isinstance(want, str):
            assert submit.gate(PANE, agent, shown) == want, state
        else:
            with pytest.raises(want):
                submit.gate(PANE, agent, shown)
