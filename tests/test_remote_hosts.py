"""Members on another host, reached over a real SSH connection.

"Another host" is a real ``sshd`` on 127.0.0.1 (tests/support/sshd.py) with keys made by the
test; the remote side has its own HOME and tmux socket directory, so the tmux server
cafleet starts there is not the Director's. The Director sits in a private local tmux
server (tests/support/pane_fleet.py); members run the stand-in agent on the remote side and
record what they receive; the database is the test's SQLite file, which the remote
members reach by the same path (it is the same machine). The load test at the end spans
three hosts (this machine and two sshd hosts named in one ssh_config) on a PostgreSQL store.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cafleet.mux.ssh import join_session, split_session
from tests.support.pane_fleet import preview_line, start
from tests.support.remote_fleet import (
    create_remote,
    create_remote_args,
    fleet_with_hosts,
    proc_environ,
    remote_panes,
    short_directory,
)
from tests.support.tmux_fixtures import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.tmux]


@pytest.fixture
def short_dir():
    with short_directory() as path:
        yield path


@pytest.fixture
def remote(env, tmp_path, monkeypatch, short_dir):
    """(fleet, host): a live local fleet and a reachable host for its members."""
    with fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost"]) as (fleet, [host]):
        yield fleet, host


@pytest.fixture
def two_hosts(env, tmp_path, monkeypatch, short_dir):
    """(fleet, hosts): a live local fleet and two reachable hosts: three hosts in all."""
    with fleet_with_hosts(env, tmp_path, monkeypatch, short_dir, ["farhost", "gpuhost"]) as (fleet, hosts):
        yield fleet, hosts


def placement(fleet, member_id: int) -> dict:
    shown = fleet.cafleet("member", "show", str(member_id), "--json")
    assert shown.code == 0, shown
    return shown.json()["placement"]


def test_session_encoding_round_trips_and_keeps_local_sessions_as_they_are():
    assert split_session("$3@/tmp/tmux-0/default") == (None, "$3@/tmp/tmux-0/default")
    stored = join_session("ana@build-box:2222", "$0@/tmp/tmux-0/cafleet")
    assert stored == "ssh://ana@build-box:2222/$0@/tmp/tmux-0/cafleet"
    assert split_session(stored) == ("ana@build-box:2222", "$0@/tmp/tmux-0/cafleet")
    assert split_session("ssh://[::1]:22/$1@/s") == ("[::1]:22", "$1@/s")


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "a b", "box;rm", "", "ssh://box", "box/x"])
def test_a_host_that_is_not_a_destination_is_refused_before_anything_is_written(remote, host):
    fleet, _ = remote
    result = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "x",
        "--description",
        "x",
        "--coding-agent",
        "standin",
        "--host",
        host,
        "Hi",
    )
    assert result.code == 1 and result.err.startswith("Error: ") and "is not a host cafleet can reach" in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert fleet.member_count() == 1  # the Director only


def test_create_spawns_the_member_on_the_host_and_a_send_is_typed_and_submitted_there(remote):
    fleet, host = remote
    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0, created
    record = created.json()
    member_id, pane_id = record["member_id"], record["pane_id"]
    assert record["host"] == host.alias

    # The pane lives on the host's own tmux server (its TMUX_TMPDIR), not the Director's.
    pids = remote_panes(host)
    assert pane_id in pids
    assert str(host.remote_tmux_tmpdir) in host.remote_tmux("display-message", "-p", "#{socket_path}")
    pane_env = proc_environ(int(pids[pane_id]))
    assert pane_env["CAFLEET_HOST"] == host.alias
    assert pane_env["CAFLEET_DATABASE_URL"] == fleet.db
    assert pane_env["CAFLEET_MEMBER_ID"] == str(member_id)
    assert pane_env["HOME"] == str(host.remote_home)

    stored = placement(fleet, member_id)
    where, rest = split_session(stored["session"])
    assert where == host.alias and rest.endswith(host.remote_tmux("display-message", "-p", "#{socket_path}").strip())
    director = placement(fleet, fleet.director)
    assert not director["session"].startswith("ssh://")  # local placements keep today's form

    fleet.wait_ready(member_id)  # `member capture` over SSH
    body = "hello over ssh; it's 'quoted' $HOME `x`"
    sent = fleet.send(fleet.director, member_id, body, "--json")
    assert sent.code == 0 and sent.err == "", sent
    message = sent.json()
    assert fleet.submits(member_id) == [preview_line(message)]
    assert fleet.notified_at(message["message_id"]) is not None

    prompted = fleet.cafleet("member", "prompt", str(member_id), "status, please")
    assert prompted.code == 0, prompted
    assert fleet.submits(member_id)[-1] == "status, please"

    # The member's own cafleet calls reach the same database from the host.
    done = host.ssh(f"cd / && CAFLEET_DATABASE_URL={fleet.db} cafleet message poll {member_id} --json")
    assert done.returncode == 0, done.stderr
    assert message["message_id"] in {m["message_id"] for m in json.loads(done.stdout)}


def test_nothing_test_only_reaches_a_pane_on_another_host(remote, tmp_path):
    """A member created on another host by a command that runs with test hooks (a trace, and
    a pause at a point this command never reaches) gets only cafleet's declared settings:
    no hook variable, and no other undeclared ``CAFLEET_*`` variable, reaches the host. The
    trace and the pause-until file used to be copied into the remote pane's environment."""
    fleet, host = remote
    hooked = dict(
        fleet.environ,
        CAFLEET_TEST_TRACE=str(tmp_path / "trace"),
        CAFLEET_TEST_PAUSE_AT="watch.round",
        CAFLEET_TEST_PAUSE_UNTIL=str(tmp_path / "go"),
        CAFLEET_TEST_TRACE_SQL=str(tmp_path / "sql"),
        CAFLEET_UNDECLARED="x",
        CAFLEET_LOCK_TIMEOUT="30",
    )
    created = fleet.cafleet(  # through the tests' launcher: the hook variables are set
        *create_remote_args(fleet, host, "far"), "--json", "Wait for tasks.", environ=hooked
    )
    assert created.code == 0, created
    pane_env = proc_environ(int(remote_panes(host)[created.json()["pane_id"]]))
    assert pane_env["CAFLEET_LOCK_TIMEOUT"] == "30"  # a declared setting travels
    forwarded = sorted(key for key in pane_env if key.startswith("CAFLEET_"))
    assert [key for key in forwarded if key.startswith("CAFLEET_TEST_") or key == "CAFLEET_UNDECLARED"] == []


