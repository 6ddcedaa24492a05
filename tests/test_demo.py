"""`cafleet demo` runs the whole exchange and leaves nothing behind, also on Ctrl-C."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.pause import default_sigint


def processes_using(marker: str) -> list[int]:
    """Pids whose command line or environment mentions ``marker`` (our temp folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            data = (entry / "cmdline").read_bytes() + (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in data:
            found.append(int(entry.name))
    return found


def wait_gone(marker: str, timeout: float = 60.0) -> list[int]:  # the timeout only bounds a failure
    deadline = time.monotonic() + timeout
    while True:
        left = processes_using(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def demo_env(env, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    return dict(env, TMPDIR=str(tmp)), tmp


def test_demo_exchanges_messages_and_cleans_up(env, tmp_path):
    environ, tmp = demo_env(env, tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "cafleet", "demo"], env=environ, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    # What the demo guarantees, not an order it does not control: the Director (member 1)
    # sends alice (2) then bob (3) a task; a member may reply before the second task is
    # sent, so the ids of the second task and the replies depend on who is quicker.
    sent = dict((int(to), int(mid)) for mid, to in re.findall(r"^  sent message (\d+) to member (\d+)$", out, re.M))
    assert sorted(sent) == [2, 3] and sent[2] < sent[3], out + done.stderr
    timeline = {
        (sender, to): (int(mid), rest)
        for mid, sender, to, rest in re.findall(r"^  #(\d+) (\w+) -> (\w+): (.*)$", out, re.M)
    }
    assert sorted(timeline) == [
        ("Director", "alice"),
        ("Director", "bob"),
        ("alice", "Director"),
        ("bob", "Director"),
    ], out
    assert timeline["Director", "alice"] == (sent[2], timeline["Director", "alice"][1])
    assert timeline["Director", "bob"] == (sent[3], timeline["Director", "bob"][1])
    for name, task_id in (("alice", sent[2]), ("bob", sent[3])):
        assert timeline["Director", name][1].startswith("completed, preview typed: "), out
        reply_id, reply = timeline[name, "Director"]
        assert reply_id > task_id and reply.startswith("completed, "), out  # a reply follows its task
    assert sorted(mid for mid, _ in timeline.values()) == [1, 2, 3, 4], out
    assert [line for line in ("member 2: pane closed", "member 3: pane closed") if line not in out] == [], out
    assert out.rstrip().endswith("every message was ACKed."), out
    assert list(tmp.iterdir()) == [], out  # the private tmux socket and database are gone
    assert wait_gone(str(tmp)) == [], out
    assert not Path(env["CAFLEET_DATABASE_URL"]).exists()  # the user's database is untouched


def test_demo_interrupted_tears_everything_down(env, tmp_path):
    environ, tmp = demo_env(env, tmp_path)
    demo = subprocess.Popen(
        [sys.executable, "-m", "cafleet", "demo"],
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    try:
        line = ""
        while "member create" not in line:  # interrupt in the middle, with panes running
            line = demo.stdout.readline()
            assert line, demo.stderr.read()
        time.sleep(0.5)
        demo.send_signal(signal.SIGINT)
        _out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 130
    assert "demo interrupted; tearing down." in err
    assert list(tmp.iterdir()) == []
    assert wait_gone(str(tmp)) == []


def test_demo_under_a_deep_tmpdir_puts_its_socket_where_it_fits(env, tmp_path):
    """A TMPDIR so deep that `<TMPDIR>/cafleet-demo-…/tmux.sock` exceeds a Unix socket's
    107-byte path: the demo's folder goes under /tmp instead, and is removed at the end."""
    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "cafleet", "demo"],
        env=dict(env, TMPDIR=str(deep)),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    socket = re.search(r"private tmux server (\S+),", done.stdout).group(1)
    assert socket.startswith("/tmp/cafleet-demo-") and len(socket.encode()) <= 107, done.stdout
    assert not Path(socket).parent.exists(), done.stdout  # torn down
    assert list(deep.iterdir()) == []
    assert wait_gone(str(Path(socket).parent)) == []
