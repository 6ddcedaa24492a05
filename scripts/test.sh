#!/usr/bin/env bash
# Installs cafleet with its test dependencies (tmux, chromium, pytest, hypothesis,
# Playwright, and the real claude/codex/opencode command lines for the flag checks) and
# runs the lint, format and type checks (ruff check, ruff format --check, mypy; configured in pyproject.toml), then the
# whole test suite. A failing check fails the script before any test runs. Extra arguments
# go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
if command -v npm >/dev/null 2>&1; then
  if [ ! -x .cache/agents/node_modules/.bin/codex ] || [ scripts/check_agent_flags.py -nt .cache/agents ]; then
    .venv/bin/python scripts/check_agent_flags.py --prefix .cache/agents --install-only \
      || echo "warning: could not install the real coding agents; their flag checks will be skipped" >&2
    touch .cache/agents 2>/dev/null || true
  fi
  export CAFLEET_AGENT_PREFIX="$PWD/.cache/agents"
else
  echo "warning: npm not found; the checks against the real coding agents will be skipped" >&2
fi
.venv/bin/ruff check src tests bench scripts
.venv/bin/ruff format --check src tests bench scripts
.venv/bin/mypy
exec .venv/bin/python -m pytest "$@"