def test_previews_share_one_connection_per_host(remote):
    fleet, host = remote
    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0, created
    member_id = created.json()["member_id"]
    fleet.wait_ready(member_id)
    before = host.accepted()
    assert before == 1, "the creation and the captures since shared one connection"
    for i in range(3):
        sent = fleet.send(fleet.director, member_id, f"task {i}")
        assert sent.code == 0 and sent.err == "", sent
    assert len(fleet.submits(member_id)) == 3
    assert host.accepted() == before  # no new handshake for any of them


def test_an_unreachable_host_keeps_the_message_owed_and_shows_the_member_dead(remote):
    fleet, host = remote
    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0, created
    member_id = created.json()["member_id"]
    fleet.wait_ready(member_id)
    host.stop()  # sshd gone and the shared connection closed: the host cannot be reached

    sent = fleet.send(fleet.director, member_id, "are you there?", "--json")
    assert sent.code == 0, sent  # stored: never a failure
    message_id = sent.json()["message_id"]
    assert sent.err.startswith(f"Warning: message {message_id} is stored but member {member_id} was not notified")
    assert f"host {host.alias} cannot be reached over SSH" in sent.err
    assert fleet.notified_at(message_id) is None

    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json")
    assert listed.code == 0, listed
    row = next(r for r in listed.json() if r["member_id"] == member_id)
    assert row["state"] == "dead" and "cannot be reached over SSH" in row["state_detail"]

    proc = start(["fleet", "watch", str(fleet.fleet_id), "--json", "--interval", "0.2"], fleet.environ)
    try:
        events = []

        def dead_reported():
            line = proc.stdout.readline()
            if line:
                events.append(json.loads(line))
            return any(e["event"] == "dead" and e["member_id"] == member_id for e in events)

        wait_for(dead_reported, timeout=30, what="fleet watch to report the member dead")
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    event = next(e for e in events if e["event"] == "dead")
    assert "cannot be reached over SSH" in event["detail"]

    # The host comes back: the owed preview is delivered by the next attempt.
    host.start()
    retried = fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "0")
    assert "was not notified" not in retried.err, retried
    wait_for(lambda: fleet.notified_at(message_id), timeout=20, what="the owed preview")
    assert len(fleet.submits(member_id)) == 1


