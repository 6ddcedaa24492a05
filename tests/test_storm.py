"""Many writers at once against one store: nothing lost, no duplicate ids, no lock errors."""

from __future__ import annotations

STORES = ("sqlite", "postgres")  # every test here runs on both stores (tests/conftest.py)

import subprocess
import sys

WRITERS = 16
PER_WRITER = 15

SCRIPT = r"""
import sys
from cafleet.cli.main import main
from_id, to_id, tag, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
for i in range(count):
    code = main(["message", "send", "--from-member-id", from_id, "--to-member-id", to_id, f"{tag}-{i}", "--json"])
    if code != 0:
        sys.exit(code)
"""


def test_sixteen_concurrent_senders_lose_nothing(env, build, store, store_kind):
    _fleet_id, director, (m1, m2) = build.fleet()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, str(m1 if i % 2 else director), str(m2), f"w{i}", str(PER_WRITER)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(WRITERS)
    ]
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0] * WRITERS, [err for _, err in results]
    assert all(err == b"" for _, err in results)
    import json

    printed_ids = [json.loads(line)["message_id"] for out, _ in results for line in out.splitlines()]
    assert len(printed_ids) == len(set(printed_ids)) == WRITERS * PER_WRITER
    rows = store.execute("SELECT message_id, text FROM messages ORDER BY message_id").fetchall()
    assert sorted(printed_ids) == [r[0] for r in rows]
    assert sorted(r[1] for r in rows) == sorted(f"w{i}-{j}" for i in range(WRITERS) for j in range(PER_WRITER))
    if store_kind == "sqlite":
        assert store.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
