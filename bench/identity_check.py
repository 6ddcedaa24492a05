"""Benchmark: what checking a placement's identity costs per pane call, in one run.

    python bench/identity_check.py [--rounds N]

Starts a private tmux server (its own socket in a temporary folder) with one pane running
``cat >/dev/null``, and times, interleaved, the pane calls the delivery path makes with a
plain client and with one that checks the pane's recorded identity (``Tmux.expect``):

* capture:         one screen read (the check rides in the same tmux call);
* inspect:         supervision's one-call inspection (the check rides in it too);
* type + Enter:    one ``type_text`` and one ``press_enter`` (one check call before each).

Reports the median of each and the ratio checked/plain. Nothing outside the temporary
folder is touched; only this private server is stopped.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))

from cafleet.mux.tmux import Tmux


def timed(call) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="cafleet-bench-identity-")
    socket = os.path.join(workdir, "tmux.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    subprocess.run(
        [
            "tmux",
            "-f",
            "/dev/null",
            "-S",
            socket,
            "new-session",
            "-d",
            "-s",
            "bench",
            "-x",
            "200",
            "-y",
            "50",
            "--",
            "sh",
            "-c",
            "exec cat >/dev/null",
        ],
        check=True,
        env=env,
        timeout=10,
    )
    try:
        plain = Tmux(socket, timeout=10)
        pane = plain._run(["display-message", "-p", "#{pane_id}"]).strip()
        checked = Tmux(socket, timeout=10)
        checked.expect(pane, checked.identity(pane))
        cases = {
            "capture": lambda mux: mux.capture(pane, 30),
            "inspect": lambda mux: mux.inspect(pane, 30),
            "type + Enter": lambda mux: (mux.type_text(pane, "x"), mux.press_enter(pane)),
        }
        times: dict[tuple[str, str], list[float]] = {
            (case, kind): [] for case in cases for kind in ("plain", "checked")
        }
        for _ in range(args.rounds):
            for case, call in cases.items():
                times[(case, "plain")].append(timed(lambda call=call: call(plain)))
                times[(case, "checked")].append(timed(lambda call=call: call(checked)))
        print(
            f"tmux {subprocess.run(['tmux', '-V'], capture_output=True, text=True).stdout.strip()}, "
            f"{args.rounds} rounds, medians:"
        )
        for case in cases:
            a = statistics.median(times[(case, "plain")]) * 1000
            b = statistics.median(times[(case, "checked")]) * 1000
            print(f"  {case:<13} plain {a:6.2f} ms   checked {b:6.2f} ms   ratio {b / a:4.2f}")
    finally:
        subprocess.run(["tmux", "-S", socket, "kill-server"], capture_output=True, env=env, timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