def test_delete_kills_the_remote_pane(remote):
    fleet, host = remote
    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0, created
    member_id, pane_id = created.json()["member_id"], created.json()["pane_id"]
    assert pane_id in remote_panes(host)
    deleted = fleet.cafleet("member", "delete", str(member_id))
    assert (deleted.code, deleted.out) == (0, f"deleted member {member_id}; pane closed\n"), deleted
    assert pane_id not in remote_panes(host)
    assert fleet.member_count() == 1

    again = create_remote(fleet, host, "again", "--json").json()["pane_id"]
    assert again in remote_panes(host)
    gone = fleet.cafleet("fleet", "delete", str(fleet.fleet_id))
    assert gone.code == 0, gone
    assert again not in remote_panes(host)


def test_create_on_a_host_without_the_agent_writes_nothing(remote):
    fleet, host = remote
    result = fleet.cafleet(
        "member",
        "create",
        "--fleet-id",
        str(fleet.fleet_id),
        "--name",
        "x",
        "--description",
        "x",
        "--coding-agent",
        "codex",
        "--host",
        host.alias,
        "Hi",
    )
    assert result.code == 1, result
    assert result.err == (
        f"Error: codex is not installed on host {host.alias} (not on its PATH for SSH commands); "
        "install it there, or check with `cafleet doctor --host`.\n"
    )
    assert fleet.member_count() == 1

    host.stop()
    down = create_remote(fleet, host, "y")
    assert down.code == 1 and down.err.startswith(f"Error: host {host.alias} cannot be reached over SSH ("), down
    assert len(down.err.splitlines()) == 1 and fleet.member_count() == 1


def test_doctor_checks_the_hosts_of_live_members_and_those_given(remote, tmp_path):
    fleet, host = remote
    assert create_remote(fleet, host, "far").code == 0
    report = fleet.cafleet("doctor", "--json", "--host", "nowhere.invalid")
    entries = {entry["host"]: entry for entry in report.json()["hosts"]["hosts"]}
    far = entries[host.alias]
    assert far["ok"] and far["reachable"] and far["tmux"].startswith("tmux ")
    assert far["coding_agents"] == {"standin": sys.executable}  # what its live members run
    assert far["cafleet"] == str(Path(sys.executable).parent / "cafleet")
    nowhere = entries["nowhere.invalid"]
    assert (nowhere["ok"], nowhere["reachable"]) == (False, False)
    assert "host nowhere.invalid cannot be reached over SSH" in nowhere["error"]
    assert report.code == 1

    text = fleet.cafleet("doctor").out.splitlines()
    assert next(line for line in text if f"host {host.alias}" in line).startswith(
        f"✓ host {host.alias}: reachable over SSH, tmux "
    )
    host.stop()
    down = fleet.cafleet("doctor", "--json")
    assert down.code == 1 and down.json()["hosts"]["hosts"][0]["reachable"] is False


# --- what the host's shell prints, its host key, its address --------------------------------

# bash runs ~/.bashrc for a command sshd starts (Debian builds it to), before the command:
# a greeting on stdout, a line without its newline, a warning on stderr.
CHATTY_BASHRC = 'echo "Welcome to farhost"\nprintf "no newline here"\necho "a warning on stderr" >&2\n'


