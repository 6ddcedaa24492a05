"""`cafleet demo` runs the whole exchange and leaves nothing behind, also on Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


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


def wait_gone(marker: str, timeout: float = 10.0) -> list[int]:
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
    done = subprocess.run([sys.executable, "-m", "cafleet", "demo"], env=environ, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    expected = [
        "sent message 1 to member 2", "sent message 2 to member 3",
        "#1 Director -> alice: completed, preview typed", "#2 Director -> bob: completed, preview typed",
        "#3 alice -> Director: completed", "#4 bob -> Director: completed",
        "member 2: pane closed", "member 3: pane closed",
    ]
    assert [line for line in expected if line not in out] == [], out + done.stderr
    assert out.rstrip().endswith("every message was ACKed."), out
    assert list(tmp.iterdir()) == [], out  # the private tmux socket and database are gone
    assert wait_gone(str(tmp)) == [], out
    assert not Path(env["CAFLEET_DATABASE_URL"]).exists()  # the user's database is untouched


def test_demo_interrupted_tears_everything_down(env, tmp_path):
    environ, tmp = demo_env(env, tmp_path)
    demo = subprocess.Popen([sys.executable, "-m", "cafleet", "demo"], env=environ, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = ""
        while "member create" not in line:  # interrupt in the middle, with panes running
            line = demo.stdout.readline()
            assert line, demo.stderr.read()
        time.sleep(0.5)
        demo.send_signal(signal.SIGINT)
        out, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
    assert demo.returncode == 130
    assert "demo interrupted; tearing down." in err
    assert list(tmp.iterdir()) == []
    assert wait_gone(str(tmp)) == []
