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

import pytest

from cafleet.delivery.keystrokes import screen
from tests.support.agent_drivers import AGENTS, PERSON_TEXT, TURN_TIMEOUT, Driven, keeper_fleet, missing
from tests.support.keeper import (
    keeper,
    keeper_processes,
    kept_fleet_with_host,
    kill,
    log_lines,
    running_keeper,
)
from tests.support.pane_fleet import preview_line, start
from tests.support.remote_fleet import create_remote
from tests.support.tmux_fixtures import wait_for

real_agent = pytest.mark.real_agent
AGENT_BOUND = 90.0  # waits on a real agent's own work (a turn, a redraw); bounds a failure only:
# opencode on a loaded machine was seen to take over 30 s for a turn
DELIVERY_BOUND = 20.0  # the bound for a send right after `member create`; bounds a failure only


@pytest.fixture(params=AGENTS)
def driven(request, tmp_path):
    """One agent's fleet with the keeper on (``fleet create`` starts it); every keeper of
    its database ended by pid at teardown."""
    reason = missing(request.param)  # before the `env` fixture: it hides CAFLEET_AGENT_PREFIX
    if reason:
        pytest.skip(reason)
    env = monkeypatch = None  # claude and opencode build their own isolated environment
    if request.param == "codex":
        env, monkeypatch = request.getfixturevalue("env"), request.getfixturevalue("monkeypatch")
    with keeper_fleet(request.param, tmp_path, env, monkeypatch) as driven:
        yield driven


def delivered_once(driven: Driven, member_id: int, message_id: int, pane: str, log: str) -> None:
    """Stamped notified (the keeper confirmed the submission), the model holding the
    preview once when the agent is done, and the keeper's log saying it delivered it once."""
    wait_for(
        lambda: driven.notified_at(message_id),
        timeout=AGENT_BOUND,
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
        timeout=AGENT_BOUND,
        interval=0.1,
        what=f"the keeper to find the preview of message {message_id} held",
    )


# --- (a) a send right after `member create`, the Director blocked in `message wait` ----------


@real_agent
def test_a_send_right_after_member_create_reaches_the_model_once_while_the_director_waits(driven):
    """The README walkthrough: `member create`, a send at once (the agent is still
    starting: its input box may not show yet), then `message wait`. No other command runs;
    the preview reaches the member's model once, within 20 s of the pane being able to take
    it: the agent has answered its spawn prompt and shows an empty input box (or the preview
    has already arrived). How long the agent takes to get there is its own (15-50 s for
    opencode on a loaded machine) and is bounded apart."""
    log = driven.running_keeper()["log"]
    member_id, pane = driven.create("early", ready=False)
    sent = driven.send(member_id, "Sent while you start.")
    message_id = sent["message_id"]
    waiting = driven.start_wait()
    try:
        wait_for(
            lambda: driven.received(message_id) or (driven.started() and driven.idle_empty(driven.capture(pane))),
            TURN_TIMEOUT,
            0.1,
            f"{driven.agent} to answer its spawn prompt and show an empty input box",
        )
        wait_for(
            lambda: driven.received(message_id),
            timeout=DELIVERY_BOUND,
            interval=0.1,
            what=f"the model to receive message {message_id} (the send said: {sent['err'].strip()!r}; "
            f"keeper log: {log_lines(log)}; screen: {driven.capture(pane)!r})",
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
    made = driven.workdir / "made-by-the-agent"
    member_id, pane = driven.ask_permission(str(made))
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
        timeout=AGENT_BOUND,
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
        timeout=AGENT_BOUND,
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
    with kept_fleet_with_host(env, tmp_path, monkeypatch) as (fleet, host):
        created = create_remote(fleet, host, "far", "--json")
        assert created.code == 0, created
        member = created.json()["member_id"]
        fleet.wait_ready(member)
        host.stop()
        yield fleet, host, member


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
        timeout=AGENT_BOUND,
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