def test_a_host_whose_shell_prints_at_startup_works_as_any_other(remote):
    fleet, host = remote
    (host.remote_home / ".bashrc").write_text(CHATTY_BASHRC, encoding="utf-8")
    noisy = host.ssh("echo ours")
    assert noisy.stdout == "Welcome to farhost\nno newline hereours\n" and noisy.stderr == "a warning on stderr\n"

    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0 and created.err == "", created
    member_id, pane_id = created.json()["member_id"], created.json()["pane_id"]
    assert pane_id in remote_panes(host)
    fleet.wait_ready(member_id)  # `member capture` over SSH reads the screen, not the greeting
    assert not fleet.cafleet("member", "capture", str(member_id)).out.startswith("Welcome")
    sent = fleet.send(fleet.director, member_id, "through the greeting", "--json")
    assert sent.code == 0 and sent.err == "", sent
    assert fleet.submits(member_id) == [preview_line(sent.json())]
    listed = fleet.cafleet("member", "list", str(fleet.fleet_id), "--state", "--json")
    assert {r["member_id"]: r["state"] for r in listed.json()}[member_id] == "alive", listed

    report = fleet.cafleet("doctor", "--json")
    far = report.json()["hosts"]["hosts"][0]
    assert far["ok"] and far["tmux"].startswith("tmux ") and far["coding_agents"] == {"standin": sys.executable}
    assert far["cafleet"] == str(Path(sys.executable).parent / "cafleet")
    deleted = fleet.cafleet("member", "delete", str(member_id))
    assert (deleted.code, deleted.out) == (0, f"deleted member {member_id}; pane closed\n"), deleted
    assert pane_id not in remote_panes(host)


