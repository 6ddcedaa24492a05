"""Runs a measurement plan with as little memory of its own as possible.

A spawned child's peak RSS (wait4's ru_maxrss) includes the resident memory of the
process that spawned it, so the processes being measured are started from this small
runner (builtins only: marshal for the plan and the results) rather than from the
benchmark process that built the databases.

    python -S _spawn_runner.py PLAN RESULTS
PLAN: marshal of (env dict, [(label, argv, extra env), ...]); RESULTS: marshal of [(label, seconds, maxrss_kib), ...]
"""

import marshal
import os
import sys
import time


def main() -> None:
    with open(sys.argv[1], "rb") as handle:
        env, plan = marshal.load(handle)
    devnull = os.open(os.devnull, os.O_WRONLY)
    actions = [(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)]
    results = []
    for label, argv, extra in plan:
        child_env = dict(env, **extra)
        started = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, child_env, file_actions=actions)
        _, status, usage = os.wait4(pid, 0)
        elapsed = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{' '.join(argv)} failed with status {status}")
        results.append((label, elapsed, usage.ru_maxrss))
    with open(sys.argv[2], "wb") as handle:
        marshal.dump(results, handle)


main()
