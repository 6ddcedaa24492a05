"""Benchmark: send → submitted latency on the real claude and opencode, in one run.

    CAFLEET_AGENT_PREFIX=.cache/agents python bench/real_agent_latency.py [--sends 20] [--settles 0,0.1,0.3] [claude] [opencode]

For each agent (the pinned program under ``$CAFLEET_AGENT_PREFIX/node_modules/.bin``), a
throw-away fleet in a private tmux server with one member started by ``cafleet member
create``, answering from the scripted model API of the test suite (tests/support). Then,
for each settle delay, N sends one after another, each when the member is idle with an
empty composer, measuring

* submitted: from starting ``cafleet message send`` to the model API receiving a turn that
  carries the preview (the agent really submitted it);
* exited:    from starting the send to the send process exiting (what the caller waits:
  typing, settle, confirmation);
* first-Enter: whether the send exited before the confirmation timeout could have run
  out once (``exited < settle + 2 s``): an Enter taken as a newline, or a box that did not
  clear, costs a retry;
* notified: whether ``notified_at`` was stamped, and the model received the preview
  exactly once.

Median and p95 per agent and settle. Nothing outside the temporary folder is touched; the
programs run offline (the model API listens on 127.0.0.1).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "src"))

CONFIRM_TIMEOUT = 2.0


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def run_agent(agent: str, sends: int, settles: list[float]) -> list[dict]:
    from tests.support.real_agents import agent_version, composer_empty, real_fleet, received_count

    rows = []
    with tempfile.TemporaryDirectory(prefix="cft-bench-") as tmp, real_fleet(agent, Path(tmp)) as fleet:
        member = fleet.create_member(agent, "bench")
        pane = member["pane_id"]
        version = agent_version(agent)
        for settle in settles:
            environ = dict(fleet.environ, CAFLEET_SUBMIT_SETTLE=str(settle))
            submitted, exited, first_enter, exact = [], [], 0, 0
            for n in range(sends):
                fleet.wait_screen(pane, lambda s: composer_empty(agent, s), 90, "an idle member")
                start = time.monotonic()
                done = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "cafleet",
                        "message",
                        "send",
                        "--from-member-id",
                        str(fleet.director),
                        "--to-member-id",
                        str(member["member_id"]),
                        f"Benchmark message {n}.",
                    ],
                    capture_output=True,
                    text=True,
                    env=environ,
                    cwd=fleet.workdir,
                    timeout=120,
                )
                took = time.monotonic() - start
                found = re.search(r"sent message (\d+) ", done.stdout)
                if done.returncode != 0 or not found:
                    raise SystemExit(f"send failed: {done.stderr.strip() or done.stdout.strip()}")
                message_id = int(found.group(1))
                marker = f"[cafleet msg {message_id} from "
                fleet.api.wait(lambda _, marker=marker: received_count(fleet.api, marker), 90)
                arrived = next((r.at for r in fleet.api.turns() if any(marker in t for t in _texts(r.body))), None)
                if arrived is None:
                    raise SystemExit(f"{agent}: message {message_id} never reached the model")
                submitted.append(arrived - start)
                exited.append(took)
                first_enter += took < settle + CONFIRM_TIMEOUT
                fleet.wait_screen(pane, lambda s: composer_empty(agent, s), 90, "the reply")
                exact += fleet.notified_at(message_id) is not None and received_count(fleet.api, marker) == 1
            rows.append(
                {
                    "agent": f"{agent} {version}",
                    "settle": settle,
                    "n": sends,
                    "submitted_p50": statistics.median(submitted),
                    "submitted_p95": p95(submitted),
                    "exited_p50": statistics.median(exited),
                    "exited_p95": p95(exited),
                    "first_enter": first_enter,
                    "exact": exact,
                }
            )
            print(_line(rows[-1]), flush=True)
    return rows


def _texts(body) -> list[str]:
    from tests.support.model_api_anthropic import user_texts

    return user_texts(body)


def _line(row: dict) -> str:
    ms = lambda s: f"{s * 1000:,.0f} ms"
    return (
        f"| {row['agent']} | {row['settle'] * 1000:.0f} ms | {row['n']} | {ms(row['submitted_p50'])} | "
        f"{ms(row['submitted_p95'])} | {ms(row['exited_p50'])} | {ms(row['exited_p95'])} | "
        f"{row['first_enter']}/{row['n']} | {row['exact']}/{row['n']} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agents", nargs="*", default=["claude", "opencode"])
    parser.add_argument("--sends", type=int, default=20)
    parser.add_argument("--settles", default="0.3", help="comma-separated settle delays in seconds (default 0.3)")
    args = parser.parse_args()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the tmux server and agents
    from tests.support.real_agents import skip_reason

    settles = [float(s) for s in args.settles.split(",")]
    print(
        "| agent | settle | sends | submitted p50 | submitted p95 | exited p50 | exited p95 | first Enter | "
        "notified, received once |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for agent in args.agents:
        reason = skip_reason(agent)
        if reason:
            print(f"Error: {reason}", file=sys.stderr)
            return 1
        run_agent(agent, args.sends, settles)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