def test_a_failed_creation_on_a_host_closes_the_session_it_started_there(remote):
    """A stand-in ``tmux`` first on the host's PATH (put there by its .bashrc) runs the real
    one but swallows what new-session reports: the session and its agent run, and cafleet
    does not know their ids. The clean-up finds the session by the member id and database
    cafleet gave it, and closes that one only."""
    fleet, host = remote
    kept = create_remote(fleet, host, "kept", "--json")
    assert kept.code == 0, kept
    kept_pane = kept.json()["pane_id"]
    folder = host.remote_home / "bin"
    folder.mkdir()
    real = shutil.which("tmux")
    wrapper = folder / "tmux"
    wrapper.write_text(
        f'#!/bin/sh\nfor a; do [ "$a" = new-session ] && {{ {real} "$@" >/dev/null; exit $?; }}; done\nexec {real} "$@"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    (host.remote_home / ".bashrc").write_text(f"PATH={folder}:$PATH\n", encoding="utf-8")

    failed = create_remote(fleet, host, "lost")
    assert failed.code == 1 and len(failed.err.splitlines()) == 1, failed
    assert set(remote_panes(host)) == {kept_pane}  # the agent it started is gone; the other member stays
    assert "tmux new-session did not report its pane" in failed.err
    assert f"closed its tmux session on host {host.alias}" in failed.err, failed
    assert fleet.member_count() == 2


def test_doctor_shows_what_a_host_printed_with_its_control_characters_escaped(remote):
    """What the host answers is the host's: a folder on its PATH named with an escape
    sequence (it retitles the terminal) holding a cafleet, and a tmux whose version line
    clears the screen and reverses the text. Text output shows them as escapes; --json
    keeps them exact."""
    fleet, host = remote
    title, clear = "\x1b]0;owned\x07", "\x1b[2J\u202e"
    folder = host.remote_home / f"{title}bin"
    folder.mkdir()
    (folder / "cafleet").write_text("#!/bin/sh\n", encoding="utf-8")
    real = shutil.which("tmux")
    (folder / "tmux").write_text(
        f'#!/bin/sh\n[ "$1" = -V ] && {{ printf "tmux 3.3a{clear}\\n"; exit 0; }}\nexec {real} "$@"\n', encoding="utf-8"
    )
    for program in ("cafleet", "tmux"):
        (folder / program).chmod(0o755)
    (host.remote_home / ".bashrc").write_text(
        'PATH="$HOME/$(printf "\\033]0;owned\\007")bin:$PATH"\n', encoding="utf-8"
    )

    text = fleet.cafleet("doctor", "--host", host.alias)
    assert "\x1b" not in text.out and "\x07" not in text.out and "\u202e" not in text.out, text
    assert f"host {host.alias}: reachable over SSH, tmux 3.3a\\x1b[2J\\u202e" in text.out, text
    assert f"✓ cafleet: {host.remote_home}/\\x1b]0;owned\\x07bin/cafleet" in text.out, text
    entry = fleet.cafleet("doctor", "--json", "--host", host.alias).json()["hosts"]["hosts"][0]
    assert entry["tmux"] == f"tmux 3.3a{clear}" and entry["cafleet"] == f"{folder}/cafleet"


def test_a_changed_host_key_is_reported_as_a_changed_host_key(remote):
    fleet, host = remote
    created = create_remote(fleet, host, "far", "--json")
    assert created.code == 0, created
    member_id = created.json()["member_id"]
    fleet.wait_ready(member_id)
    host.change_host_key()  # reinstalled (or intercepted): known_hosts has the old key

    sent = fleet.send(fleet.director, member_id, "still there?", "--json")
    assert sent.code == 0, sent  # stored; the preview stays owed
    assert f"the SSH host key of {host.alias} has changed" in sent.err and "@@@" not in sent.err, sent
    assert fleet.notified_at(sent.json()["message_id"]) is None

    doctor = fleet.cafleet("doctor")
    line = next(line for line in doctor.out.splitlines() if line.startswith(f"✗ host {host.alias}"))
    assert f"the SSH host key of {host.alias} has changed" in line and "@@@" not in doctor.out, doctor
    known = host.root / "known_hosts"
    assert f'`ssh-keygen -f "{known}" -R "[127.0.0.1]:{host.port}"`' in line, doctor

    again = create_remote(fleet, host, "again")
    assert again.code == 1 and len(again.err.splitlines()) == 1, again
    assert again.err.startswith(f"Error: the SSH host key of {host.alias} has changed"), again
    assert fleet.member_count() == 2


@pytest.mark.parametrize(
    "host, user, hostname, port",
    [
        ("[::1]:2222", None, "::1", "2222"),
        ("ana@[::1]", "ana", "::1", "22"),
        ("ana@[fd00::2]:22", "ana", "fd00::2", "22"),
        ("ana@build-box:2222", "ana", "build-box", "2222"),
        ("127.0.0.1", None, "127.0.0.1", "22"),
    ],
)
def test_every_documented_host_form_is_one_openssh_accepts(tmp_path, host, user, hostname, port):
    """OpenSSH itself reads the destination cafleet builds (``ssh -G``: the configuration it
    would connect with, no connection made); 9.2 refuses ``ssh://[::1]:2222``."""
    from cafleet.mux.ssh import Ssh

    config = tmp_path / "ssh_config"
    config.write_text("", encoding="utf-8")
    environ = {"CAFLEET_SSH_CONFIG": str(config), "CAFLEET_SSH_CONTROL_DIR": str(tmp_path / "control")}
    argv = Ssh(host, environ).argv(["true"])
    done = subprocess.run(
        [argv[0], "-G", *argv[1:]], capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, (argv, done.stderr)
    seen = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    assert (seen["hostname"], seen["port"]) == (hostname, port)
    if user:
        assert seen["user"] == user


def test_a_host_given_with_its_port_is_reached_on_that_port(remote):
    fleet, host = remote
    config = Path(fleet.environ["CAFLEET_SSH_CONFIG"])
    alias_block = host.config.read_text(encoding="utf-8").split("\n")
    # The same settings for the address itself, without a Port: the port comes from the host string.
    address = ["Host 127.0.0.1"] + [line for line in alias_block[2:] if line and not line.strip().startswith("Port")]
    config.write_text(config.read_text(encoding="utf-8") + "\n".join(address) + "\n", encoding="utf-8")
    report = fleet.cafleet("doctor", "--json", "--host", f"127.0.0.1:{host.port}")
    entry = next(e for e in report.json()["hosts"]["hosts"] if e["host"] == f"127.0.0.1:{host.port}")
    assert entry["reachable"] and entry["tmux"].startswith("tmux "), entry


def test_doctor_fix_for_a_host_it_cannot_reach_is_an_ssh_command_that_runs_and_none_for_a_refused_one(remote):
    """The `fix:` line for a host with a port is a command OpenSSH runs as written (the port
    as `-p`, the ssh_config cafleet reads as `-F`): once the host is back, it succeeds. A
    host string doctor refused gets no ssh command (its error says what to give)."""
    import shlex

    fleet, host = remote
    config = Path(fleet.environ["CAFLEET_SSH_CONFIG"])
    alias_block = host.config.read_text(encoding="utf-8").split("\n")
    address = ["Host 127.0.0.1"] + [line for line in alias_block[2:] if line and not line.strip().startswith("Port")]
    config.write_text(config.read_text(encoding="utf-8") + "\n".join(address) + "\n", encoding="utf-8")
    target = f"127.0.0.1:{host.port}"
    host.stop()
    report = fleet.cafleet("doctor", "--host", target)
    assert report.code == 1, report
    [fix] = [line for line in report.out.splitlines() if line.startswith("fix: ") and "`ssh " in line]
    argv = shlex.split(fix.split("`")[1])
    assert argv[0] == "ssh" and argv[argv.index("-p") + 1] == str(host.port), argv
    assert argv[argv.index("-F") + 1] == str(config) and argv[-2:] == ["127.0.0.1", "true"], argv
    host.start()
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=dict(fleet.environ)
    )
    assert done.returncode == 0, (argv, done.stderr)
    # reachable, without the coding agents on its PATH: the install fix's probe is one ssh runs too
    lacking = fleet.cafleet("doctor", "--host", target).out.splitlines()
    [fix] = [line for line in lacking if line.startswith(f"fix: install the coding agent on {target} ")]
    argv = shlex.split(fix.split("`")[1])
    assert argv[argv.index("-p") + 1] == str(host.port) and argv[-4:] == ["127.0.0.1", "command", "-v", "claude"]
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL, env=dict(fleet.environ)
    )
    assert done.returncode == 1, (argv, done.stderr)  # the host ran `command -v claude`: not found there

    refused = fleet.cafleet("doctor", "--json", "--host", "a b")
    [entry] = [e for e in refused.json()["hosts"]["hosts"] if e["host"] == "a b"]
    assert (entry["reachable"], "fix" in entry) == (False, False), entry
    assert "is not a host cafleet can reach" in entry["error"]
    assert "fix" not in refused.json()["hosts"]
    text = fleet.cafleet("doctor", "--host", "a b")
    assert "✗ host a b: 'a b' is not a host cafleet can reach" in text.out, text
    assert not [line for line in text.out.splitlines() if line.startswith("fix: ") and "ssh" in line], text


