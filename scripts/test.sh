#!/usr/bin/env bash
# Installs cafleet with its test dependencies (tmux, chromium, pytest, hypothesis,
# Playwright, and the real claude/codex/opencode, installed with npm by their pins) and
# runs the lint, format and type checks (ruff check, ruff format --check, mypy; configured in pyproject.toml), then the
# whole test suite. A failing check fails the script before any test runs. Extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
# The pinned agents, installed once into .cache/agents (again when the pins change); the
# real-agent tests run them by this absolute prefix, never a claude found on PATH.
if [ ! -x .cache/agents/node_modules/.bin/codex ] || [ scripts/check_agent_flags.py -nt .cache/agents ]; then
  .venv/bin/python scripts/check_agent_flags.py --prefix .cache/agents --install-only
  touch .cache/agents
fi
export CAFLEET_AGENT_PREFIX="$PWD/.cache/agents"
.venv/bin/ruff check src tests bench scripts
.venv/bin/ruff format --check src tests bench scripts
.venv/bin/mypy
# Three workers on this two-core machine: most tests wait on real agents, tmux and servers
# rather than compute. Each test file runs whole on one worker (--dist loadfile), so a
# module's one real agent fleet is started once. PYTEST_WORKERS=0 runs in this process.
exec .venv/bin/python -m pytest -n "${PYTEST_WORKERS:-3}" --dist loadfile "$@"
