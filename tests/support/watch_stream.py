"""A running `cafleet fleet watch --json` in a subprocess, read line by line with deadlines."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

import pytest

from tests.support.hooked import cafleet_argv


class Stream:
    """A running `fleet watch --json`, read line by line with deadlines."""

    def __init__(self, env, fleet_id, *extra):
        self.proc = subprocess.Popen(
            [*cafleet_argv(env), "fleet", "watch", str(fleet_id), "--json", *extra],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.events: list[dict] = []
        self._buffer = b""

    def _read(self, timeout):
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            return False
        chunk = os.read(self.proc.stdout.fileno(), 65536)
        if not chunk:
            return False
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self.events.append(json.loads(line))
        return True

    def wait_event(self, predicate, timeout=60.0):  # the timeout only bounds a failure
        deadline = time.monotonic() + timeout
        while True:
            for item in self.events:
                if predicate(item):
                    return item
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"no matching event within {timeout}s; got {self.events}")
            self._read(remaining)

    def drain_for(self, seconds):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self._read(max(0.0, deadline - time.monotonic()))

    def count(self, kind, member_id):
        return sum(1 for e in self.events if e["event"] == kind and e["member_id"] == member_id)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        rest = self.proc.stdout.read()
        for line in rest.splitlines():
            self.events.append(json.loads(line))
        return self.proc.returncode