def test_a_member_on_the_host_wakes_its_neighbours_there_and_leaves_home_panes_to_the_home_machine(remote):
    fleet, host = remote
    near = fleet.create("near")["member_id"]  # beside the Director, on the home machine
    far = create_remote(fleet, host, "far", "--json").json()["member_id"]
    other = create_remote(fleet, host, "other", "--json").json()["member_id"]
    fleet.wait_ready(far)
    fleet.wait_ready(other)
    accepted = host.accepted()

    def send_from_host(to_id: int, body: str):
        """`message send` as the member's agent runs it in its pane on the host."""
        return host.ssh(
            f"CAFLEET_DATABASE_URL={fleet.db} CAFLEET_HOST={host.alias} "
            f"cafleet message send --from-member-id {far} --to-member-id {to_id} --json {body}"
        )

    beside = send_from_host(other, "neighbour")
    assert beside.returncode == 0 and beside.stderr == "", beside  # typed there, without SSH back to itself
    assert fleet.submits(other) == [preview_line(json.loads(beside.stdout))]

    home = send_from_host(near, "home")
    assert home.returncode == 0, home
    message_id = json.loads(home.stdout)["message_id"]
    assert "the pane is on the fleet's home machine" in home.stderr
    assert fleet.submits(near) == [] and fleet.notified_at(message_id) is None
    # The home machine delivers it: the Director's next `message wait` retries what is owed.
    fleet.cafleet("message", "wait", str(fleet.director), "--timeout", "0")
    assert fleet.submits(near) == [preview_line(json.loads(home.stdout))]
    assert host.accepted() == accepted + 2  # only this test's own two ssh commands


def test_a_restarted_tmux_on_the_host_is_stale_and_nothing_is_typed_there(remote, tmp_path):
    fleet, host = remote
    created = create_remote(fleet, host, "far", "--json").json()
    member_id, pane_id = created["member_id"], created["pane_id"]
    fleet.wait_ready(member_id)
    host.kill_remote_tmux()
    marker = tmp_path / "typed.bytes"
    # A new server on the same socket: its first pane gets the same id, running a byte recorder.
    from tests.support.recorder import READY
    from tests.support.tmux_fixtures import RECORDER

    host.remote_tmux("new-session", "-d", "--", sys.executable, str(RECORDER), str(marker))
    assert pane_id in remote_panes(host)
    wait_for(lambda: READY in host.remote_tmux("capture-pane", "-p", "-t", pane_id), what="the recorder")

    sent = fleet.send(fleet.director, member_id, "$(touch nope); echo hi", "--json")
    assert sent.code == 0, sent
    assert f"tmux pane {pane_id} is stale" in sent.err
    assert fleet.notified_at(sent.json()["message_id"]) is None
    assert marker.read_bytes() == b""  # the identity check ran on the host, in the same tmux call


# --- three hosts under load ---------------------------------------------------------------
# This machine and two hosts over SSH, eight stand-in members on each, sixteen senders at
# once, on a PostgreSQL store: the pane-input lock is PostgreSQL's advisory lock, shared by
# every process, and a remote preview is typed over its host's one shared connection.

MEMBERS_PER_HOST = 8
SENDERS = 16
PER_SENDER = 3  # 48 messages: two to each of the 24 members, each sender's three on the three hosts
ROOT = Path(__file__).resolve().parent.parent


def create_member(fleet, host, name: str) -> dict:
    """``member create --coding-agent standin --json`` beside the Director (host None) or on
    ``host``; not waited for."""
    if host is not None:
        created = create_remote(fleet, host, name, "--json")
    else:
        created = fleet.cafleet(
            "member",
            "create",
            "--fleet-id",
            str(fleet.fleet_id),
            "--name",
            name,
            "--description",
            f"{name} here",
            "--coding-agent",
            "standin",
            "--json",
            "Wait for tasks from {director_member_id}.",
        )
    assert created.code == 0 and created.err == "", created
    return created.json()


@pytest.mark.stores("postgres")
def test_three_hosts_eight_members_each_sixteen_senders_lose_nothing_and_preview_each_once(two_hosts, cli, tmp_path):
    fleet, hosts = two_hosts
    places = [None, *hosts]  # None: this machine, beside the Director

    def create_all(host) -> list[dict]:
        made = []
        for i in range(MEMBERS_PER_HOST):
            made.append(create_member(fleet, host, f"{host.alias if host else 'here'}-{i}"))
            if host is None:  # each member splits the Director's pane: share the window out again
                fleet.server.run("select-layout", "-t", fleet.director_pane, "tiled")
        return made

    with ThreadPoolExecutor(len(places)) as pool:  # one place's members in turn, the three places at once
        per_place = list(pool.map(create_all, places))
    for host, made in zip(places, per_place):
        for record in made:
            pane = record["pane_id"]

            def ready(host=host, pane=pane) -> bool:
                shown = (host.remote_tmux if host else fleet.server.run)("capture-pane", "-p", "-t", pane)
                return any(line.startswith(">") for line in shown.splitlines())

            wait_for(ready, timeout=60, what=f"the stand-in in pane {pane} to draw its input line")
    # Interleaved: any three in a row are one on each host.
    members = [made[i]["member_id"] for i in range(MEMBERS_PER_HOST) for made in per_place]
    host_of = {r["member_id"]: (h.alias if h else None) for h, made in zip(places, per_place) for r in made}

    # Sender i sends to three members in a row, one per host; senders i and i + 8 have the
    # same list, so each member gets two messages that reach its pane at about the same
    # moment. Half send as the Director, half as a member that is not their recipient.
    plan = {}
    for i in range(SENDERS):
        to = [members[(i * PER_SENDER + k) % len(members)] for k in range(PER_SENDER)]
        sender = fleet.director if i % 2 == 0 else members[(i * PER_SENDER + 12) % len(members)]
        assert sender not in to
        plan[f"s{i}"] = (sender, to)
    expected = {f"{tag}-{k}": (sender, to[k]) for tag, (sender, to) in plan.items() for k in range(PER_SENDER)}

    trace = tmp_path / "trace"
    environ = dict(
        fleet.environ,
        CAFLEET_SUBMIT_SETTLE="0",  # the stand-in takes Enter at once; the echo is still awaited
        CAFLEET_LOCK_TIMEOUT="300",  # a queue behind a pane only bounds a failure here
        CAFLEET_TEST_TRACE=str(trace),  # the drain's attempts, to bound repeated previews
    )
    senders = []
    for tag, (sender, to) in plan.items():
        out = tmp_path / f"{tag}.jsonl"
        with open(out, "wb") as handle:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tests.support.load_workers",
                    "send",
                    str(sender),
                    ",".join(map(str, to)),
                    str(PER_SENDER),
                    tag,
                ],
                cwd=ROOT,
                env=environ,
                stdout=handle,
                stderr=subprocess.PIPE,
            )
        senders.append((tag, proc, out))
    try:
        for tag, proc, _ in senders:
            _, err = proc.communicate(timeout=600)  # bounds a failure only
            assert (proc.returncode, err.decode()) == (0, ""), f"sender {tag}"
    finally:
        for _, proc, _ in senders:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    sent = [json.loads(line) for _, _, out in senders for line in out.read_bytes().splitlines()]

    # Every printed id is stored once, with its exact body, sender and recipient, and was
    # reported notified (no warning: no process wrote anything on stderr).
    ids = [r["id"] for r in sent]
    assert len(ids) == len(set(ids)) == len(expected)
    rows = fleet.query(
        "SELECT message_id, from_member_id, to_member_id, text, notified_at FROM messages ORDER BY message_id"
    )
    assert [r[0] for r in rows] == sorted(ids)
    assert {r[3]: (r[1], r[2]) for r in rows} == expected
    assert all(r["notified"] for r in sent) and all(r[4] is not None for r in rows)

    # Each preview reached its recipient's pane, whole, on the right host, and nowhere else.
    # At least once: a copy is typed only by an attempt of the drain, and a second copy can
    # only come from an attempt whose submission was not confirmed (its echo not seen in
    # time) and was retried; so copies <= attempts, and exactly one attempt was confirmed.
    # Unless the machine stalls a pane for seconds, every attempt is confirmed: one copy.
    attempts = Counter(trace.read_text(encoding="utf-8").splitlines())
    by_text = {r[3]: r for r in rows}
    previews = {  # message id -> (recipient, the one line its preview is typed as)
        by_text[r["text"]][0]: (
            by_text[r["text"]][2],
            preview_line({**r, "message_id": by_text[r["text"]][0], "from_member_id": by_text[r["text"]][1]}),
        )
        for r in sent
    }
    submitted = {member: Counter(fleet.submits(member)) for member in members}
    for member, got in submitted.items():
        owed = {line for to, line in previews.values() if to == member}
        assert set(got) <= owed, f"member {member} on {host_of[member] or 'this machine'} got another's preview"
    for message_id, (to, line) in previews.items():
        copies = submitted[to][line]
        typed, confirmed = attempts[f"drain.typing {message_id}"], attempts[f"drain.submitted {message_id}"]
        assert confirmed == 1 and 1 <= copies <= typed, (message_id, host_of[to], copies, typed, confirmed)

    # Every message can be ACKed once, and only once.
    for message_id in ids:
        first = cli("message", "ack", str(message_id))
        assert (first.code, first.out, first.err) == (0, f"acknowledged message {message_id}\n", ""), first
        again = cli("message", "ack", str(message_id))
        assert again.code == 1 and again.err.startswith(f"Error: message {message_id} is already acknowledged")
    assert fleet.query("SELECT DISTINCT status_state FROM messages") == [("completed",)]
    for host in hosts:
        assert remote_panes(host).keys() >= {r["pane_id"] for r in per_place[places.index(host)]}
